"""Streaming reads of real brokers through a real SparkSession."""

from __future__ import annotations

import json
import time
import urllib.request
from datetime import datetime

import pytest

from rmq_spark.cli import main as cli_main
from rmq_spark.client import Admin, Producer
from rmq_spark.structs import MessageQueue
from tests.support.eventually import eventually
from tests.support.spark_helpers import (
    Collected,
    create_topic,
    group_offsets,
    produce,
    rows_of,
    run_available_now,
    start_collecting,
    stream,
    unless_stopped,
)


def test_available_now_reads_exactly_resumes_from_checkpoint_and_commits(
    spark, broker, topic, tmp_path
):
    create_topic(broker.endpoint, topic, queues=3)
    sent = produce(broker.endpoint, topic, {0: 50, 1: 30})  # queue 2 stays empty
    df = stream(spark, broker.endpoint, topic, startingOffsets="earliest", group="etl-a")
    checkpoint, output = tmp_path / "checkpoint", tmp_path / "out"

    assert sum(run_available_now(df, checkpoint, output)) == 80
    assert rows_of(spark.read.parquet(str(output))) == sent

    more = produce(broker.endpoint, topic, {1: 5, 2: 7}, prefix="second")
    assert run_available_now(df, checkpoint, output) == [12]  # only the new messages
    assert rows_of(spark.read.parquet(str(output))) == {**sent, **more}

    # The group's offsets on the broker are the ends the query reached...
    with Admin(broker.endpoint) as admin:
        committed = admin.consumer_offsets("etl-a", topic)
        lag = sum(p.lag for p in admin.consumer_progress("etl-a", topic))
    assert committed == {MessageQueue(topic, "broker-a", q): n for q, n in enumerate([50, 35, 7])}
    assert lag == 0

    # ...so a new query (new checkpoint) starting from the group reads only what came after.
    latest = produce(broker.endpoint, topic, {0: 3}, prefix="third")
    fresh = stream(spark, broker.endpoint, topic, startingOffsets="group", group="etl-a")
    assert run_available_now(fresh, tmp_path / "checkpoint-2").messages == latest


def test_the_usage_in_the_issue_reads_new_messages_and_shows_group_progress(
    spark, broker, topic, tmp_path, capsys
):
    create_topic(broker.endpoint, topic, queues=2)
    produce(broker.endpoint, topic, 5, prefix="before")  # latest: not read
    df = (
        spark.readStream.format("rocketlite")
        .option("endpoints", broker.endpoint)
        .option("topic", topic)
        .option("group", "etl")
        .load()
    )
    query, collected = start_collecting(df, tmp_path / "checkpoint")
    try:
        eventually(
            unless_stopped(query, lambda: query.lastProgress is not None),
            what="the first trigger",
            timeout=60,
        )
        sent = produce(broker.endpoint, topic, 3, prefix="after")
        eventually(
            unless_stopped(query, lambda: len(collected.rows) >= 6),
            what="the new messages",
            timeout=60,
        )
        # The progress is committed at the next trigger (once the batch is done).
        committed = lambda: set(group_offsets(broker.endpoint, "etl", topic).values())  # noqa: E731
        eventually(
            unless_stopped(query, lambda: committed() == {8}), what="the group's commit", timeout=30
        )
    finally:
        query.stop()
    assert collected.messages == sent
    capsys.readouterr()
    assert (
        cli_main(["offsets", "etl", "--topic", topic, "--endpoints", broker.endpoint, "--json"])
        == 0
    )
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["queueId"], r["committed"], r["lag"]) for r in rows] == [(0, 8, 0), (1, 8, 0)]


