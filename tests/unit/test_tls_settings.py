"""TLS and exposure settings without a network: the source's options, BrokerConfig's rules,
the loopback test and the hints for failed handshakes."""

from __future__ import annotations

import pickle

import pytest

from rmq_spark.broker.config import BrokerConfig
from rmq_spark.errors import InvalidArgumentError
from rmq_spark.source.discovery import client_config
from rmq_spark.source.options import SourceOptions
from rmq_spark.tls import describe_handshake_failure, is_loopback
from tests.support.tls_ca import Pki, make_pki

BASE = {"endpoints": "127.0.0.1:10911", "topic": "orders"}


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def parse(**options: str) -> SourceOptions:
    return SourceOptions.parse({**BASE, **options}, streaming=False)


def test_source_tls_options_reach_the_client_config(pki):
    opts = parse(
        TLS="true",
        tlscafile=str(pki.ca),
        tlsCertFile=str(pki.client),
        tlsKeyFile=str(pki.client_key),
    )
    opts = pickle.loads(pickle.dumps(opts))  # as the executors get them
    config = client_config(opts)
    assert (config.tls, config.tls_ca_file) == (True, str(pki.ca))
    assert (config.tls_cert_file, config.tls_key_file) == (str(pki.client), str(pki.client_key))
    assert config.channel_credentials() is not None
    assert client_config(parse()).tls is False


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"tls": "yes"}, r"option tls='yes' is invalid: expected true or false"),
        ({"tlsCaFile": "/x.pem"}, "option tlsCaFile only applies with tls=true"),
        ({"tls": "false", "tlsCaFile": "/x.pem"}, "only applies with tls=true"),
        ({"tls": "true", "tlsCertFile": "/x.pem"}, "tlsCertFile needs the option tlsKeyFile"),
        ({"tls": "true", "tlsCaFile": "/no/such.pem"}, "option tlsCaFile /no/such.pem: cannot"),
    ],
)
def test_source_tls_options_are_checked_at_load(options, message):
    with pytest.raises(InvalidArgumentError, match=message):
        parse(**options)


def test_source_tls_files_are_checked_at_load(pki):
    with pytest.raises(InvalidArgumentError, match="does not belong") as info:
        parse(tls="true", tlsCertFile=str(pki.client), tlsKeyFile=str(pki.server_key))
    assert "same path on the driver and every executor" in str(info.value)
    with pytest.raises(InvalidArgumentError, match="not a PEM certificate"):
        parse(tls="true", tlsCaFile=str(pki.server_key))


def test_broker_config_tls_rules(tmp_path, pki):
    with pytest.raises(InvalidArgumentError, match="--tls-key needs --tls-cert"):
        BrokerConfig(tmp_path, tls_key_file=str(pki.server_key))
    with pytest.raises(InvalidArgumentError, match="--tls-client-ca needs --tls-cert"):
        BrokerConfig(tmp_path, tls_client_ca_file=str(pki.ca))
    config = BrokerConfig(
        tmp_path,
        tls_cert_file=str(pki.server),
        tls_key_file=str(pki.server_key),
        tls_client_ca_file=str(pki.ca),
    )
    cert, key, ca = config.tls_material()
    assert b"CERTIFICATE" in cert and b"PRIVATE KEY" in key and ca == pki.ca.read_bytes()
    assert BrokerConfig(tmp_path).tls_material() is None


@pytest.mark.parametrize(
    ("host", "tls", "acl", "insecure", "refused"),
    [
        ("127.0.0.1", False, False, False, False),
        ("127.3.4.5", False, False, False, False),
        ("localhost", False, False, False, False),
        ("::1", False, False, False, False),
        ("0.0.0.0", False, False, False, True),
        ("0.0.0.0", True, False, False, True),
        ("0.0.0.0", False, True, False, True),
        ("0.0.0.0", True, True, False, False),
        ("0.0.0.0", False, False, True, False),
        ("192.0.2.7", False, False, False, True),
        ("::", False, False, False, True),
        ("broker.example", False, False, False, True),
    ],
)
def test_non_loopback_needs_tls_and_acl_or_insecure(
    tmp_path, pki, host, tls, acl, insecure, refused
):
    settings = {"tls_cert_file": str(pki.server), "tls_key_file": str(pki.server)} if tls else {}
    config = BrokerConfig(
        tmp_path, host=host, acl_file="acl" if acl else None, insecure=insecure, **settings
    )
    if refused:
        with pytest.raises(InvalidArgumentError, match=f"refusing to listen on {host}"):
            config.check_exposure()
    else:
        config.check_exposure()


def test_loopback_addresses():
    assert all(map(is_loopback, ["127.0.0.1", "127.255.0.9", "::1", "[::1]", "LOCALHOST"]))
    assert not any(map(is_loopback, ["0.0.0.0", "::", "10.0.0.1", "myhost", ""]))


def test_handshake_hints():
    verify = "Tls handshake failed (TSI_PROTOCOL_FAILURE): ...CERTIFICATE_VERIFY_FAILED: x"
    assert "not trusted" in describe_handshake_failure(verify, True)
    assert "does not serve TLS" in describe_handshake_failure("...WRONG_VERSION_NUMBER...", True)
    assert "client certificate" in describe_handshake_failure("ipv4:x: Socket closed", True)
    assert "tls enabled" in describe_handshake_failure("ipv4:x: Socket closed", False)
    assert describe_handshake_failure("Connection refused", False) is None
