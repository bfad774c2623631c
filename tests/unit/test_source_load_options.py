"""The data source parses its options once, at ``load()``: the files they name are read
once, and the processes Spark pickles the source to use the parsed options as they are.
Also which error ``load()`` raises, and the reader a ``filterPushdown`` read gets. No Spark
session: the source's methods are called the way pyspark's workers call them."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark import cloudpickle
from pyspark.sql.datasource import EqualTo

from rmq_spark import tls
from rmq_spark.datasource import RocketliteDataSource
from rmq_spark.datasource.load_options import load_error
from rmq_spark.errors import InvalidArgumentError
from rmq_spark.sink.options import SinkOptions
from rmq_spark.source.batch_reader import FilteringBatchReader, RocketliteBatchReader
from rmq_spark.source.options import SourceOptions
from rmq_spark.source.schema import SPARK_SCHEMA
from tests.support.tls_ca import Pki, make_pki

BASE = {"endpoints": "127.0.0.1:10911", "topic": "orders"}


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def counted(monkeypatch):
    """Counts of TLS file reads, secret key file reads and option parses, by name."""
    counts = {"tls files": 0, "secret file": 0, "parses": 0}
    read_pem, read_text = tls.read_pem, Path.read_text
    source_parse, sink_parse = SourceOptions.parse.__func__, SinkOptions.parse.__func__

    def counting_read_pem(*args, **kwargs):
        counts["tls files"] += 1
        return read_pem(*args, **kwargs)

    def counting_read_text(path, *args, **kwargs):
        counts["secret file"] += path.name == "secret"
        return read_text(path, *args, **kwargs)

    def counting(parse):
        def counted_parse(cls, *args, **kwargs):
            counts["parses"] += 1
            return parse(cls, *args, **kwargs)

        return classmethod(counted_parse)

    monkeypatch.setattr(tls, "read_pem", counting_read_pem)
    monkeypatch.setattr(Path, "read_text", counting_read_text)
    monkeypatch.setattr(SourceOptions, "parse", counting(source_parse))
    monkeypatch.setattr(SinkOptions, "parse", counting(sink_parse))
    return counts


def test_files_are_read_once_at_load_and_never_in_the_planning_processes(pki, tmp_path, counted):
    secret = tmp_path / "secret"
    secret.write_text("s3cr3t\n")
    ca = tmp_path / "ca.pem"
    ca.write_bytes(pki.ca.read_bytes())
    options = {
        **BASE,
        "tls": "true",
        "tlsCaFile": str(ca),
        "accessKey": "etl",
        "secretKeyFile": str(secret),
    }
    # pyspark's create_data_source worker: the source, its schema, then the pickled source
    source = RocketliteDataSource(options)
    assert source.schema() is SPARK_SCHEMA
    pickled = cloudpickle.dumps(source)
    # one parse per use Spark may make (stream, batch, write), the files read once
    assert counted == {"tls files": 1, "secret file": 1, "parses": 3}

    # The planning workers get the pickled source: with the files gone, a read of them
    # would fail (as a new load now does), and the parsed options are used as they are.
    secret.unlink()
    ca.unlink()
    with pytest.raises(InvalidArgumentError, match="option secretKeyFile: cannot read"):
        RocketliteDataSource(options)
    before = dict(counted)
    planner = cloudpickle.loads(pickled)
    batch = planner.reader(SPARK_SCHEMA)
    stream = cloudpickle.loads(pickled).streamReader(SPARK_SCHEMA)
    sink = cloudpickle.loads(pickled).parsed_options.writer()
    assert counted == before
    assert type(batch) is RocketliteBatchReader
    assert (batch.options.streaming, stream.options.streaming) == (False, True)
    assert (batch.options.secret_key, stream.options.secret_key, sink.secret_key) == (
        "s3cr3t", "s3cr3t", "s3cr3t",
    )  # fmt: skip
    assert batch.options.tls_ca_file == str(ca)  # connections read it where they are made


def test_a_mode_that_cannot_use_the_options_fails_with_its_error_when_its_reader_is_made():
    source = RocketliteDataSource({**BASE, "maxMessagesPerTrigger": "10"})
    assert source.streamReader(SPARK_SCHEMA).options.max_messages_per_trigger == 10
    with pytest.raises(InvalidArgumentError, match="maxMessagesPerTrigger only applies to st"):
        source.reader(SPARK_SCHEMA)
    with pytest.raises(InvalidArgumentError, match="unknown option 'maxMessagesPerTrigger'"):
        source.parsed_options.writer()


@pytest.mark.parametrize(
    ("keys", "streaming", "batch", "sink", "raised"),
    [
        ({"topic"}, None, None, "w", None),
        ({"topic"}, "s", None, "w", None),  # a batch read can use them
        ({"topic"}, None, "b", "w", None),  # a stream can use them
        ({"topic"}, "s", "b", None, None),  # a write can use them
        ({"topic"}, "s", "b", "w", "s\nAs options of a write: w"),
        ({"topic"}, "s", "b", "s", "s"),  # the same error once
        ({"endingoffsets"}, "s", "b", "w", "b\nAs options of a write: w"),  # batch only
        ({"endingoffsets"}, "s", None, "w", None),
        ({"maxmessagespertrigger"}, "s", None, "w", "s\nAs options of a write: w"),
        ({"sendbatchsize"}, None, None, "w", "w"),  # sink only: the write's error
        ({"sendbatchsize"}, "s", "b", None, None),
    ],
)
def test_which_error_load_raises(keys, streaming, batch, sink, raised):
    assert load_error(keys, streaming, batch, sink) == raised


def test_a_filter_pushdown_read_takes_the_filters_spark_pushes():
    source = RocketliteDataSource({**BASE, "filterPushdown": "true"})
    reader = source.reader(SPARK_SCHEMA)
    assert isinstance(reader, FilteringBatchReader)
    assert reader.pushed.queue_ids is None  # nothing pushed yet: every queue
    # The planner with pushdown calls it: the reader takes queueId, leaves keys to Spark.
    keys = EqualTo(("keys",), "k1")
    assert reader.pushFilters([EqualTo(("queueId",), 2), keys]) == [keys]
    pushed = cloudpickle.loads(cloudpickle.dumps(reader)).pushed  # as the tasks get it
    assert pushed.queue_ids == frozenset({2})
