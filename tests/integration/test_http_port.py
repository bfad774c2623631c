"""The broker's HTTP port against a real broker process: ``/metrics`` parsed with
prometheus-client's own parser must say what the test sent, consumed and committed through
each of the three protocols; ``/healthz`` and ``/readyz`` and the gRPC health service
follow the broker's state; ACL asks for an ACL user's keys and shows each user its own
topics; malformed HTTP gets a 4xx and the broker keeps serving.
"""

from __future__ import annotations

import base64
import http.client
import json
import socket
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client.parser import text_string_to_metric_families
from rocketmq import FilterExpression, SimpleConsumer
from rocketmq import Producer as V2Producer

from rmq_spark.client import Admin, ClientConfig, Producer, PullConsumer
from rmq_spark.client.producer import ProducerConfig
from rmq_spark.client.remoting import RemotingClient
from rmq_spark.structs import MessageQueue
from tests.support.broker_harness import TEST_STORE_FLAGS, BrokerProcess
from tests.support.eventually import eventually
from tests.support.rocketmq5_harness import config, make_message, running

NAME = "broker-http"


def http_address(broker: BrokerProcess) -> tuple[str, int]:
    part = broker.ready_line.split(" http=")
    assert len(part) == 2, f"no HTTP port in {broker.ready_line!r}"
    host, port = part[1].split()[0].rsplit(":", 1)
    return host, int(port)


def get(broker: BrokerProcess, path: str, auth: tuple[str, str] | None = None):
    """(status, body text, headers) of one GET."""
    host, port = http_address(broker)
    conn = http.client.HTTPConnection(host, port, timeout=10)
    headers = {}
    if auth is not None:
        token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
        headers["Authorization"] = f"Basic {token}"
    try:
        conn.request("GET", path, headers=headers)
        answer = conn.getresponse()
        return answer.status, answer.read().decode(), answer.headers
    finally:
        conn.close()


def scrape(broker: BrokerProcess, auth=None) -> dict[tuple[str, tuple], float]:
    """Every sample of /metrics: (name, sorted labels) -> value."""
    status, text, headers = get(broker, "/metrics", auth)
    assert status == 200, text
    assert headers["Content-Type"].startswith("text/plain; version=0.0.4")
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[sample.name, tuple(sorted(sample.labels.items()))] = sample.value
    return samples


