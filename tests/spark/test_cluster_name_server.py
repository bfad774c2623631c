"""The Spark source and sink through ``nameServer`` over a cluster of rocketlite brokers:
broker-a's remoting port is the name server, broker-b and broker-c register with it
(``--namesrv-addr``). Reads and writes cover every broker; a broker killed in the middle of a
streaming query either fails the query, naming it, or is read to the last message once it
is back: never a query that runs on silently short."""

from __future__ import annotations

import uuid

import pytest

from rmq_spark.client import Admin
from rmq_spark.client.remoting import RemotingClient, RemotingProducer
from rmq_spark.errors import NotFoundError
from tests.support.broker_harness import start_broker
from tests.support.eventually import eventually
from tests.support.sink_helpers import bodies
from tests.support.spark_helpers import rows_of, start_collecting

NAMES = ("broker-a", "broker-b", "broker-c")


def start_cluster(root) -> dict:
    root.mkdir(parents=True, exist_ok=True)
    name_server = start_broker(root, "broker-a", "--remoting-port", "0")
    ns = name_server.remoting_address
    brokers = {"broker-a": name_server}
    for name in NAMES[1:]:
        brokers[name] = start_broker(root, name, "--remoting-port", "0", "--namesrv-addr", ns)
    return brokers


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    brokers = start_cluster(tmp_path_factory.mktemp("spark-cluster"))
    yield brokers
    for broker in brokers.values():
        broker.clean_up()


def new_topic(brokers: dict, queues: int = 2) -> str:
    """A topic of ``queues`` queues on every broker, once the name server routes it."""
    topic = f"SparkCluster{uuid.uuid4().hex[:8]}"
    for broker in brokers.values():
        with Admin(broker.endpoint) as admin:
            admin.create_topic(topic, queues=queues)
    ns = brokers["broker-a"].remoting_address

    def routed() -> bool:
        with RemotingClient(ns) as client:
            try:
                names = {mq.broker_name for mq in client.route(topic).readable}
            except NotFoundError:
                return False
        return names == set(brokers)

    eventually(routed, what=f"{topic} routed to every broker", timeout=10)
    return topic


def send(ns: str, topic: str, count: int, prefix: str) -> dict:
    """``count`` messages through the name server; their bodies by (broker, queue, offset)."""
    sent = {}
    with RemotingProducer(ns) as producer:
        for i in range(count):
            result = producer.send(topic, f"{prefix}-{i}".encode())
            mq = result.message_queue
            sent[(mq.broker_name, mq.queue_id, result.queue_offset)] = f"{prefix}-{i}".encode()
    return sent


def read(spark, ns: str, topic: str):
    return spark.read.format("rocketlite").option("nameServer", ns).option("topic", topic).load()


def test_a_batch_read_covers_every_broker(spark, cluster):
    ns = cluster["broker-a"].remoting_address
    topic = new_topic(cluster)
    sent = send(ns, topic, 90, "batch")
    assert {broker for broker, _, _ in sent} == set(NAMES)
    assert rows_of(read(spark, ns, topic)) == sent


@pytest.mark.parametrize("exactly_once", [None, "false"])
def test_the_sink_writes_to_every_broker(spark, cluster, exactly_once):
    ns = cluster["broker-a"].remoting_address
    topic = new_topic(cluster)
    # a sharding key per row spreads the rows over every queue (a task without one sends
    # its rows round robin, sendBatchSize at a time, and may not reach every broker)
    df = spark.createDataFrame(
        [(f"w{i}", f"key-{i}") for i in range(120)], "body string, shardingKey string"
    ).repartition(3)
    writer = df.write.format("rocketlite").option("nameServer", ns).option("topic", topic)
    if exactly_once is not None:
        writer = writer.option("exactlyOnce", exactly_once)
    writer.mode("append").save()
    per_broker = {name: bodies(b.endpoint, topic) for name, b in cluster.items()}
    assert all(per_broker.values()), (
        f"rows on each broker: { {n: len(v) for n, v in per_broker.items()} }"
    )
    assert sorted(b for found in per_broker.values() for b in found) == sorted(
        f"w{i}".encode() for i in range(120)
    )


def test_a_broker_killed_in_the_middle_of_a_streaming_query(spark, tmp_path):
    brokers = start_cluster(tmp_path / "brokers")
    try:
        ns = brokers["broker-a"].remoting_address
        topic = new_topic(brokers)
        sent = send(ns, topic, 60, "before")
        df = (
            spark.readStream.format("rocketlite")
            .option("nameServer", ns)
            .option("topic", topic)
            .option("startingOffsets", "earliest")
            .option("maxMessagesPerTrigger", "15")
            .load()
        )
        query, collected = start_collecting(df, tmp_path / "checkpoint")
        try:
            eventually(
                lambda: len(collected.rows) >= 15 or query.exception() is not None,
                what="the first batch",
                timeout=60,
            )
            victim = brokers["broker-c"]
            victim.kill()
            sent.update(send(ns, topic, 60, "during"))  # broker-a and broker-b take them
            eventually(
                lambda: len(collected.rows) >= 60 or not query.isActive,
                what="the query to go on or stop",
                timeout=60,
            )
            victim.restart()  # same store, a new address it registers with
            sent.update(send(ns, topic, 30, "after"))

            def finished() -> bool:
                if not query.isActive:
                    return True
                return collected.messages == sent

            eventually(finished, what="every message, or a failed query", timeout=90)
            if not query.isActive:  # failed loudly: the error says which broker
                error = str(query.exception())
                assert "broker-c" in error, error
            else:
                assert collected.messages == sent  # each message once, broker-c's included
        finally:
            if query.isActive:
                query.stop()
    finally:
        for broker in brokers.values():
            broker.clean_up()
