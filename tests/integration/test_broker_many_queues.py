"""Scale in queues and files: a broker whose process may hold 1,024 descriptors (a common
default limit) starts on a store of 2,000 queues and serves every one of them (a pull of
each, a send to one queue of each topic), holding fewer descriptors than its limit, and
says in its log how many files the store has against the descriptors it keeps open."""

from __future__ import annotations

import os

from rmq_spark.client import Admin, ClientConfig
from rmq_spark.client.connection import NO_RETRY
from rmq_spark.client.remoting import RemotingClient
from rmq_spark.codec.arrow_decode import decode_records
from rmq_spark.store import MessageStore, StoreConfig
from rmq_spark.structs import MessageQueue
from tests.support.broker_harness import TEST_STORE_FLAGS, TEST_STORE_OPTIONS, BrokerProcess

TOPICS = 250
QUEUES = 8  # 2,000 queues in all
FILE_LIMIT = 1024


def test_a_broker_under_a_1024_file_limit_serves_2000_queues(tmp_path):
    store_dir = tmp_path / "store"
    store = MessageStore.open(StoreConfig(store_dir, **TEST_STORE_OPTIONS))
    for t in range(TOPICS):
        store.topics.create(f"Many{t:03d}", QUEUES)
        for q in range(QUEUES):
            store.append(f"Many{t:03d}", q, [f"old {t}/{q}".encode()], tags=["x"])
    store.close()
    flags = [*TEST_STORE_FLAGS, "--remoting-port", "0"]
    broker = BrokerProcess(
        "broker-many", store_dir, tmp_path / "broker.log", flags, file_limit=FILE_LIMIT
    )
    broker.start()
    try:
        with RemotingClient(broker.remoting_address, ClientConfig(retry=NO_RETRY)) as client:
            for t in range(TOPICS):  # a send to one queue of each topic
                mq = MessageQueue(f"Many{t:03d}", "broker-many", t % QUEUES)
                client.send(mq, [f"new {t}/{t % QUEUES}".encode()])
            held = len(os.listdir(f"/proc/{broker.process.pid}/fd"))
            assert held < FILE_LIMIT, f"the broker holds {held} descriptors"
            for t in range(TOPICS):
                for q in range(QUEUES):
                    mq = MessageQueue(f"Many{t:03d}", "broker-many", q)
                    answer = client.pull(mq, 0, group="many")
                    bodies = decode_records(answer.data).column("body").to_pylist()
                    new = [f"new {t}/{q}".encode()] if q == t % QUEUES else []
                    assert bodies == [f"old {t}/{q}".encode(), *new]
        assert len(os.listdir(f"/proc/{broker.process.pid}/fd")) < FILE_LIMIT
        # a limit it cannot raise: it says what the store has against what it may keep open
        assert "the store has 2" in broker.log_text()
        assert "at most 768 descriptors are kept open" in broker.log_text(), broker.log_tail()
    finally:
        broker.clean_up()


def store_descriptors(pid: int, store_dir) -> int:
    """Descriptors of process ``pid`` open on files under ``store_dir``."""
    held = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:  # closed meanwhile
            continue
        held += target.startswith(str(store_dir))
    return held


def test_max_open_descriptors_bounds_what_the_store_keeps_open(tmp_path):
    limit, topics = 24, 40  # 160 queues written and read: far more files than the budget
    store_dir = tmp_path / "store"
    flags = [*TEST_STORE_FLAGS, "--remoting-port", "0", "--max-open-descriptors", str(limit)]
    broker = BrokerProcess("broker-budget", store_dir, tmp_path / "broker.log", flags)
    broker.start()
    try:
        with Admin(broker.endpoint) as admin:
            for t in range(topics):
                admin.create_topic(f"Budget{t:02d}", queues=QUEUES)
        queues = [
            MessageQueue(f"Budget{t:02d}", "broker-budget", q)
            for t in range(topics)
            for q in range(QUEUES)
        ]
        most = 0
        with RemotingClient(broker.remoting_address, ClientConfig(retry=NO_RETRY)) as client:
            for mq in queues:
                client.send(mq, [f"{mq.topic}/{mq.queue_id}".encode()])
                most = max(most, store_descriptors(broker.process.pid, store_dir))
            for mq in queues:
                answer = client.pull(mq, 0, group="budget")
                bodies = decode_records(answer.data).column("body").to_pylist()
                assert bodies == [f"{mq.topic}/{mq.queue_id}".encode()]
                most = max(most, store_descriptors(broker.process.pid, store_dir))
        # the budget, and the store's own few files outside it (lock, checkpoints, offsets)
        assert 0 < most <= limit + 8, f"the store held up to {most} descriptors"
    finally:
        broker.clean_up()