def test_max_messages_per_trigger_sizes_the_batches(spark, broker, topic, tmp_path):
    create_topic(broker.endpoint, topic, queues=3)
    sent = produce(broker.endpoint, topic, {0: 100, 1: 40, 2: 5})

    def send_more(batch_index: int) -> None:  # arrives after AvailableNow started
        if batch_index == 0:
            produce(broker.endpoint, topic, {2: 10}, prefix="late")

    df = stream(
        spark, broker.endpoint, topic, startingOffsets="earliest", maxMessagesPerTrigger="50"
    )
    collected = run_available_now(df, tmp_path / "checkpoint", collected=Collected(send_more))
    assert collected.sizes == [50, 50, 45]  # not the 10 late ones: AvailableNow stops where
    assert collected.messages == sent  # the brokers were when the query started
    first = {row.queueId for row in collected.batches[0]}
    assert first == {0, 1, 2}  # shared by backlog, the small queue is not starved


def test_trigger_once_reads_all_available_despite_the_limit(spark, broker, topic, tmp_path):
    create_topic(broker.endpoint, topic, queues=2)
    sent = produce(broker.endpoint, topic, 20)
    df = stream(
        spark, broker.endpoint, topic, startingOffsets="earliest", maxMessagesPerTrigger="5"
    )
    collected = run_available_now(df, tmp_path / "checkpoint", once=True)
    assert collected.sizes == [40]  # the engine's ReadAllAvailable wins
    assert collected.messages == sent


def test_min_messages_per_trigger_waits_up_to_the_max_delay(spark, broker, topic, tmp_path):
    create_topic(broker.endpoint, topic, queues=1)
    produce(broker.endpoint, topic, 12)
    df = stream(
        spark, broker.endpoint, topic, startingOffsets="earliest",
        minMessagesPerTrigger="10", maxTriggerDelay="5s",
    )  # fmt: skip
    produced_at: dict[int, float] = {}  # wall clock, as the query's progress

    def next_step(batch_index: int) -> None:
        if batch_index == 0:  # too few to start a batch before maxTriggerDelay
            produce(broker.endpoint, topic, 3, prefix="few")
        elif batch_index == 1:  # enough for a batch at once
            produce(broker.endpoint, topic, 10, prefix="many")
        produced_at[batch_index] = time.time()

    query, collected = start_collecting(
        df, tmp_path / "checkpoint", "200 milliseconds", Collected(next_step)
    )

    def trigger_times() -> list[float]:
        """When the trigger of each batch with rows began, from the query's progress (a
        batch's comes once it is committed): maxTriggerDelay counts from the last batch's
        trigger, not from when the messages came (in the middle of the last batch: on a
        loaded machine, seconds later)."""
        return [
            datetime.fromisoformat(p["timestamp"]).timestamp()
            for p in sorted(query.recentProgress, key=lambda p: p["batchId"])
            if p["numInputRows"]
        ]

    try:
        began = eventually(
            unless_stopped(query, lambda: len(times := trigger_times()) >= 3 and times),
            what="three batches committed",
            timeout=60,
        )
    finally:
        query.stop()
    assert collected.sizes == [12, 3, 10]
    assert began[1] - began[0] > 4.0  # the 3 waited for maxTriggerDelay
    assert began[2] - produced_at[1] < 4.0  # the 10 did not: the next trigger took them


def test_max_bytes_per_trigger_splits_the_backlog(spark, broker, topic, tmp_path):
    create_topic(broker.endpoint, topic, queues=2)
    sent = produce(broker.endpoint, topic, 200)
    df = stream(spark, broker.endpoint, topic, startingOffsets="earliest", maxBytesPerTrigger="16k")
    collected = run_available_now(df, tmp_path / "checkpoint")
    assert len(collected.sizes) > 1
    assert collected.messages == sent


