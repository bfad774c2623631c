"""Data loss (retention deleted messages before they were read) and broker restarts."""

from __future__ import annotations

import json
import shutil
import threading
import time

import pytest

from rmq_spark.client import Admin
from rmq_spark.source.options import SourceOptions
from rmq_spark.source.planning import QueueRange
from rmq_spark.source.read import RocketlitePartition, read_partition
from rmq_spark.structs import MessageQueue
from tests.support.broker_harness import free_port, start_in_process_broker
from tests.support.eventually import eventually
from tests.support.spark_helpers import (
    batch,
    create_topic,
    produce,
    rows_of,
    run_available_now,
    stream,
)

SMALL_SEGMENTS = {"commitlog_segment_bytes": 64 << 10, "consumequeue_entries_per_file": 256}


@pytest.fixture
def small_segment_broker(tmp_path):
    """A broker in this process, so the test can run retention now (64 KiB segments)."""
    local = start_in_process_broker(
        tmp_path / "store", name="broker-loss", store_options=dict(SMALL_SEGMENTS)
    )
    yield local
    local.stop()


@pytest.mark.slow
def test_retention_before_reading_fails_or_skips(spark, small_segment_broker, topic, tmp_path):
    endpoint = small_segment_broker.endpoint
    create_topic(endpoint, topic, queues=1)
    produce(endpoint, topic, {0: 20}, prefix="early")
    df = stream(spark, endpoint, topic, startingOffsets="earliest")
    checkpoint = tmp_path / "checkpoint"
    assert run_available_now(df, checkpoint).sizes == [20]

    # Several segments more, then retention deletes every segment but the one written now.
    later = {}  # in batches that fit in one 64 KiB segment each
    for part in range(15):
        later.update(produce(endpoint, topic, {0: 200}, prefix="x" * 100 + f"-{part}"))
    assert small_segment_broker.broker.store.delete_expired_files(max_age_ms=0) > 0
    with Admin(endpoint) as admin:
        mq = MessageQueue(topic, "broker-loss", 0)
        low = admin.query_offsets([mq])[mq].min_offset
    assert 20 < low < 3020
    kept = {key: body for key, body in later.items() if key[2] >= low}
    shutil.copytree(checkpoint, tmp_path / "checkpoint-skip")

    lost = rf"topic '{topic}' broker 'broker-loss' queue 0: messages 20\.\.{low - 1} were deleted"
    with pytest.raises(Exception, match=lost):
        run_available_now(df, checkpoint)

    skipping = stream(spark, endpoint, topic, startingOffsets="earliest", failOnDataLoss="false")
    assert run_available_now(skipping, tmp_path / "checkpoint-skip").messages == kept

    # A batch read from offsets retention removed: the same choice.
    start = json.dumps({topic: {"broker-loss": {"0": 5}}})
    with pytest.raises(Exception, match=rf"messages 5\.\.{low - 1} were deleted"):
        batch(spark, endpoint, topic, startingOffsets=start).count()
    skipped = batch(spark, endpoint, topic, startingOffsets=start, failOnDataLoss="false")
    assert rows_of(skipped) == kept


@pytest.mark.slow
def test_a_broker_restart_does_not_fail_a_read(broker_factory, topic):
    """A task pulling while its broker restarts waits (retries with backoff) and goes on."""
    port = free_port()
    broker = broker_factory("broker-r", "--port", str(port))
    create_topic(broker.endpoint, topic, queues=1)
    sent = produce(broker.endpoint, topic, {0: 300})
    options = SourceOptions.parse(
        {"endpoints": broker.endpoint, "topic": topic, "pullBatchSize": "50",
         "retryBackoffMs": "300", "maxRetries": "6"},
        streaming=False,
    )  # fmt: skip
    mq = MessageQueue(topic, "broker-r", 0)
    partition = RocketlitePartition((QueueRange(mq, 0, 300),), (("broker-r", broker.endpoint),))
    batches = read_partition(partition, options)
    first = next(batches)  # one pull done; now the broker goes away for a while
    broker.stop()
    restarter = threading.Timer(1.0, broker.start)
    restarter.start()
    started = time.monotonic()
    rest = list(batches)
    restarter.join()
    assert time.monotonic() - started >= 0.9
    offsets = [o for b in [first, *rest] for o in b.column("queueOffset").to_pylist()]
    bodies = [v for b in [first, *rest] for v in b.column("body").to_pylist()]
    assert offsets == list(range(300))
    assert bodies == [sent[("broker-r", 0, o)] for o in offsets]


