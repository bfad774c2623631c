"""The Spark source with ``nameServer``: reading over RocketMQ's remoting protocol, from the
rocketlite broker's remoting port (always) and from Apache RocketMQ 4.9 itself (when
``ROCKETMQ_HOME`` names a build). Batch and streaming reads give the same rows as the gRPC
``endpoints`` path, and a query's group commits are the group's offsets on the broker."""

from __future__ import annotations

import time
import zlib

import pytest

from rmq_spark.client.remoting import RemotingClient
from rmq_spark.structs import MessageQueue
from tests.support import rocketmq_harness
from tests.support.broker_harness import BrokerProcess
from tests.support.eventually import eventually
from tests.support.spark_helpers import (
    create_topic,
    rows_of,
    run_available_now,
    start_collecting,
    unless_stopped,
)


@pytest.fixture(scope="module")
def remoting_broker(tmp_path_factory):
    root = tmp_path_factory.mktemp("name-server-source")
    broker = BrokerProcess(
        "broker-a", root / "store", root / "broker.log", ["--remoting-port", "0"]
    ).start()
    yield broker
    broker.stop()


def _read(spark, name_server: str, topic: str | None, **options: str):
    reader = spark.read.format("rocketlite").option("nameServer", name_server)
    chosen = {"topic": topic} if topic is not None else {}
    for key, value in {**chosen, **options}.items():
        reader = reader.option(key, value)
    return reader.load()


def _send_all(client: RemotingClient, queues: list[MessageQueue], count: int) -> dict:
    """``count`` messages spread over ``queues`` through the remoting client; their bodies
    by (broker, queue, offset)."""
    sent = {}
    for i in range(count):
        mq = queues[i % len(queues)]
        body = f"event-{i}".encode()
        tag = "even" if i % 2 == 0 else "odd"
        answer = client.send(mq, [body], [{"TAGS": tag, "KEYS": f"k{i}"}])
        sent[(mq.broker_name, mq.queue_id, answer.queue_offset)] = body
    return sent


def test_name_server_reads_the_same_rows_as_endpoints(spark, remoting_broker):
    topic = "NameServerSame"
    create_topic(remoting_broker.endpoint, topic, queues=3)
    with RemotingClient(remoting_broker.remoting_address) as client:
        sent = _send_all(client, client.route(topic).writable, 30)
    over_remoting = rows_of(_read(spark, remoting_broker.remoting_address, topic))
    over_grpc = rows_of(
        spark.read.format("rocketlite")
        .option("endpoints", remoting_broker.endpoint)
        .option("topic", topic)
        .load()
    )
    assert over_remoting == over_grpc == sent
    odd = _read(spark, remoting_broker.remoting_address, topic, subExpression="odd").collect()
    assert sorted(r.body for r in odd) == sorted(b for b in sent.values() if b[-1] % 2 == 1)


def test_a_compressed_body_is_inflated(spark, remoting_broker):
    topic = "NameServerZlib"
    create_topic(remoting_broker.endpoint, topic, queues=1)
    text = b"a body a RocketMQ producer compressed " * 200
    mq = MessageQueue(topic, "broker-a", 0)
    with RemotingClient(remoting_broker.remoting_address) as client:
        client.send(mq, [zlib.compress(text)], sys_flag=0x301)  # zlib, as Java's producer
    rows = _read(spark, remoting_broker.remoting_address, topic).collect()
    assert [r.body for r in rows] == [text]


def test_streaming_commits_the_group_offsets_to_the_broker(spark, remoting_broker, tmp_path):
    topic, group = "NameServerStream", "ns-etl"
    create_topic(remoting_broker.endpoint, topic, queues=2)
    with RemotingClient(remoting_broker.remoting_address) as client:
        queues = client.route(topic).writable
        sent = _send_all(client, queues, 20)
        df = (
            spark.readStream.format("rocketlite")
            .option("nameServer", remoting_broker.remoting_address)
            .option("topic", topic)
            .option("group", group)
            .option("startingOffsets", "earliest")
            .option("maxMessagesPerTrigger", "7")
            .load()
        )
        collected = run_available_now(df, tmp_path / "checkpoint")
        assert collected.messages == sent
        assert len(collected.sizes) >= 3  # the trigger limit held
        more = _send_all(client, queues, 4)
        collected = run_available_now(df, tmp_path / "checkpoint")
        assert collected.messages == more  # the second run starts where the first ended
        committed = {mq: client.committed_offset(group, mq) for mq in queues}
        assert committed == {mq: client.max_offset(mq) for mq in queues}


