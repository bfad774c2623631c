"""TLS on the remoting port: the same certificate files as the gRPC port, TLS only (a
plaintext client is hung up on, as the gRPC port refuses it), and mutual TLS when the broker
names a client CA. Told apart from plaintext by the first byte, as RocketMQ's broker does."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from rmq_spark.client import Admin, ClientConfig
from rmq_spark.client.remoting import RemotingClient
from rmq_spark.codec.arrow_decode import decode_records
from rmq_spark.errors import NotFoundError, UnavailableError
from rmq_spark.structs import MessageQueue, PullStatus
from tests.support.broker_harness import TEST_STORE_FLAGS, BrokerProcess
from tests.support.tls_ca import Pki, make_pki


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def _start(root: Path, name: str, pki: Pki, *flags: str) -> BrokerProcess:
    tls = ["--tls-cert", str(pki.server), "--tls-key", str(pki.server_key)]
    args = [*TEST_STORE_FLAGS, "--remoting-port", "0", *tls, *flags]
    return BrokerProcess(name, root / name, root / f"{name}.log", args).start()


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory, pki):
    process = _start(tmp_path_factory.mktemp("remoting-tls"), "broker-a", pki)
    config = ClientConfig(tls=True, tls_ca_file=str(pki.ca))
    with Admin(process.endpoint, config) as admin:
        admin.create_topic("TlsTopic", queues=2)
    yield process
    process.clean_up()


def _fast(**tls) -> ClientConfig:
    from rmq_spark.client.connection import NO_RETRY

    return ClientConfig(request_timeout_ms=3000, retry=NO_RETRY, **tls)


def test_a_tls_client_sends_and_pulls(tls_broker, pki):
    # the default timeouts and retries: a busy machine may take over 3 s for the handshake
    # and the first answer, and nothing here needs to fail fast
    config = ClientConfig(tls=True, tls_ca_file=str(pki.ca))
    with RemotingClient(tls_broker.remoting_address, config) as client:
        mq = MessageQueue("TlsTopic", "broker-a", 1)
        sent = client.send(mq, [b"over tls"], [{"TAGS": "Secure"}])
        answer = client.pull(mq, sent.queue_offset)
    assert answer.status == PullStatus.FOUND
    assert decode_records(answer.data).column("body").to_pylist() == [b"over tls"]


def test_a_plaintext_client_is_hung_up_on(tls_broker):
    started = time.monotonic()
    with (
        RemotingClient(tls_broker.remoting_address, _fast()) as client,
        pytest.raises(UnavailableError, match=r"closed the connection|failed"),
    ):
        client.route("TlsTopic")
    assert time.monotonic() - started < 3
    assert "serves TLS only" in tls_broker.log_text()


def test_a_client_that_does_not_trust_the_broker_fails(tls_broker, pki):
    config = _fast(tls=True, tls_ca_file=str(pki.other_ca))
    with (
        RemotingClient(tls_broker.remoting_address, config) as client,
        pytest.raises(UnavailableError, match="CERTIFICATE_VERIFY_FAILED"),
    ):
        client.route("TlsTopic")


def test_mutual_tls_needs_a_client_certificate_of_the_trusted_ca(tmp_path, pki):
    broker = _start(tmp_path, "broker-m", pki, "--tls-client-ca", str(pki.ca))
    try:
        trusted = _fast(
            tls=True,
            tls_ca_file=str(pki.ca),
            tls_cert_file=str(pki.client),
            tls_key_file=str(pki.client_key),
        )
        with (
            RemotingClient(broker.remoting_address, trusted) as client,
            pytest.raises(NotFoundError, match="TlsTopic"),  # connected, and answered
        ):
            client.route("TlsTopic")
        for config in (
            _fast(tls=True, tls_ca_file=str(pki.ca)),
            _fast(
                tls=True,
                tls_ca_file=str(pki.ca),
                tls_cert_file=str(pki.other_client),
                tls_key_file=str(pki.other_client_key),
            ),
        ):
            with (
                RemotingClient(broker.remoting_address, config) as client,
                pytest.raises(UnavailableError),
            ):
                client.route("TlsTopic")
    finally:
        broker.clean_up()
