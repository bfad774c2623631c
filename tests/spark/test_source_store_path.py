"""Batch reads of a store directory without any broker (option ``storePath``): the same rows
as through the broker, the options that make sense offline, read-only, and a directory a
running broker holds refused unless ``allowLiveStore``. The store Apache RocketMQ 4.9
writes is read too (needs ``ROCKETMQ_HOME``)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from rmq_spark.client import Admin, Producer
from rmq_spark.structs import MessageQueue
from tests.support.broker_harness import start_broker
from tests.support.spark_helpers import batch, create_topic, produce, rows_of
from tests.support.store_files import snapshot

# every column the source yields, in a comparable form
COLUMNS = [
    "topic", "queueId", "queueOffset", "brokerName", "msgId", "tags", "keys", "body",
    "bornTimestamp", "storeTimestamp", "bornHost", "storeHost", "reconsumeTimes",
]  # fmt: skip


def offline(spark, store: Path, topic: str | None = None, **options: str):
    reader = spark.read.format("rocketlite").option("storePath", str(store))
    if topic is not None:
        reader = reader.option("topic", topic)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def table(df) -> list[tuple]:
    rows = df.select(*COLUMNS, "properties").collect()
    return sorted((*(r[c] for c in COLUMNS), sorted((r.properties or {}).items())) for r in rows)


@pytest.fixture(scope="module")
def stopped_store(tmp_path_factory, spark):
    """A store a broker wrote (two topics, tags, keys, properties, a group's offsets,
    several segments), the broker-mode rows of each read below, and the broker stopped."""
    root = tmp_path_factory.mktemp("offline")
    flags = ["--commitlog-segment-bytes", "65536", "--consumequeue-entries-per-file", "64"]
    broker = start_broker(root, "broker-x", store_flags=flags)
    try:
        create_topic(broker.endpoint, "orders", queues=3)
        create_topic(broker.endpoint, "refunds", queues=1)
        with Producer(broker.endpoint) as producer:
            for i in range(600):
                producer.send(
                    "orders",
                    f"order-{i}".encode().ljust(200, b"."),
                    tags=["paid", "new", None][i % 3],
                    keys=[f"o{i}", "all"],
                    properties={"n": str(i)},
                    queue=i % 3,
                )
                if i == 299:
                    middle_ms = int(time.time() * 1000)
                    time.sleep(0.05)
        produce(broker.endpoint, "refunds", {0: 50})
        with Admin(broker.endpoint) as admin:
            offsets = {MessageQueue("orders", "broker-x", q): 40 + q for q in range(3)}
            admin.commit_offsets("billing", offsets)
        reads = {
            "all": {"topics": "orders,refunds"},
            "group": {"topic": "orders", "group": "billing", "startingOffsets": "group"},
            "time": {
                "topic": "orders",
                "startingTimestamp": str(middle_ms),
                "endingOffsets": json.dumps({"orders": {"broker-x": {"0": 150, "1": 190}}}),
            },
            "tags": {"topic": "orders", "subExpression": "paid || new"},
            "pattern": {
                "topicPattern": "ord.*",
                "allocateStrategy": "avg",
                "numPartitions": "2",
            },
        }
        expected = {
            name: table(batch(spark, broker.endpoint, **options)) for name, options in reads.items()
        }
    finally:
        broker.stop()
    return root / "broker-x", reads, expected


@pytest.mark.parametrize("read", ["all", "group", "time", "tags", "pattern"])
def test_a_store_directory_yields_the_rows_the_broker_gave(spark, stopped_store, read):
    store, reads, expected = stopped_store
    before = snapshot(store, hash_up_to=None)
    rows = table(offline(spark, store, brokerName="broker-x", **reads[read]))
    assert rows == expected[read]
    assert rows, "the read must not be empty"
    assert snapshot(store, hash_up_to=None) == before, "a store directory is only read"


def test_rows_name_the_default_broker_unless_told(spark, stopped_store):
    store, _, _ = stopped_store
    names = offline(spark, store, "refunds").select("brokerName").distinct().collect()
    assert [r.brokerName for r in names] == ["broker-a"]


def test_a_live_broker_directory_is_refused_unless_allowed(spark, broker, topic):
    create_topic(broker.endpoint, topic, queues=1)
    sent = produce(broker.endpoint, topic, {0: 20})
    with pytest.raises(Exception, match="allowLiveStore") as refused:
        offline(spark, broker.store_dir, topic).collect()
    assert str(broker.store_dir) in str(refused.value)
    df = offline(spark, broker.store_dir, topic, allowLiveStore="true")
    assert rows_of(df) == sent


def test_bad_store_paths_and_options_say_what_to_do(spark, tmp_path, stopped_store):
    missing = tmp_path / "nowhere"
    with pytest.raises(Exception, match=str(missing)):
        offline(spark, missing, "orders").collect()
    store, _, _ = stopped_store
    with pytest.raises(Exception, match="option endpoints has no use with storePath"):
        offline(spark, store, "orders", endpoints="127.0.0.1:1").collect()
    streamed = (
        spark.readStream.format("rocketlite")
        .option("storePath", str(store))
        .option("topic", "orders")
        .load()
    )
    query = streamed.writeStream.format("noop").start()
    with pytest.raises(Exception, match="storePath only applies to batch queries"):
        query.awaitTermination(60)


def test_a_store_apache_rocketmq_wrote(spark, tmp_path):
    from tests.support import rocketmq_harness

    if not rocketmq_harness.available():
        pytest.skip("needs Apache RocketMQ 4.9: set ROCKETMQ_HOME to a build with lib/")
    from rmq_spark.client.remoting import RemotingClient

    cluster = rocketmq_harness.RocketMQCluster(tmp_path / "apache").start()
    sent: dict[tuple[int, int], bytes] = {}
    try:
        with RemotingClient(cluster.name_server) as client:
            queues, _ = rocketmq_harness.make_topic(client, "ApacheOrders")
            for i in range(300):
                mq = queues[i % len(queues)]
                client.send(mq, [f"apache-{i}".encode()], [{"TAGS": "T", "KEYS": f"k{i}"}])
            for mq in queues:
                offset = 0
                while True:
                    answer = client.pull(mq, offset, max_messages=64)
                    records = answer.records() if answer.data else None
                    if records is None or not records.num_rows:
                        break
                    for r in records.to_pylist():
                        sent[(r["queueId"], r["queueOffset"])] = r["body"]
                    offset = answer.next_begin_offset
    finally:
        cluster.stop(keep_store=True)
    store = tmp_path / "apache" / "store"
    df = offline(spark, store, "ApacheOrders")
    got = {(r.queueId, r.queueOffset): bytes(r.body) for r in df.collect()}
    assert got == sent and len(got) >= 300
