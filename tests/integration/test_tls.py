"""TLS brokers and the non-loopback rule, against real broker processes.

A throw-away CA is made for the module (``tls_ca.make_pki``); brokers are bound to
127.0.0.1 or 0.0.0.0, and every client connects through 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from rmq_spark.client import (
    Admin,
    ClientConfig,
    ConsumerConfig,
    Producer,
    ProducerConfig,
    PullConsumer,
)
from rmq_spark.errors import InvalidArgumentError, UnavailableError
from tests.support.broker_harness import TEST_STORE_FLAGS, BrokerProcess
from tests.support.cli import Cli
from tests.support.tls_ca import Pki, make_pki

BROKER = [sys.executable, "-m", "rmq_spark.broker"]
#: how soon a misconfigured client must give up (it retries UNAVAILABLE)
FAIL_WITHIN_S = 5.0


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def _broker(root: Path, name: str, *flags: str) -> BrokerProcess:
    return BrokerProcess(name, root / name, root / f"{name}.log", [*TEST_STORE_FLAGS, *flags])


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory, pki) -> BrokerProcess:
    process = _broker(
        tmp_path_factory.mktemp("tls"),
        "broker-tls",
        "--tls-cert",
        str(pki.server),
        "--tls-key",
        str(pki.server_key),
    ).start()
    yield process
    process.clean_up()


@pytest.fixture(scope="module")
def mtls_broker(tmp_path_factory, pki) -> BrokerProcess:
    process = _broker(
        tmp_path_factory.mktemp("mtls"),
        "broker-mtls",
        "--tls-cert",
        str(pki.server),
        "--tls-key",
        str(pki.server_key),
        "--tls-client-ca",
        str(pki.ca),
    ).start()
    yield process
    process.clean_up()


def tls_config(pki: Pki, cls=ClientConfig, **extra):
    return cls(tls=True, tls_ca_file=str(pki.ca), **extra)


def timed_failure(make_call) -> tuple[BaseException, float]:
    started = time.monotonic()
    with pytest.raises(UnavailableError) as caught:
        make_call()
    return caught.value, time.monotonic() - started


# -- clients over TLS --------------------------------------------------------------------


def test_producer_pull_consumer_and_admin_work_over_tls(tls_broker, pki):
    endpoint = tls_broker.endpoint
    with Admin(endpoint, tls_config(pki)) as admin:
        admin.create_topic("TlsOrders", queues=2)
        assert "TlsOrders" in {i.topic for infos in admin.list_topics().values() for i in infos}
    with Producer(endpoint, config=tls_config(pki, ProducerConfig)) as producer:
        producer.send_batch("TlsOrders", [f"m{i}".encode() for i in range(10)])
    config = tls_config(pki, ConsumerConfig, consume_from="FIRST_OFFSET")
    with PullConsumer(endpoint, group="tls-g", config=config) as consumer:
        queues = consumer.queues("TlsOrders")
        consumer.assign(queues)
        consumer.seek_to_beginning(queues)
        bodies = []
        deadline = time.monotonic() + 20
        while len(bodies) < 10 and time.monotonic() < deadline:
            for result in consumer.poll(timeout_ms=500):
                bodies += result.batch.column("body").to_pylist()
        consumer.commit()
    assert sorted(bodies) == sorted(f"m{i}".encode() for i in range(10))
    with Admin(endpoint, tls_config(pki)) as admin:
        assert sum(p.lag for p in admin.consumer_progress("tls-g", "TlsOrders")) == 0
    assert "TLS (store" in tls_broker.log_text()  # the broker says how it serves


def test_plaintext_client_at_a_tls_broker_fails_fast_and_says_tls(tls_broker):
    error, took = timed_failure(lambda: Admin(tls_broker.endpoint).list_topics())
    assert took < FAIL_WITHIN_S, took
    assert "TLS" in str(error) and tls_broker.endpoint in str(error), error


def test_tls_client_with_the_wrong_ca_fails_fast_and_says_certificate(tls_broker, pki):
    config = ClientConfig(tls=True, tls_ca_file=str(pki.other_ca))
    error, took = timed_failure(lambda: Admin(tls_broker.endpoint, config).list_topics())
    assert took < FAIL_WITHIN_S, took
    assert "TLS handshake failed" in str(error), error
    assert "certificate is not trusted" in str(error), error


def test_tls_client_at_a_plaintext_broker_fails_fast(tmp_path, pki):
    plain = _broker(tmp_path, "broker-plain").start()
    try:
        error, took = timed_failure(lambda: Admin(plain.endpoint, tls_config(pki)).list_topics())
    finally:
        plain.clean_up()
    assert took < FAIL_WITHIN_S, took
    assert "does not serve TLS" in str(error), error


def test_mutual_tls_needs_a_client_certificate_of_the_trusted_ca(mtls_broker, pki):
    endpoint = mtls_broker.endpoint
    with Admin(
        endpoint,
        tls_config(pki, tls_cert_file=str(pki.client), tls_key_file=str(pki.client_key)),
    ) as admin:
        admin.create_topic("MtlsTopic", queues=1)
    error, took = timed_failure(lambda: Admin(endpoint, tls_config(pki)).list_topics())
    assert took < FAIL_WITHIN_S, took
    assert "client certificate" in str(error), error
    stranger = tls_config(
        pki, tls_cert_file=str(pki.other_client), tls_key_file=str(pki.other_client_key)
    )
    error, _ = timed_failure(lambda: Admin(endpoint, stranger).list_topics())
    assert "TLS" in str(error), error
    assert "mutual TLS" in mtls_broker.log_text()


def test_client_tls_settings_are_checked_when_the_client_is_made(pki, tmp_path):
    with pytest.raises(InvalidArgumentError, match="tls_ca_file is set but tls is False"):
        ClientConfig(tls_ca_file=str(pki.ca))
    with pytest.raises(InvalidArgumentError, match="go together"):
        ClientConfig(tls=True, tls_cert_file=str(pki.client))
    missing = tmp_path / "nope.pem"
    with pytest.raises(InvalidArgumentError, match=f"tls_ca_file {missing}: cannot read"):
        Admin("127.0.0.1:1", ClientConfig(tls=True, tls_ca_file=str(missing)))
    with pytest.raises(InvalidArgumentError, match="not a PEM certificate"):
        Admin("127.0.0.1:1", ClientConfig(tls=True, tls_ca_file=str(pki.client_key)))
    mismatched = tls_config(pki, tls_cert_file=str(pki.client), tls_key_file=str(pki.server_key))
    with pytest.raises(InvalidArgumentError, match="does not belong to this certificate"):
        Admin("127.0.0.1:1", mismatched)


# -- the broker's flags ------------------------------------------------------------------


def run_broker(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*BROKER, *args], capture_output=True, text=True, timeout=60)


def assert_one_error_line(run: subprocess.CompletedProcess, code: int, *needles: str) -> str:
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert run.returncode == code, run
    assert "Traceback" not in run.stderr, run.stderr
    errors = [line for line in lines if "error:" in line]
    assert len(errors) == 1, run.stderr
    for needle in needles:
        assert needle in errors[0], errors[0]
    return errors[0]


def test_bad_tls_and_acl_flags_are_one_error_line_and_exit_2(tmp_path, pki):
    store = ["--store", str(tmp_path / "store"), "--port", "0"]
    missing = tmp_path / "missing.pem"
    tls = ["--tls-cert", str(pki.server), "--tls-key", str(pki.server_key)]
    cases = [
        (["--tls-cert", str(pki.server)], ["--tls-cert needs --tls-key"]),
        (
            ["--tls-cert", str(missing), "--tls-key", str(pki.server_key)],
            ["--tls-cert", str(missing), "cannot read"],
        ),
        (
            ["--tls-cert", str(pki.server), "--tls-key", str(pki.client_key)],
            ["--tls-cert", "--tls-key", str(pki.client_key), "does not belong"],
        ),
        (
            ["--tls-cert", str(pki.server_key), "--tls-key", str(pki.server_key)],
            ["--tls-cert", "not a PEM certificate"],
        ),
        (
            [*tls, "--tls-client-ca", str(missing)],
            ["--tls-client-ca", str(missing)],
        ),
        (["--tls-client-ca", str(pki.ca)], ["--tls-client-ca needs --tls-cert"]),
        (["--acl", str(missing)], ["--acl", str(missing), "no such file"]),
    ]
    processes = [
        subprocess.Popen(
            [*BROKER, *store, *flags], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for flags, _ in cases
    ]
    for process, (_, needles) in zip(processes, cases, strict=True):
        out, err = process.communicate(timeout=60)
        run = subprocess.CompletedProcess(process.args, process.returncode, out, err)
        assert_one_error_line(run, 2, *needles)
    assert not (tmp_path / "store").exists()  # nothing was opened


def test_non_loopback_address_needs_tls_and_acl_or_insecure(tmp_path, pki):
    acl = tmp_path / "acl.yaml"
    acl.write_text("# rules\n")
    tls = ["--tls-cert", str(pki.server), "--tls-key", str(pki.server_key)]
    store = ["--store", str(tmp_path / "store"), "--port", "0", "--host", "0.0.0.0"]
    bare, tls_only = (run_broker(*store, *flags) for flags in ([], tls))
    line = assert_one_error_line(bare, 1, "refusing to listen on 0.0.0.0", "--insecure")
    assert "--tls-cert" in line and "--acl" in line, line
    assert "no TLS and no access control" in line, line
    line = assert_one_error_line(tls_only, 1, "refusing to listen on 0.0.0.0", "--acl")
    assert "no access control" in line and "no TLS" not in line, line


def test_insecure_non_loopback_broker_starts_and_warns(tmp_path):
    process = _broker(tmp_path, "broker-open", "--host", "0.0.0.0", "--insecure").start()
    try:
        with Admin(process.endpoint) as admin:  # bound to 0.0.0.0, reached via 127.0.0.1
            admin.create_topic("OpenTopic", queues=1)
        warnings = [line for line in process.log_text().splitlines() if " WARNING " in line]
        assert any(
            "0.0.0.0" in w and "WITHOUT TLS and WITHOUT access control" in w for w in warnings
        ), process.log_tail()
        process.stop()
        process.start()  # the warning comes on every start
        warnings = [line for line in process.log_text().splitlines() if "WITHOUT TLS" in line]
        assert len(warnings) == 2, process.log_tail()
    finally:
        process.clean_up()


def test_non_loopback_broker_with_tls_and_acl_starts_without_warning(tmp_path, pki):
    acl = tmp_path / "acl.json"
    acl.write_text(
        '{"users": [{"username": "admin", "password": "s3cret-admin", "userType": "Super"}],'
        ' "acls": []}'
    )
    process = _broker(
        tmp_path,
        "broker-safe",
        "--host",
        "0.0.0.0",
        "--tls-cert",
        str(pki.server),
        "--tls-key",
        str(pki.server_key),
        "--acl",
        str(acl),
    ).start()
    try:
        config = tls_config(pki, access_key="admin", secret_key="s3cret-admin")
        with Admin(process.endpoint, config) as admin:
            admin.create_topic("SafeTopic", queues=1)
        assert " WARNING " not in process.log_text(), process.log_tail()
    finally:
        process.clean_up()


# -- the CLI -----------------------------------------------------------------------------


def test_cli_with_tls_creates_sends_and_consumes(tls_broker, pki):
    cli = Cli(tls_broker.endpoint)
    tls = ["--tls", "--tls-ca-file", str(pki.ca)]
    cli.run("topic", "create", "CliTls", "--queues", "1", *tls).ok()
    cli.run("send", "CliTls", "one", "two", *tls).ok()
    run = cli.run("consume", "CliTls", "--max", "2", "--json", *tls).ok()
    assert [row["body"] for row in run.json_lines()] == ["one", "two"]
    plain, wrong_ca, file_without_tls = cli.run_all(
        ["topic", "list"],
        ["topic", "list", "--tls", "--tls-ca-file", str(pki.other_ca)],
        ["topic", "list", "--tls-ca-file", str(pki.ca)],
    )
    plain.failed("TLS", tls_broker.endpoint)
    wrong_ca.failed("TLS handshake failed", "certificate")
    file_without_tls.failed("--tls-ca-file needs --tls")


# -- the official RocketMQ 5 client ------------------------------------------------------

OFFICIAL_CLIENT = textwrap.dedent(
    """
    import json, sys, time
    from rocketmq import ClientConfiguration, Credentials, FilterExpression, Message
    from rocketmq import Producer, SimpleConsumer

    endpoint, topic = sys.argv[1], sys.argv[2]
    config = ClientConfiguration(endpoint, Credentials(), request_timeout=5)
    producer = Producer(config, (topic,), tls_enable=True)
    producer.startup()
    ids = []
    for i in range(3):
        message = Message()
        message.topic = topic
        message.body = f"v2-{i}".encode()
        ids.append(producer.send(message).message_id)
    producer.shutdown()
    consumer = SimpleConsumer(
        config, "tls-v2-group", {topic: FilterExpression("*")}, await_duration=2,
        tls_enable=True,
    )
    consumer.startup()
    got = []
    deadline = time.monotonic() + 20
    while len(got) < 3 and time.monotonic() < deadline:
        for message in consumer.receive(16, 15):
            got.append(message.body.decode())
            consumer.ack(message)
    consumer.shutdown()
    print(json.dumps({"sent": ids, "received": sorted(got)}), flush=True)
    """
)


def test_official_rocketmq5_client_with_tls_enable(tls_broker, pki, tmp_path):
    pytest.importorskip("rocketmq")
    with Admin(tls_broker.endpoint, tls_config(pki)) as admin:
        admin.create_topic("V2Tls", queues=2)
    script = tmp_path / "official_client.py"
    script.write_text(OFFICIAL_CLIENT)
    # The official client trusts gRPC's default roots; point them at the test CA. gRPC
    # reads the variable once per process, when the first channel with default roots is
    # made (after importing grpc is early enough), so the client runs in its own process.
    env = {**os.environ, "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": str(pki.ca)}
    run = subprocess.run(
        [sys.executable, str(script), tls_broker.endpoint, "V2Tls"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert len(result["sent"]) == 3
    assert result["received"] == ["v2-0", "v2-1", "v2-2"], run.stderr[-3000:]