def value(samples, name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


def of_queue(samples, name: str, topic: str, group: str) -> float | None:
    """A per-queue series of queue 0 (every topic here has one queue)."""
    return value(samples, name, topic=topic, consumer_group=group, queue_id="0")


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    root = tmp_path_factory.mktemp("http")
    process = BrokerProcess(
        NAME,
        root / "store",
        root / "broker.log",
        [*TEST_STORE_FLAGS, "--http-port", "0", "--remoting-port", "0"],
    ).start()
    with Admin(process.endpoint) as admin:
        for topic in ("TV1", "TRM", "TV2"):
            admin.create_topic(topic, queues=1)
    yield process
    process.clean_up()


def test_metrics_say_what_was_sent_consumed_and_committed_on_every_protocol(broker):
    # rocketlite.v1: 7 sent; group G1 pulls 5 and commits them, then pulls the other 2
    with Producer(broker.endpoint) as producer:
        for i in range(7):
            producer.send("TV1", f"v1-{i}".encode())
    mq = MessageQueue("TV1", NAME, 0)
    with PullConsumer(broker.endpoint, group="G1") as consumer:
        consumer.assign([mq])
        consumer.seek(mq, 0)
        assert consumer.pull(mq, max_messages=5).message_count == 5
        consumer.commit()
        assert consumer.pull(mq, max_messages=5).message_count == 2
    # remoting: 6 sent, group GR pulls all 6 and commits 3
    rmq = MessageQueue("TRM", NAME, 0)
    with RemotingClient(broker.remoting_address) as client:
        client.route("TRM")
        client.send(rmq, [f"rm-{i}".encode() for i in range(6)], [{} for _ in range(6)])
        answer = client.pull(rmq, 0, max_messages=32, group="GR")
        assert len(answer.records()) == 6
        client.commit_offset("GR", rmq, 3)
    # RocketMQ 5: 4 sent by the official producer, received and acked by group G5
    with running(V2Producer(config(broker.endpoint), ("TV2",))) as producer:
        for i in range(4):
            producer.send(make_message("TV2", f"v2-{i}".encode()))
    consumer = SimpleConsumer(
        config(broker.endpoint), "G5", {"TV2": FilterExpression()}, await_duration=1
    )
    with running(consumer):
        got = []
        deadline = time.monotonic() + 20
        while len(got) < 4 and time.monotonic() < deadline:
            for message in consumer.receive(16, 15):
                got.append(message)
                consumer.ack(message)
        # a RocketMQ 5 member counts as a member of its group (its settings came over Telemetry)
        eventually(
            lambda: (
                value(scrape(broker), "rocketmq_consumer_connections", consumer_group="G5") == 1
            ),
            what="G5's member in /metrics",
        )
    assert len(got) == 4

    def counted():  # acks commit the group's offset as they come in
        samples = scrape(broker)
        lag = of_queue(samples, "rocketmq_consumer_lag_messages", "TV2", "G5")
        return samples if lag == 0 else None

    samples = eventually(counted, what="G5's acks committed", timeout=15)
    for topic, sent in (("TV1", 7), ("TRM", 6), ("TV2", 4)):
        assert value(samples, "rocketmq_messages_in_total", topic=topic) == sent, topic
        assert value(samples, "rocketmq_throughput_in_total", topic=topic) > sent * 50
    for topic, group, handed in (("TV1", "G1", 7), ("TRM", "GR", 6), ("TV2", "G5", 4)):
        out = value(samples, "rocketmq_messages_out_total", topic=topic, consumer_group=group)
        assert out == handed, (topic, group)
    lag = {
        (topic, group): tuple(
            of_queue(samples, f"rocketmq_consumer_{kind}_messages", topic, group)
            for kind in ("lag", "inflight", "ready")
        )
        for topic, group in (("TV1", "G1"), ("TRM", "GR"), ("TV2", "G5"))
    }
    # (not committed, handed out but not committed, not yet handed out)
    assert lag == {("TV1", "G1"): (2, 2, 0), ("TRM", "GR"): (3, 3, 0), ("TV2", "G5"): (0, 0, 0)}
    age = of_queue(samples, "rocketmq_consumer_lag_latency", "TRM", "GR")
    assert age is not None and age > 0
    protocols = {
        dict(labels)["protocol_type"]
        for name, labels in samples
        if name == "rocketmq_rpc_latency_count"
    }
    assert protocols == {"remoting", "grpc_v1", "grpc_v2"}
    sends = {"protocol_type": "grpc_v1", "request_code": "SendMessages", "response_code": "OK"}
    assert value(samples, "rocketmq_rpc_latency_count", **sends) == 7
    assert value(samples, "rocketmq_topic_number") >= 3
    assert value(samples, "rocketlite_ready") == 1
    assert value(samples, "rocketmq_storage_size") > 0


def test_health_and_readiness_while_serving(broker):
    assert get(broker, "/healthz")[:2] == (200, "alive (serving)\n")
    assert get(broker, "/readyz")[:2] == (200, "ready\n")
    with grpc.insecure_channel(broker.endpoint) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        for service in (
            "",
            "rocketlite.v1.MessagingService",
            "apache.rocketmq.v2.MessagingService",
        ):
            answer = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
            assert answer.status == health_pb2.HealthCheckResponse.SERVING, service


def test_bad_http_gets_4xx_and_the_port_keeps_serving(broker):
    host, port = http_address(broker)
    cases = [
        b"GARBAGE\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: nope\r\n\r\n",
        b"GET /metrics HTTP/1.1\r\nHost: x\r\n" + b"X: " + b"a" * 70_000 + b"\r\n\r\n",
        b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n" + b"a" * 100_000,
        b"GET /%ff%fe HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: x\r\nAuthorization: Basic !!!\r\n\r\n",
    ]
    for raw in cases:
        with socket.create_connection((host, port), timeout=10) as sock:
            try:
                sock.sendall(raw)
            except ConnectionError:
                pass  # the broker may close before reading it all
            answer = b""
            while chunk := sock.recv(65536):
                answer += chunk
        status = int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.1 ") else None
        assert status is not None and 400 <= status < 500, (raw[:40], answer[:200])
    assert get(broker, "/nothing")[0] == 404
    assert get(broker, "/readyz")[0] == 200
    assert "Traceback" not in broker.log_text()


SECRETS = {"admin": "admin-secret-1", "alice": "alice-secret-1"}
ACL = {
    "users": [
        {"username": "admin", "password": SECRETS["admin"], "userType": "Super"},
        {"username": "alice", "password": SECRETS["alice"]},
    ],
    "acls": [
        {
            "subject": "User:alice",
            "policies": [{"entries": [{"resource": ["Topic:TopicA"], "actions": ["Sub"]}]}],
        }
    ],
}


def keys(user: str) -> ClientConfig:
    return ClientConfig(access_key=user, secret_key=SECRETS[user])


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory):
    root = tmp_path_factory.mktemp("http-acl")
    acl_file = root / "acl.json"
    acl_file.write_text(json.dumps(ACL))
    process = BrokerProcess(
        "broker-http-acl",
        root / "store",
        root / "broker.log",
        [*TEST_STORE_FLAGS, "--http-port", "0", "--acl", str(acl_file)],
    ).start()
    yield process
    process.clean_up()


