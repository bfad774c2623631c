"""The ``rocketlite`` sink through ``nameServer`` (RocketMQ's remoting protocol), at least
once: into the rocketlite broker's remoting port (always), and into Apache RocketMQ 4.9 itself
(when ``ROCKETMQ_HOME`` names a build)."""

from __future__ import annotations

import pytest

from rmq_spark.client.remoting import RemotingClient
from rmq_spark.errors import NotFoundError
from tests.support.broker_harness import BrokerProcess
from tests.support.eventually import eventually
from tests.support.sink_helpers import bodies, read_all
from tests.support.spark_helpers import create_topic


def _write(df, name_server: str, topic: str, **options: str) -> None:
    """At least once unless ``options`` say otherwise (``exactlyOnce=None``: the default)."""
    writer = df.write.format("rocketlite").option("nameServer", name_server).mode("append")
    chosen = {"topic": topic, "exactlyOnce": "false", **options}
    for key, value in chosen.items():
        if value is None:
            continue
        writer = writer.option(key, value)
    writer.save()


def _rows(spark, count: int):
    return spark.createDataFrame(
        [(f"m{i}", "TagA" if i % 2 else "TagB", f"k{i}", {"n": str(i)}) for i in range(count)],
        "body string, tags string, keys string, properties map<string,string>",
    )


def test_writes_through_the_remoting_port(spark, tmp_path):
    broker = BrokerProcess(
        "broker-a", tmp_path / "store", tmp_path / "broker.log", ["--remoting-port", "0"]
    ).start()
    try:
        create_topic(broker.endpoint, "ViaRemoting", queues=3)
        _write(_rows(spark, 120), broker.remoting_address, "ViaRemoting", sendBatchSize="16")
        assert bodies(broker.endpoint, "ViaRemoting") == sorted(
            f"m{i}".encode() for i in range(120)
        )
    finally:
        broker.stop()


def test_exactly_once_is_the_default_through_the_remoting_port(spark, tmp_path):
    """A ``df.write`` through ``nameServer`` sends half messages and commits them once the
    job is done: each row visible once, with its tags, keys and properties."""
    broker = BrokerProcess(
        "broker-a", tmp_path / "store", tmp_path / "broker.log", ["--remoting-port", "0"]
    ).start()
    try:
        create_topic(broker.endpoint, "EoRemoting", queues=3)
        _write(_rows(spark, 300).repartition(3), broker.remoting_address, "EoRemoting",
               exactlyOnce=None)  # fmt: skip
        found = read_all(broker.endpoint, "EoRemoting")
        rows = [row for queue in found.values() for row in queue]
        assert sorted(r["body"] for r in rows) == sorted(f"m{i}".encode() for i in range(300))
        by_body = {r["body"]: r for r in rows}
        assert by_body[b"m7"]["tags"] == "TagA" and by_body[b"m7"]["keys"] == ["k7"]
        assert by_body[b"m7"]["properties"]["n"] == "7"
    finally:
        broker.stop()


def test_a_checkpoint_elsewhere_than_on_local_disk_is_refused(spark):
    df = spark.createDataFrame([("x",)], "body string")
    with pytest.raises(Exception, match="checkpointLocation='hdfs://nn/ck' is invalid"):
        _write(df, "127.0.0.1:9876", "T", exactlyOnce="true", checkpointLocation="hdfs://nn/ck")


def test_writes_into_apache_rocketmq(spark, apache):
    topic = "SparkIntoApache"
    _write(_rows(spark, 200), apache.name_server, topic)  # the topic is made on first send
    with RemotingClient(apache.name_server) as client:

        def routed() -> list:
            try:
                return client.route(topic).readable
            except NotFoundError as missing:
                raise AssertionError(str(missing)) from None

        queues = eventually(routed, what="the topic in its route", timeout=30, interval=1)
        found = []
        for mq in queues:
            offset = 0
            while True:
                answer = client.pull(mq, offset, max_messages=64)
                batch = answer.records()
                if not batch.num_rows:
                    break
                found += batch.to_pylist()
                offset = answer.next_begin_offset
    assert sorted(r["body"] for r in found) == sorted(f"m{i}".encode() for i in range(200))
    by_body = {r["body"]: r for r in found}
    assert by_body[b"m7"]["tags"] == "TagA"
    assert by_body[b"m7"]["keys"] == "k7"
    assert dict(by_body[b"m7"]["properties"])["n"] == "7"