def test_max_bytes_per_trigger_holds_for_large_messages_next_to_tiny_ones(
    spark, broker, topic, tmp_path
):
    """120 messages of 4 KB on a broker that also holds 20,000 tiny ones: a broker-wide
    average would admit everything at once; the limit holds batch by batch."""
    other = f"{topic}-tiny"
    create_topic(broker.endpoint, other, queues=1)
    produce(broker.endpoint, other, 20_000, prefix="t")
    create_topic(broker.endpoint, topic, queues=2)
    with Producer(broker.endpoint) as producer:
        for i in range(120):
            producer.send(topic, b"%04d" % i + b"x" * 4_000)
    df = stream(spark, broker.endpoint, topic, startingOffsets="earliest", maxBytesPerTrigger="32k")
    collected = run_available_now(df, tmp_path / "checkpoint")
    body_bytes = [sum(len(row.body) for row in rows) for rows in collected.batches if rows]
    assert sum(collected.sizes) == 120
    # Records carry ~200 bytes of header and properties on top of the body.
    assert max(body_bytes) <= 32 * 1024, body_bytes
    assert len(body_bytes) >= 120 * 4_200 // (32 * 1024)


def test_tag_filter_reads_matching_tags_across_gaps(spark, broker, topic, tmp_path):
    create_topic(broker.endpoint, topic, queues=2)
    sent = produce(broker.endpoint, topic, {0: 30, 1: 12}, tags=["TagA", "TagB", "TagC", None])
    df = stream(
        spark, broker.endpoint, topic, startingOffsets="earliest", subExpression="TagA || TagC"
    )
    collected = run_available_now(df, tmp_path / "checkpoint")
    expected = {key: body for key, body in sent.items() if key[2] % 4 in (0, 2)}
    assert collected.messages == expected
    assert {row.tags for row in collected.rows} == {"TagA", "TagC"}


def test_starting_timestamp_skips_older_messages(spark, broker, topic, tmp_path):
    create_topic(broker.endpoint, topic, queues=2)
    produce(broker.endpoint, topic, 10, prefix="old")
    time.sleep(0.05)
    boundary = int(time.time() * 1000)
    time.sleep(0.05)
    new = produce(broker.endpoint, topic, 4, prefix="new")
    df = stream(spark, broker.endpoint, topic, startingTimestamp=str(boundary))
    assert run_available_now(df, tmp_path / "checkpoint").messages == new


def test_topic_pattern_picks_up_new_topics_and_queues(spark, broker, topic, tmp_path):
    first, second = f"{topic}-x", f"{topic}-y"
    create_topic(broker.endpoint, first, queues=1)
    sent = produce(broker.endpoint, first, 5)
    df = stream(spark, broker.endpoint, topicPattern=f"{topic}-.*", startingOffsets="earliest")
    query, collected = start_collecting(df, tmp_path / "checkpoint")
    try:
        eventually(
            unless_stopped(query, lambda: len(collected.rows) >= 5),
            what="the first topic's messages",
            timeout=60,
        )
        create_topic(broker.endpoint, second, queues=2)  # a new topic ...
        new_topic = produce(broker.endpoint, second, 3, prefix="y")
        with Admin(broker.endpoint) as admin:  # ... and a new queue of the first one
            admin.update_topic(first, queues=2)
        new_queue = produce(broker.endpoint, first, {1: 4}, prefix="x1")
        total = len(sent) + len(new_topic) + len(new_queue)
        eventually(
            unless_stopped(query, lambda: len(collected.rows) >= total),
            what="the new topic and queue",
            timeout=60,
        )
    finally:
        query.stop()
    by_topic = {(row.topic, row.queueId, row.queueOffset) for row in collected.rows}
    assert len(by_topic) == len(collected.rows) == total
    assert {(t, q) for t, q, _ in by_topic} == {(first, 0), (first, 1), (second, 0), (second, 1)}
    assert min(o for t, q, o in by_topic if (t, q) == (first, 1)) == 0  # read from 0


def test_two_brokers_are_read_and_committed(spark, broker_factory, topic, tmp_path):
    brokers = [broker_factory("broker-b"), broker_factory("broker-c")]
    endpoints = ",".join(b.endpoint for b in brokers)
    create_topic(endpoints, topic, queues=2)
    sent = {}
    for b in brokers:
        sent.update(produce(endpoints, topic, {0: 6, 1: 3}, broker=b.name))
    df = stream(spark, endpoints, topic, startingOffsets="earliest", group="two")
    collected = run_available_now(df, tmp_path / "checkpoint")
    assert collected.messages == sent
    assert {key[0] for key in sent} == {"broker-b", "broker-c"}
    with Admin(endpoints) as admin:
        committed = admin.consumer_offsets("two", topic)
    assert committed == {
        MessageQueue(topic, name, q): [6, 3][q] for name in ("broker-b", "broker-c") for q in (0, 1)
    }


