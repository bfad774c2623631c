"""Filters pushed into a batch read: the same rows as without pushdown, fewer messages
pulled from the broker (its own count, GetBrokerInfo.server_stats.messages_pulled; the
reads pull, short-circuit reads turned off, so the broker sees every message read).

Each query loads its own DataFrame: pyspark 4.3 keeps a pushed-down plan on the loaded
DataFrame's data source (see rmq_spark.datasource.RocketliteDataSource)."""

from __future__ import annotations

import datetime as dt
import time

import pytest
from pyspark.sql import functions as F

from tests.support.spark_helpers import batch as batch_read
from tests.support.spark_helpers import create_topic, messages_pulled, produce, pushdown, rows_of


def batch(spark, endpoint, topic, **options):
    """A batch read that pulls (no short-circuit reads): the broker counts what it serves."""
    return batch_read(spark, endpoint, topic, shortCircuit="false", **options)


def rows_and_pulled(spark, endpoint, df):
    before = messages_pulled(endpoint)
    rows = rows_of(df)
    return rows, messages_pulled(endpoint) - before


def test_queue_offset_topic_and_tag_filters_pull_only_what_matches(spark, broker, topic):
    create_topic(broker.endpoint, topic, queues=4)
    sent = produce(broker.endpoint, topic, 100, tags=["TagA", "TagB", "TagC", "TagD"])

    def load(**options):
        return batch(spark, broker.endpoint, topic, startingOffsets="earliest", **options)

    cases = [
        (F.col("queueId") == 2, lambda k: k[1] == 2, 100),
        (F.col("queueId").isin(0, 3), lambda k: k[1] in (0, 3), 200),
        ((F.col("queueOffset") >= 10) & (F.col("queueOffset") < 20), lambda k: 10 <= k[2] < 20, 40),
        (F.col("tags").isin("TagB", "TagD"), lambda k: k[2] % 4 in (1, 3), 200),
        ((F.col("topic") == topic) & (F.col("queueId") == 1) & (F.col("queueOffset") == 7),
         lambda k: k[1] == 1 and k[2] == 7, 1),
        (F.col("topic") == "someOtherTopic", lambda k: False, 0),
    ]  # fmt: skip
    for condition, wanted, pulled_with_pushdown in cases:
        expected = {k: v for k, v in sent.items() if wanted(k)}
        with pushdown(spark):
            df = load(filterPushdown="true").where(condition)
            rows, count = rows_and_pulled(spark, broker.endpoint, df)
        assert rows == expected
        assert count == pulled_with_pushdown, condition
    # Without the option: the same rows, every message pulled.
    with pushdown(spark):
        df = load().where(F.col("queueId") == 2)
        rows, count = rows_and_pulled(spark, broker.endpoint, df)
    assert rows == {k: v for k, v in sent.items() if k[1] == 2}
    assert count == 400
    # The option without Spark's setting (its default): the read is refused, naming the
    # setting, rather than quietly pulling everything.
    with pushdown(spark, False), pytest.raises(Exception, match=r"filterPushdown\.enabled"):
        load(filterPushdown="true").where(F.col("queueId") == 2).collect()


def test_a_store_time_window_pulls_about_that_window(spark, broker, topic):
    create_topic(broker.endpoint, topic, queues=2)
    phases = []
    for phase in range(5):
        if phase:
            time.sleep(0.3)
        phases.append(produce(broker.endpoint, topic, 60, prefix=f"phase{phase}"))
    df = batch(spark, broker.endpoint, topic, startingOffsets="earliest")
    stamps = {
        (r.brokerName, r.queueId, r.queueOffset): r.storeTimestamp
        for r in df.select("brokerName", "queueId", "queueOffset", "storeTimestamp").collect()
    }
    window = [stamps[k] for k in phases[2]]
    low, high = min(window), max(window)
    condition = (F.col("storeTimestamp") >= low) & (F.col("storeTimestamp") <= high)
    with pushdown(spark):
        df = batch(spark, broker.endpoint, topic, startingOffsets="earliest", filterPushdown="true")
        rows, count = rows_and_pulled(spark, broker.endpoint, df.where(condition))
    assert rows == phases[2]
    assert count == 120  # one phase of five: the others are 300 ms away
    assert isinstance(low, dt.datetime)
