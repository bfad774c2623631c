"""Short-circuit reads against a broker process: a reader on the broker's host gets the
files of a queue range over the broker's Unix socket and reads the records itself. The
records equal a pull's; the range never passes what the broker reported; the broker's
access rules hold (the same ACL as a pull); a socket of another broker, or none, means
"pull instead"."""

from __future__ import annotations

import json
import os
import socket
import struct

import pytest

from rmq_spark.auth.signature import signed_metadata
from rmq_spark.broker.v1.short_circuit import default_socket_path
from rmq_spark.client import Admin, ClientConfig, Producer
from rmq_spark.client.producer import ProducerConfig
from rmq_spark.client.short_circuit import ShortCircuit, ShortCircuitUnavailable
from rmq_spark.codec import record as rec
from rmq_spark.codec.properties import decode_properties
from rmq_spark.codec.taghash import tag_hash_code
from rmq_spark.errors import PermissionDeniedError, UnauthenticatedError
from rmq_spark.structs import MessageQueue
from rmq_spark.wire.short_circuit import VERSION, recv_message, send_message
from tests.support.broker_harness import TEST_STORE_FLAGS, BrokerProcess, read_queue

TOPIC = "sc-orders"
KEYS_ROOT = {"access_key": "root", "secret_key": "root-s"}
SMALL_SEGMENTS = ["--commitlog-segment-bytes", "4096", "--consumequeue-entries-per-file", "64"]


def read_local(sc: ShortCircuit, mq: MessageQueue, start: int, end: int, **kw) -> list:
    """Every record of ``[start, end)`` read through ``sc``, asking again where an answer
    covers only part of the range; (offset, body, tags) each."""
    found, offset = [], start
    while offset < end:
        with sc.open_range(mq, offset, end) as local:
            if local.end <= offset:
                break
            while offset < local.end:
                buffer, _, following = local.read(offset, 4096, **kw)
                for r in rec.iter_records(bytes(buffer)):
                    tags = decode_properties(r.properties).get("TAGS")
                    found.append((r.queue_offset, r.body, tags))
                offset = following
    return found


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    root = tmp_path_factory.mktemp("short-circuit")
    process = BrokerProcess("broker-sc", root / "store", root / "broker.log", SMALL_SEGMENTS)
    process.start()
    with Admin(process.endpoint) as admin:
        admin.create_topic(TOPIC, queues=2)
    with Producer(process.endpoint) as producer:
        for i in range(0, 1200, 10):  # about 90 segments of 4 KiB
            producer.send_batch(
                TOPIC,
                [(f"m-{j}".encode().ljust(200, b"."), ["a", "b"][j % 2]) for j in range(i, i + 10)],
                queue=i // 10 % 2,
            )
    yield process
    process.clean_up()


def test_a_range_read_locally_equals_the_pulled_records(broker):
    mq = MessageQueue(TOPIC, "broker-sc", 1)
    pulled = read_queue(broker.endpoint, TOPIC, 1, "broker-sc")
    with ShortCircuit(str(default_socket_path(broker.port)), "broker-sc") as sc:
        local = read_local(sc, mq, 0, 10_000)
        # small segments: the range comes in several answers, each with few files
        with sc.open_range(mq, 0, 10_000) as first:
            assert first.max_offset == len(pulled) and first.end < len(pulled)
        middle = read_local(sc, mq, 17, 123)
    assert [(o, b) for o, b, _ in local] == [(r["queueOffset"], r["body"]) for r in pulled]
    assert [o for o, _, _ in middle] == list(range(17, 123))


def test_the_broker_bounds_the_range_and_filters_nothing_it_should_not(broker):
    mq = MessageQueue(TOPIC, "broker-sc", 0)
    with ShortCircuit(str(default_socket_path(broker.port)), "broker-sc") as sc:
        with sc.open_range(mq, 590, 10_000) as tail:
            assert (tail.start, tail.end, tail.max_offset) == (590, 600, 600)
            with pytest.raises(ValueError, match="outside"):
                tail.read(600, 4096)
        with sc.open_range(mq, 700, 800) as past:  # nothing there yet
            assert past.start == past.end
        only_a = read_local(sc, mq, 0, 600, tag_codes=[tag_hash_code("a")])
    assert only_a and {tags for _, _, tags in only_a} == {"a"}


def test_hostile_requests_are_answered_without_a_traceback(broker):
    """Any local user may connect, before any signature is read: bytes that are no message
    (JSON nested 100,000 deep) close that connection, a queue id of Infinity and a topic
    that is not text are refused, and none of it puts a traceback in the broker's log."""
    path = str(default_socket_path(broker.port))
    mark = len(broker.log_text())
    deep = b"[" * 100_000 + b"]" * 100_000
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(5)
        sock.connect(path)
        sock.sendall(struct.pack(">I", len(deep)) + deep)
        assert sock.recv(100) == b""  # closed
    base = {"version": VERSION, "broker": "broker-sc", "topic": TOPIC, "start": 0, "end": 1}
    for request, code in (
        ({**base, "queueId": float("inf")}, "INVALID"),
        ({**base, "queueId": 0, "start": float("-inf")}, "INVALID"),
        ({**base, "queueId": 0, "topic": "\ud800"}, "NOT_FOUND"),
    ):
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(5)
            sock.connect(path)
            send_message(sock, request)
            answer, fds = recv_message(sock, max_fds=4)
            assert not fds and (answer["ok"], answer["code"]) == (False, code), answer
    mq = MessageQueue(TOPIC, "broker-sc", 0)
    with ShortCircuit(path, "broker-sc") as sc:
        assert len(read_local(sc, mq, 0, 10)) == 10
    assert "Traceback" not in broker.log_text()[mark:], broker.log_text()[mark:][:3000]