@pytest.mark.slow
def test_a_stream_survives_a_broker_restart(spark, broker_factory, topic, tmp_path):
    from tests.support.spark_helpers import start_collecting, unless_stopped

    broker = broker_factory("broker-s", "--port", str(free_port()))
    create_topic(broker.endpoint, topic, queues=2)
    sent = produce(broker.endpoint, topic, 20)
    df = stream(
        spark, broker.endpoint, topic, startingOffsets="earliest", retryBackoffMs="200",
        maxRetries="2",
    )  # fmt: skip
    query, collected = start_collecting(df, tmp_path / "checkpoint")
    try:
        eventually(
            unless_stopped(query, lambda: len(collected.rows) >= 40),
            what="the first messages",
            timeout=60,
        )
        broker.stop()
        time.sleep(2.0)  # triggers run while the broker is down
        broker.start()
        sent.update(produce(broker.endpoint, topic, 10, prefix="after"))
        eventually(
            unless_stopped(query, lambda: len(collected.rows) >= 60),
            what="the messages sent after the restart",
            timeout=60,
        )
        assert query.isActive and query.exception() is None
    finally:
        query.stop()
    assert collected.messages == sent


@pytest.mark.slow
def test_a_stream_with_default_options_rides_through_broker_kills(
    spark, broker_factory, topic, tmp_path
):
    """SIGKILL the broker while the query reads a backlog, three times, each outage about
    4 s, and restart it on the same port: with the default retry options the query keeps
    running, resumes soon after each restart, and every message arrives exactly once."""
    from tests.support.spark_helpers import start_collecting, unless_stopped

    broker = broker_factory("broker-k", "--port", str(free_port()))
    create_topic(broker.endpoint, topic, queues=2)
    sent = produce(broker.endpoint, topic, 3_000)
    # Small pulls and triggers: the backlog takes many pulls, so kills land mid-read.
    df = stream(
        spark, broker.endpoint, topic, startingOffsets="earliest", pullBatchSize="64",
        maxMessagesPerTrigger="500",
    )  # fmt: skip
    query, collected = start_collecting(df, tmp_path / "checkpoint", interval="1 second")
    try:
        for kill in range(3):
            eventually(
                lambda k=kill: len(collected.rows) > 500 * k,
                what=f"rows before kill {kill}",
                timeout=90,
            )
            broker.kill()
            time.sleep(4.0)
            broker.start()
            back = time.monotonic()
            before = len(collected.rows)
            sent.update(produce(broker.endpoint, topic, 20, prefix=f"after-kill-{kill}"))
            eventually(
                unless_stopped(query, lambda b=before: len(collected.rows) > b),
                what="rows after the restart",
                timeout=60,
            )
            assert time.monotonic() - back < 15, "the query took too long to resume"
        eventually(
            unless_stopped(query, lambda: len(collected.rows) >= len(sent)),
            what="every message",
            timeout=120,
        )
        assert query.isActive and query.exception() is None
    finally:
        query.stop()
    assert collected.messages == sent


@pytest.mark.parametrize("fail_on_data_loss", ["true", "false"])
def test_available_now_does_not_end_short_after_a_queue_goes_backwards(
    spark, broker, topic, tmp_path, fail_on_data_loss
):
    """The query sets out to reach offset 15; after its first batch the topic is deleted and
    re-created with 10 messages. The new messages are not the continuation of the old ones:
    with failOnDataLoss=true the query fails naming the queue; with false it warns and reads
    the new queue from its first message."""
    from tests.support.spark_helpers import Collected

    create_topic(broker.endpoint, topic, queues=1)
    produce(broker.endpoint, topic, {0: 15}, prefix="old")
    recreated = {}

    def recreate(batch_index: int) -> None:
        if batch_index == 0:
            with Admin(broker.endpoint) as admin:
                admin.delete_topic(topic)
            create_topic(broker.endpoint, topic, queues=1)
            recreated.update(produce(broker.endpoint, topic, {0: 10}, prefix="new"))

    df = stream(
        spark, broker.endpoint, topic, startingOffsets="earliest", maxMessagesPerTrigger="5",
        failOnDataLoss=fail_on_data_loss,
    )  # fmt: skip
    collected = Collected(recreate)
    shrunk = r"queue 0: the queue now ends at offset 10, below offset 15"
    if fail_on_data_loss == "true":
        with pytest.raises(Exception, match=shrunk):
            run_available_now(df, tmp_path / "checkpoint", collected=collected)
        assert collected.sizes == [5]
        return
    run_available_now(df, tmp_path / "checkpoint", collected=collected)
    bodies = [bytes(row.body) for row in collected.rows]
    assert bodies[:5] == [b"old-broker-a-0-%d" % i for i in range(5)]
    # Old and new messages share positions (the new queue starts at 0 again), so they are
    # compared by body: all of the new queue, from its first message, each once.
    new_rows = {
        ("broker-a", row.queueId, row.queueOffset): bytes(row.body)
        for row in collected.rows
        if bytes(row.body).startswith(b"new")
    }
    assert new_rows == recreated
    assert len(bodies) == 15