def test_apache_rocketmq_batch_and_streaming(spark, apache, tmp_path):
    topic, group = "SparkFromApache", "spark-from-apache"
    with RemotingClient(apache.name_server) as client:
        queues, first = rocketmq_harness.make_topic(client, topic)
        sent = _send_all(client, queues, 40)
        big = b"x" * 8000
        client.send(queues[0], [zlib.compress(big)], sys_flag=0x301)
        rows = _read(spark, apache.name_server, topic).collect()
        bodies = sorted(r.body for r in rows)
        assert bodies == sorted([b"first"] * first + [big, *sent.values()])
        df = (
            spark.readStream.format("rocketlite")
            .option("nameServer", apache.name_server)
            .option("topic", topic)
            .option("group", group)
            .option("startingOffsets", "earliest")
            .load()
        )
        collected = run_available_now(df, tmp_path / "checkpoint")
        assert len(collected.rows) == len(rows)
        committed = {mq: client.committed_offset(group, mq) for mq in queues}
        assert committed == {mq: client.max_offset(mq) for mq in queues}


@pytest.mark.parametrize("via", ["endpoints", "nameServer"])
def test_a_restarted_driver_finds_brokers_by_name_before_any_trigger(remoting_broker, via):
    """Spark may plan the last batch of a restarted query again before any trigger probed
    the brokers: the reader then looks each broker up by name."""
    from rmq_spark.source.options import SourceOptions
    from rmq_spark.source.stream_reader import RocketliteStreamReader

    topic = f"NameServerRestart{via}"
    create_topic(remoting_broker.endpoint, topic, queues=1)
    address = {
        "endpoints": remoting_broker.endpoint,
        "nameServer": remoting_broker.remoting_address,
    }
    options = SourceOptions.parse({via: address[via], "topic": topic}, True)
    reader = RocketliteStreamReader(options)
    try:
        start = {topic: {"broker-a": {"0": 0}}}
        end = {topic: {"broker-a": {"0": 5}}}
        (partition,) = reader.partitions(start, end)
        assert partition.endpoints == (("broker-a", address[via]),)
    finally:
        reader.stop()


def test_name_server_takes_the_sources_other_options(spark, remoting_broker):
    """topicPattern (from the name server's topic list), startingTimestamp, endingOffsets,
    and startingOffsets=group after a commit, all read over the remoting protocol."""
    for name in ("PatternA", "PatternB"):
        create_topic(remoting_broker.endpoint, name, queues=1)
    ns = remoting_broker.remoting_address
    with RemotingClient(ns) as client:
        a, b = MessageQueue("PatternA", "broker-a", 0), MessageQueue("PatternB", "broker-a", 0)
        client.send(a, [b"a0", b"a1", b"a2"])
        client.send(b, [b"b0"])
        time.sleep(0.01)
        middle = int(time.time() * 1000)
        time.sleep(0.01)
        client.send(a, [b"a3"])
        client.commit_offset("ns-group", a, 2)

    every = _read(spark, ns, None, topicPattern="Pattern.*").collect()
    assert sorted(r.body for r in every) == [b"a0", b"a1", b"a2", b"a3", b"b0"]
    late = _read(spark, ns, "PatternA", startingTimestamp=str(middle)).collect()
    assert [r.body for r in late] == [b"a3"]
    ending = '{"PatternA": {"broker-a": {"0": 2}}}'
    first_two = _read(spark, ns, "PatternA", endingOffsets=ending).collect()
    assert sorted(r.body for r in first_two) == [b"a0", b"a1"]
    resumed = _read(spark, ns, "PatternA", group="ns-group", startingOffsets="group").collect()
    assert sorted(r.body for r in resumed) == [b"a2", b"a3"]