def test_another_broker_or_no_socket_means_pull_instead(broker, tmp_path):
    mq = MessageQueue(TOPIC, "broker-sc", 0)
    other = ShortCircuit(str(default_socket_path(broker.port)), "broker-other")
    with other, pytest.raises(ShortCircuitUnavailable, match="WRONG_BROKER"):
        other.open_range(mq, 0, 10)
    with pytest.raises(ShortCircuitUnavailable, match="no short-circuit socket"):
        ShortCircuit(str(tmp_path / "none.sock"), "broker-sc")


def test_a_broker_started_with_it_off_has_no_socket(tmp_path):
    process = BrokerProcess(
        "broker-off",
        tmp_path / "store",
        tmp_path / "b.log",
        [*TEST_STORE_FLAGS, "--short-circuit-socket", "off"],
    ).start()
    try:
        assert not default_socket_path(process.port).exists()
    finally:
        process.clean_up()


def test_access_control_applies_as_to_a_pull(tmp_path):
    acl = tmp_path / "acl.json"
    acl.write_text(
        json.dumps(
            {
                "users": [
                    {"username": "root", "password": "root-s", "userType": "Super"},
                    {"username": "reader", "password": "reader-s"},
                    {"username": "other", "password": "other-s"},
                ],
                "acls": [
                    {"subject": "User:reader", "policies": [{"entries": [
                        {"resource": [f"Topic:{TOPIC}", "Group:g"], "actions": ["Sub"]}]}]},
                    {"subject": "User:other", "policies": [{"entries": [
                        {"resource": "Topic:elsewhere", "actions": ["All"]}]}]},
                ],
            }
        )
    )  # fmt: skip
    process = BrokerProcess(
        "broker-acl", tmp_path / "store", tmp_path / "b.log", [*TEST_STORE_FLAGS, "--acl", str(acl)]
    ).start()
    try:
        root = ClientConfig(**KEYS_ROOT)
        with Admin(process.endpoint, root) as admin:
            admin.create_topic(TOPIC, queues=1)
        with Producer(process.endpoint, config=ProducerConfig(**KEYS_ROOT)) as producer:
            producer.send_batch(TOPIC, [b"x", b"y"], queue=0)
        mq = MessageQueue(TOPIC, "broker-acl", 0)
        path = str(default_socket_path(process.port))
        with ShortCircuit(path, "broker-acl") as sc, pytest.raises(UnauthenticatedError):
            sc.open_range(mq, 0, 2)
        other = ShortCircuit(path, "broker-acl", access_key="other", secret_key="other-s")
        with other, pytest.raises(PermissionDeniedError, match="other"):
            other.open_range(mq, 0, 2, group="g")
        with ShortCircuit(path, "broker-acl", **KEYS_ROOT) as sc:
            assert [b for _, b, _ in read_local(sc, mq, 0, 2)] == [b"x", b"y"]
        # the reader may pull the queue, but the files would show it every topic's records
        reader = ShortCircuit(path, "broker-acl", access_key="reader", secret_key="reader-s")
        with reader, pytest.raises(ShortCircuitUnavailable, match=r"PULL_INSTEAD.*super"):
            reader.open_range(mq, 0, 2, group="g")
    finally:
        process.clean_up()


def test_a_reader_of_one_topic_gets_no_file_holding_another(tmp_path):
    """A commit-log segment holds every topic's records: a descriptor of it would let a user
    allowed to read TopicA read TopicB's messages (and pending transactions) too."""
    acl = tmp_path / "acl.json"
    acl.write_text(
        json.dumps(
            {
                "users": [
                    {"username": "root", "password": "root-s", "userType": "Super"},
                    {"username": "reader", "password": "reader-s"},
                ],
                "acls": [
                    {"subject": "User:reader", "policies": [{"entries": [
                        {"resource": ["Topic:TopicA"], "actions": ["Sub"]}]}]},
                ],
            }
        )
    )  # fmt: skip
    process = BrokerProcess(
        "broker-x", tmp_path / "store", tmp_path / "b.log", [*TEST_STORE_FLAGS, "--acl", str(acl)]
    ).start()
    try:
        with Admin(process.endpoint, ClientConfig(**KEYS_ROOT)) as admin:
            admin.create_topic("TopicA", queues=1)
            admin.create_topic("TopicB", queues=1)
        with Producer(process.endpoint, config=ProducerConfig(**KEYS_ROOT)) as producer:
            producer.send("TopicA", b"public", queue=0)
            producer.send("TopicB", b"TOP-SECRET", queue=0)
        request = {"version": VERSION, "broker": "broker-x", "topic": "TopicA", "queueId": 0}
        request |= {"start": 0, "end": 1}
        auth = [list(pair) for pair in signed_metadata("reader", "reader-s")]
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(5)
            sock.connect(str(default_socket_path(process.port)))
            send_message(sock, {**request, "topic": "NoSuchTopic"})  # not signed
            answer, fds = recv_message(sock, max_fds=16)
            assert (answer["code"], fds) == ("UNAUTHENTICATED", [])  # not NOT_FOUND
            send_message(sock, {**request, "auth": auth})
            answer, fds = recv_message(sock, max_fds=16)
        for fd in fds:
            os.close(fd)
        assert (answer["code"], fds) == ("PULL_INSTEAD", []), answer
    finally:
        process.clean_up()
