"""Batch reads (``spark.read.format("rocketlite")``) of a real broker."""

from __future__ import annotations

import json
import time

import pytest
from pyspark.sql.functions import spark_partition_id

from rmq_spark.client import Admin, Producer
from rmq_spark.source.partition_options import PARTITIONING_STRATEGIES
from rmq_spark.structs import MessageQueue
from tests.support.spark_helpers import batch, create_topic, produce, rows_of


def test_rows_carry_every_column(spark, broker, topic):
    create_topic(broker.endpoint, topic, queues=1)
    before_ms = int(time.time() * 1000)
    with Producer(broker.endpoint) as producer:
        sent = producer.send(
            topic, b"\x00\xffpayload", tags="TagA", keys=["k1", "k2"], properties={"color": "red"}
        )
    row = batch(spark, broker.endpoint, topic).collect()[0].asDict()
    assert row["topic"] == topic and row["brokerName"] == "broker-a"
    assert (row["queueId"], row["queueOffset"]) == (0, 0)
    assert row["body"] == b"\x00\xffpayload"
    assert (row["tags"], row["keys"], row["msgId"]) == ("TagA", "k1 k2", sent.offset_msg_id)
    assert row["properties"]["color"] == "red" and row["properties"]["UNIQ_KEY"] == sent.msg_id
    # Spark hands timestamps to Python as local naive datetimes; .timestamp() undoes that.
    assert round(row["storeTimestamp"].timestamp() * 1000) == sent.store_timestamp_ms
    assert before_ms <= round(row["bornTimestamp"].timestamp() * 1000) <= sent.store_timestamp_ms
    assert row["storeHost"].startswith("127.0.0.1:") and row["reconsumeTimes"] == 0


def test_explicit_queue_range_reads_exactly_that_range(spark, broker, topic):
    create_topic(broker.endpoint, topic, queues=2)
    sent = produce(broker.endpoint, topic, {0: 40, 1: 40})
    start = {topic: {"broker-a": {"0": 10, "1": 40}}}
    end = {topic: {"broker-a": {"0": 25, "1": 40}}}
    df = batch(
        spark,
        broker.endpoint,
        topic,
        startingOffsets=json.dumps(start),
        endingOffsets=json.dumps(end),
    )
    assert rows_of(df) == {key: sent[key] for key in sent if key[1] == 0 and 10 <= key[2] < 25}


def test_earliest_to_latest_reads_everything_fixed_at_planning(spark, broker, topic):
    create_topic(broker.endpoint, topic, queues=3)
    sent = produce(broker.endpoint, topic, {0: 7, 1: 0, 2: 12})
    df = batch(spark, broker.endpoint, topic, startingOffsets="earliest", endingOffsets="latest")
    assert rows_of(df) == sent
    more = produce(broker.endpoint, topic, {1: 3}, prefix="more")
    assert rows_of(df) == sent  # "latest" was resolved when the DataFrame was planned
    again = batch(spark, broker.endpoint, topic, startingOffsets="earliest")
    assert rows_of(again) == {**sent, **more}


def test_group_start_uses_committed_offsets_then_the_fallback(spark, broker, topic):
    """ConsumeFromWhere: a committed offset always wins; only queues without one fall back."""
    create_topic(broker.endpoint, topic, queues=2)
    sent = produce(broker.endpoint, topic, {0: 10, 1: 10})
    with Admin(broker.endpoint) as admin:
        admin.commit_offsets("replay", {MessageQueue(topic, "broker-a", 0): 6})
    df = batch(spark, broker.endpoint, topic, group="replay", startingOffsets="group")
    assert rows_of(df) == {k: v for k, v in sent.items() if k[1] == 1 or k[2] >= 6}


def test_ending_timestamp_stops_before_later_messages(spark, broker, topic):
    create_topic(broker.endpoint, topic, queues=2)
    early = produce(broker.endpoint, topic, 5, prefix="early")
    time.sleep(0.05)
    boundary = int(time.time() * 1000)
    time.sleep(0.05)
    produce(broker.endpoint, topic, 5, prefix="late")
    df = batch(spark, broker.endpoint, topic, endingTimestamp=str(boundary))
    assert rows_of(df) == early


@pytest.mark.parametrize("strategy", PARTITIONING_STRATEGIES)
def test_each_allocate_strategy_reads_every_queue_exactly_once(spark, broker, topic, strategy):
    create_topic(broker.endpoint, topic, queues=7)
    sent = produce(broker.endpoint, topic, 3)
    df = batch(spark, broker.endpoint, topic, allocateStrategy=strategy, numPartitions="3")
    assert df.rdd.getNumPartitions() <= 3
    owners = df.select("queueId", spark_partition_id().alias("part")).distinct().collect()
    by_queue: dict[int, set[int]] = {}
    for row in owners:
        by_queue.setdefault(row.queueId, set()).add(row.part)
    assert sorted(by_queue) == list(range(7))
    assert all(len(parts) == 1 for parts in by_queue.values())
    assert rows_of(df) == sent


@pytest.mark.parametrize("strategy", ["machineRoom", "config"])
def test_strategies_that_cannot_cover_every_queue_are_refused(spark, broker, strategy):
    with pytest.raises(Exception, match=f"option allocateStrategy='{strategy}' is invalid"):
        batch(spark, broker.endpoint, "orders", allocateStrategy=strategy, numPartitions="2")


def test_max_messages_per_partition_splits_large_queues(spark, broker, topic):
    create_topic(broker.endpoint, topic, queues=2)
    sent = produce(broker.endpoint, topic, {0: 100, 1: 10})
    df = batch(spark, broker.endpoint, topic, maxMessagesPerPartition="30", pullBatchSize="7")
    assert df.rdd.getNumPartitions() == 5  # ceil(100 / 30) + 1
    assert rows_of(df) == sent


def test_min_messages_per_partition_reads_a_small_batch_in_one_task(spark, broker, topic):
    create_topic(broker.endpoint, topic, queues=4)
    sent = produce(broker.endpoint, topic, {0: 10, 1: 0, 2: 7, 3: 40})
    df = batch(spark, broker.endpoint, topic, minMessagesPerPartition="100", pullBatchSize="8")
    assert df.rdd.getNumPartitions() == 1
    assert rows_of(df) == sent
    df = batch(spark, broker.endpoint, topic, minMessagesPerPartition="15")
    assert df.rdd.getNumPartitions() == 2  # queues 0 + 2 (17 messages), then queue 3
    assert rows_of(df) == sent


def test_streaming_only_option_fails_a_batch_query_naming_it(spark, broker, topic):
    create_topic(broker.endpoint, topic, queues=1)
    with pytest.raises(Exception, match="option maxMessagesPerTrigger only applies to streaming"):
        batch(spark, broker.endpoint, topic, maxMessagesPerTrigger="5").count()


def test_missing_topic_fails_with_a_clear_error(spark, broker):
    with pytest.raises(Exception, match="topics no-such-topic have no readable queue"):
        batch(spark, broker.endpoint, "no-such-topic").count()
