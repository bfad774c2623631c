"""Credentials options of the Spark source (parsed without Spark)."""

from __future__ import annotations

import pytest

from rmq_spark.errors import InvalidArgumentError
from rmq_spark.source.discovery import client_config
from rmq_spark.source.options import SourceOptions

BASE = {"endpoints": "127.0.0.1:10911", "topic": "t"}


def parse(**extra):
    return SourceOptions.parse({**BASE, **extra}, streaming=False)


def test_keys_inline_and_from_file(tmp_path):
    options = parse(accessKey="etl", secretKey="s3cr3t-value")
    assert options.credentials() == {"access_key": "etl", "secret_key": "s3cr3t-value"}
    assert "s3cr3t-value" not in repr(options)
    config = client_config(options)
    assert config.access_key == "etl" and "s3cr3t-value" not in repr(config)
    secret = tmp_path / "secret"
    secret.write_text("from-file\n")
    assert parse(accessKey="etl", secretKeyFile=str(secret)).secret_key == "from-file"
    assert parse().credentials() == {}


@pytest.mark.parametrize(
    "extra, message",
    [
        ({"accessKey": "etl"}, "accessKey needs secretKey"),
        ({"secretKey": "x"}, "accessKey needs secretKey"),
        ({"accessKey": "e", "secretKey": "x", "secretKeyFile": "/f"}, "not both"),
        ({"accessKey": "e", "secretKeyFile": "/nonexistent/secret"}, "cannot read"),
    ],
)
def test_bad_combinations(extra, message):
    with pytest.raises(InvalidArgumentError, match=message):
        parse(**extra)
