"""RemoteBrokerOffsetStore against in-process brokers."""

from __future__ import annotations

import pytest

from rmq_spark.client import Admin, ClientConfig, RetryPolicy
from rmq_spark.client.cluster import Cluster
from rmq_spark.client.offsets import ClusterOffsets
from rmq_spark.errors import NotFoundError
from rmq_spark.offsets.remote_broker import RemoteBrokerOffsetStore
from rmq_spark.offsets.store import ReadOffsetType
from rmq_spark.structs import MessageQueue

TOPIC = "OffsetStoreTopic"
GROUP = "OffsetStoreGroup"
FAST = ClientConfig(retry=RetryPolicy(attempts=2, backoff_ms=20, max_backoff_ms=50))


@pytest.fixture
def two_brokers(in_process_broker_factory):
    pair = [in_process_broker_factory(name=name) for name in ("broker-a", "broker-b")]
    endpoints = ",".join(b.endpoint for b in pair)
    with Admin(endpoints, FAST) as admin:
        admin.create_topic(TOPIC, queues=2)
    return endpoints


@pytest.fixture
def cluster(two_brokers):
    """A new client's view of the brokers' group offsets, closed after the test."""
    clusters: list[Cluster] = []

    def make() -> ClusterOffsets:
        clusters.append(Cluster(two_brokers, FAST))
        return ClusterOffsets(clusters[-1])

    yield make
    for c in clusters:
        c.close()


def queues() -> list[MessageQueue]:
    return [MessageQueue(TOPIC, b, q) for b in ("broker-a", "broker-b") for q in (0, 1)]


def test_persist_all_then_a_fresh_store_reads_the_broker(cluster, two_brokers):
    store = RemoteBrokerOffsetStore(cluster(), GROUP)
    store.load()
    wanted = {mq: 10 * (i + 1) for i, mq in enumerate(queues())}
    for mq, offset in wanted.items():
        store.update_offset(mq, offset)
    result = store.persist_all()
    assert {mq: r.offset for mq, r in result.items()} == wanted
    assert all(r.updated for r in result.values())

    fresh = RemoteBrokerOffsetStore(cluster(), GROUP)
    for mq, offset in wanted.items():
        assert fresh.read_offset(mq, ReadOffsetType.READ_FROM_MEMORY) == -1
        assert fresh.read_offset(mq, ReadOffsetType.MEMORY_FIRST_THEN_STORE) == offset
    assert fresh.clone_offset_table() == wanted

    # each broker holds exactly its own queues, grouped by broker name
    with Admin(two_brokers, FAST) as admin:
        progress = admin.consumer_progress(GROUP)
    held = {row.message_queue: row.committed_offset for row in progress}
    assert held == wanted


def test_unknown_reads_minus_one(cluster):
    store = RemoteBrokerOffsetStore(cluster(), GROUP)
    mq = MessageQueue(TOPIC, "broker-b", 1)
    assert store.read_offset(mq, ReadOffsetType.READ_FROM_STORE) == -1
    assert store.read_offset(mq) == -1
    assert store.clone_offset_table() == {}


def test_persist_subset_and_increase_only_on_broker(cluster):
    store = RemoteBrokerOffsetStore(cluster(), GROUP)
    a0, b0 = MessageQueue(TOPIC, "broker-a", 0), MessageQueue(TOPIC, "broker-b", 0)
    store.update_offset(a0, 50)
    store.update_offset(b0, 7)
    store.persist(a0)
    reader = RemoteBrokerOffsetStore(cluster(), GROUP)
    assert reader.read_offset(a0, ReadOffsetType.READ_FROM_STORE) == 50
    assert reader.read_offset(b0, ReadOffsetType.READ_FROM_STORE) == -1  # not persisted

    # a stale owner (lower offset) cannot roll the broker back ...
    stale = RemoteBrokerOffsetStore(cluster(), GROUP)
    stale.update_offset(a0, 20)
    assert stale.persist_all()[a0].offset == 50
    assert reader.read_offset(a0, ReadOffsetType.READ_FROM_STORE) == 50
    # ... unless the store is asked to overwrite
    resetter = RemoteBrokerOffsetStore(cluster(), GROUP, increase_only_on_broker=False)
    resetter.update_offset(a0, 20)
    resetter.persist_all()
    assert reader.read_offset(a0, ReadOffsetType.READ_FROM_STORE) == 20

    store.remove_offset(b0)
    assert store.persist_all() == {a0: store.persist_all()[a0]}  # b0 no longer sent
    assert reader.read_offset(b0, ReadOffsetType.READ_FROM_STORE) == -1


def test_nothing_to_persist_sends_nothing(cluster):
    assert RemoteBrokerOffsetStore(cluster(), GROUP).persist_all() == {}


def test_unknown_broker_name_is_an_error_not_minus_one(cluster):
    store = RemoteBrokerOffsetStore(cluster(), GROUP)
    with pytest.raises(NotFoundError, match="broker-z"):
        store.read_offset(MessageQueue(TOPIC, "broker-z", 0), ReadOffsetType.READ_FROM_STORE)