def test_with_acl_metrics_need_an_acl_user_and_show_only_its_topics(acl_broker):
    with Admin(acl_broker.endpoint, keys("admin")) as admin:
        admin.create_topic("TopicA", queues=1)
        admin.create_topic("TopicB", queues=1)
    with Producer(acl_broker.endpoint, config=ProducerConfig(**vars(keys("admin")))) as producer:
        producer.send("TopicA", b"a")
        producer.send("TopicB", b"b")
    status, _, headers = get(acl_broker, "/metrics")
    assert status == 401 and headers["WWW-Authenticate"].startswith("Basic")
    assert get(acl_broker, "/metrics", ("alice", "wrong"))[0] == 401
    assert get(acl_broker, "/metrics", ("nobody", "x"))[0] == 401
    # health checks need no credentials
    assert get(acl_broker, "/readyz")[0] == 200
    everything = scrape(acl_broker, ("admin", "admin-secret-1"))
    assert value(everything, "rocketmq_messages_in_total", topic="TopicB") == 1
    alices = scrape(acl_broker, ("alice", "alice-secret-1"))
    assert value(alices, "rocketmq_messages_in_total", topic="TopicA") == 1
    assert not any(dict(labels).get("topic") == "TopicB" for _, labels in alices)
    with grpc.insecure_channel(acl_broker.endpoint) as channel:
        answer = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(), timeout=5
        )
        assert answer.status == health_pb2.HealthCheckResponse.SERVING


def _get_at(port: int, path: str) -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path)
        answer = conn.getresponse()
        return answer.status, answer.read().decode()
    finally:
        conn.close()


def _grpc_health(endpoint: str) -> int:
    with grpc.insecure_channel(endpoint) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        return stub.Check(health_pb2.HealthCheckRequest(), timeout=5).status


def test_not_ready_while_the_store_recovers_nor_while_the_disk_is_full(tmp_path, monkeypatch):
    """The HTTP port answers while the store is being opened (alive, not ready), is ready
    once the broker serves, and not ready while its disk is full (gRPC health too)."""
    import threading

    from rmq_spark.broker import BrokerConfig, create_server
    from rmq_spark.broker.core import broker as broker_module
    from tests.support.broker_harness import TEST_STORE_OPTIONS, free_port

    opening, release = threading.Event(), threading.Event()
    real_open = broker_module.MessageStore.open

    def slow_open(config):  # the real open, once the test has looked at the port
        opening.set()
        assert release.wait(30)
        return real_open(config)

    monkeypatch.setattr(broker_module.MessageStore, "open", staticmethod(slow_open))
    port = free_port()
    config = BrokerConfig(
        store_dir=tmp_path / "store", port=0, http_port=port, store_options=dict(TEST_STORE_OPTIONS)
    )
    made: list = []
    starting = threading.Thread(target=lambda: made.append(create_server(config)))
    starting.start()
    assert opening.wait(30)
    assert _get_at(port, "/healthz") == (200, "alive (opening)\n")
    status, reason = _get_at(port, "/readyz")
    assert (status, reason) == (503, "opening the store: recovering from the commit log\n")
    assert _get_at(port, "/metrics")[0] == 503
    release.set()
    starting.join(30)
    server, grpc_port = made[0]
    server.start()
    try:
        assert _get_at(port, "/readyz") == (200, "ready\n")
        endpoint = f"127.0.0.1:{grpc_port}"
        assert _grpc_health(endpoint) == health_pb2.HealthCheckResponse.SERVING
        server.broker.store.health.set_disk_full(True)
        status, reason = _get_at(port, "/readyz")
        assert status == 503 and reason.startswith("the disk is full")
        eventually(
            lambda: _grpc_health(endpoint) == health_pb2.HealthCheckResponse.NOT_SERVING,
            what="gRPC health NOT_SERVING",
        )
        server.broker.store.health.set_disk_full(False)
        assert _get_at(port, "/readyz") == (200, "ready\n")
        eventually(
            lambda: _grpc_health(endpoint) == health_pb2.HealthCheckResponse.SERVING,
            what="gRPC health SERVING again",
        )
    finally:
        server.stop(grace_s=0.5)
    with pytest.raises(OSError):
        _get_at(port, "/healthz")  # stopped: the port is closed