def test_unknown_and_malformed_options_fail_at_load(spark, broker):
    for reader in (spark.readStream, spark.read):  # as Spark's Kafka source does
        with pytest.raises(Exception, match=r"topics \(comma-separated list\) or topicPattern"):
            reader.format("rocketlite").option("endpoints", broker.endpoint).load()
    with pytest.raises(
        Exception,
        match=r"(?i)unknown option 'maxOffsetsPerTrigger'.*did you mean maxMessagesPerTrigger",
    ):
        stream(spark, broker.endpoint, "orders", maxOffsetsPerTrigger="10")
    with pytest.raises(Exception, match="option maxMessagesPerTrigger='ten' is invalid"):
        stream(spark, broker.endpoint, "orders", maxMessagesPerTrigger="ten")
    with pytest.raises(
        Exception, match="startingOffsets: topic 'orders' broker 'b' queue 'x' is not a queue id"
    ):
        stream(
            spark,
            broker.endpoint,
            "orders",
            startingOffsets=json.dumps({"orders": {"b": {"x": 1}}}),
        )


def test_lag_listener_reports_how_far_behind_each_batch_is(spark, broker, topic, tmp_path):
    from rmq_spark.source.lag import LagListener

    create_topic(broker.endpoint, topic, queues=2)
    produce(broker.endpoint, topic, {0: 30, 1: 10})
    seen, scraped = [], []

    def on_lag(query_id, lag):  # the driver's gauges, scraped as Prometheus would
        seen.append(lag)
        with urllib.request.urlopen(f"http://127.0.0.1:{listener.prometheus_port}/metrics") as r:
            scraped.append(r.read().decode())

    listener = LagListener(on_lag, prometheus_port=0)
    spark.streams.addListener(listener)
    try:
        df = stream(
            spark, broker.endpoint, topic, startingOffsets="earliest", maxMessagesPerTrigger="10"
        )
        batches = len(run_available_now(df, tmp_path / "checkpoint").batches)
        # Listener events arrive asynchronously, also after the query has ended: wait for one
        # per batch that had data.
        eventually(
            lambda: len(seen) >= batches, what=f"lag reports of {batches} batches", timeout=30
        )

        # Once the query has ended, its series are gone: the listener drops them when told
        # of the end, an event that follows the last progress event on the same bus. Only
        # a listener still registered is told (Spark drops the events not yet delivered to
        # one removed), so the wait is before the removal.
        def ended():
            url = f"http://127.0.0.1:{listener.prometheus_port}/metrics"
            with urllib.request.urlopen(url) as r:
                return "rocketlite_query_lag_messages{" not in r.read().decode()

        eventually(ended, what="the ended query's series gone", timeout=30)
    finally:
        spark.streams.removeListener(listener)
        listener.close()
    assert seen, "no lag was reported"
    first, last = seen[0], seen[-1]
    # First batch: 10 of 40 admitted, shared by backlog (7 + 3): 23 and 7 left behind.
    assert sorted(first.queues.values()) == [7, 23]
    assert (first.min, first.max, first.avg) == (7, 23, 15.0)
    assert last.max == 0 and last.metrics()["avgOffsetsBehindLatest"] == 0
    from prometheus_client.parser import text_string_to_metric_families

    def gauges(text):
        return {
            (s.name, s.labels.get("queue_id")): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
            if s.labels.get("topic", topic) == topic
        }

    first_scrape = gauges(scraped[0])
    queue_lags = sorted(v for (n, q), v in first_scrape.items() if n.endswith("query_lag_messages"))
    assert queue_lags == [7, 23]
    assert first_scrape["rocketlite_query_max_lag_messages", None] == 23