@pytest.fixture(scope="module")
def replicated(tmp_path_factory):
    """Apache RocketMQ with broker-a as master and slave and a broker-b master; skips the
    test without a build in ``ROCKETMQ_HOME``."""
    if not rocketmq_harness.available():
        pytest.skip("needs Apache RocketMQ 4.9: set ROCKETMQ_HOME to a build with lib/")
    cluster = rocketmq_harness.ReplicatedCluster(tmp_path_factory.mktemp("replicated")).start()
    yield cluster
    cluster.stop()


def _everything(spark, name_server: str, topic: str) -> dict:
    rows = rows_of(_read(spark, name_server, topic))
    assert {broker for broker, _, _ in rows} == {"broker-a", "broker-b"}
    return rows


def test_a_batch_read_takes_a_killed_masters_queues_from_its_slave(spark, replicated):
    topic, ns = "SlaveBatch", replicated.name_server
    queues = replicated.make_topic(topic)
    with RemotingClient(ns) as client:
        sent = _send_all(client, queues, 400)
    replicated.wait_slave_caught_up(queues)
    everything = _everything(spark, ns, topic)
    assert set(sent.items()) <= set(everything.items())
    replicated.kill("broker-a", 0)
    try:
        # every row, broker-a's from its slave: not only broker-b's
        assert rows_of(_read(spark, ns, topic)) == everything
    finally:
        replicated.start_broker("broker-a", 0)


def test_a_streaming_query_reads_on_through_a_masters_sigkill(spark, replicated, tmp_path):
    topic, ns = "SlaveStream", replicated.name_server
    queues = replicated.make_topic(topic)
    b_queues = [mq for mq in queues if mq.broker_name == "broker-b"]
    with RemotingClient(ns) as client:
        _send_all(client, queues, 240)
        replicated.wait_slave_caught_up(queues)
        df = (
            spark.readStream.format("rocketlite")
            .option("nameServer", ns)
            .option("topic", topic)
            .option("group", "slave-stream")
            .option("startingOffsets", "earliest")
            .option("maxMessagesPerTrigger", "40")
            .load()
        )
        query, collected = start_collecting(df, tmp_path / "checkpoint")
        try:
            eventually(
                unless_stopped(query, lambda: collected.rows), what="a first batch", timeout=90
            )
            replicated.kill("broker-a", 0)
            _send_all(client, b_queues, 40)  # broker-a takes no writes without its master
            eventually(
                unless_stopped(query, lambda: len(collected.rows) >= 240 + 2 + 40),
                what="every message so far, broker-a's from its slave",
                timeout=120,
            )
            replicated.start_broker("broker-a", 0)
            _send_all(client, queues, 40)
            everything = _everything(spark, ns, topic)
            eventually(
                unless_stopped(query, lambda: len(collected.rows) >= len(everything)),
                what="the messages sent once the master was back",
                timeout=120,
            )
            assert collected.messages == everything  # nothing lost, nothing read twice

            def caught_up() -> bool:  # the commits refused while the master was down
                return all(
                    client.committed_offset("slave-stream", mq) == client.max_offset(mq)
                    for mq in queues
                )

            eventually(caught_up, what="the group's offsets on the master", timeout=60)
        finally:
            query.stop()


def test_a_broker_group_that_leaves_the_route_fails_the_batch_read_naming_it(spark, replicated):
    """The read is planned with broker-a in the route; then both of its brokers are
    SIGKILLed and the name server forgets it: the read fails naming it, it does not end
    with broker-b's rows only. (This test leaves broker-a down: it runs last.)"""
    topic, ns = "SlaveGone", replicated.name_server
    queues = replicated.make_topic(topic)
    with RemotingClient(ns) as client:
        _send_all(client, queues, 80)
    planned = _read(spark, ns, topic, maxRetries="1", retryBackoffMs="200").rdd  # planned
    replicated.kill("broker-a", 0)
    replicated.kill("broker-a", 1)
    replicated.wait_routed([("broker-b", 0)])
    with pytest.raises(Exception, match="broker group 'broker-a' is no longer in the route"):
        planned.count()
