"""The Spark sink's transactions on real broker processes, without Spark: the sink's task
writer stages rows, the driver's batch end commits them. What a consumer sees after broker
kills, replays, a driver that died between two brokers, and a dead query's timeout."""

from __future__ import annotations

import threading
import time

import pyarrow as pa
import pytest

from rmq_spark.client import Admin, Producer
from rmq_spark.errors import InvalidArgumentError
from rmq_spark.sink.commit import abort_batch, end_batch
from rmq_spark.sink.options import SinkOptions
from rmq_spark.sink.rows import plan_columns
from rmq_spark.sink.send import TaskWriter
from rmq_spark.wire.proto_gen.rocketlite.v1 import messaging_pb2
from tests.support.broker_harness import read_queue
from tests.support.eventually import eventually

PLAN = plan_columns([("body", "string"), ("shardingKey", "string")], "out")


def visible(endpoint: str, topic: str = "out") -> list[bytes]:
    """Every body of ``topic`` on the broker at ``endpoint`` a consumer sees, sorted."""
    with Admin(endpoint) as admin:
        queues = admin.describe_topic(topic).readable
    return sorted(
        row["body"]
        for mq in queues
        for row in read_queue(endpoint, topic, mq.queue_id, mq.broker_name)
    )


def write(endpoints: str, sink: str, txn: str, bodies: list[str], partition: int = 0, **opts):
    options = SinkOptions.parse({"endpoints": endpoints, "topic": "out", **opts})
    writer = TaskWriter(options, PLAN, sink, txn, partition)
    try:
        keys = [f"k{i % 3}" for i in range(len(bodies))]
        writer.write(pa.RecordBatch.from_pydict({"body": bodies, "shardingKey": keys}))
        return writer.finish()
    finally:
        writer.close()


def options(endpoints: str) -> SinkOptions:
    return SinkOptions.parse({"endpoints": endpoints, "topic": "out"})


@pytest.fixture
def broker(broker_factory):
    process = broker_factory("broker-a")
    with Admin(process.endpoint) as admin:
        admin.create_topic("out", queues=3)
    return process


def test_staged_rows_are_invisible_until_the_batch_ends(broker):
    ep = broker.endpoint
    commit = write(ep, "s1", "s1.t0", [f"r{i}" for i in range(100)], sendBatchSize="7")
    assert commit.parts == {"broker-a": ("s1.t0", 100)}
    assert visible(ep) == []
    end = end_batch(options(ep), "s1", 0, [commit])
    assert (end.replayed, end.committed_messages) == (False, 100)
    assert visible(ep) == sorted(f"r{i}".encode() for i in range(100))


def test_a_repeated_send_is_staged_once(broker, connect):
    stubs = connect(broker.endpoint)
    request = messaging_pb2.SendMessagesRequest(
        topic="out",
        queue_id=0,
        columns=messaging_pb2.MessageColumns(
            bodies=b"ab",
            body_sizes=[1, 1],
            properties=b"UNIQ_KEY\x01A1\x02UNIQ_KEY\x01A2\x02",
            properties_sizes=[12, 12],
        ),
        stage=messaging_pb2.SinkStage(sink_id="s2", transaction_id="s2.t", sequence=0),
    )
    first = stubs.messaging.SendMessages(request)
    again = stubs.messaging.SendMessages(request)  # as a retry after a lost answer
    assert again.columns_result.first_queue_offset == first.columns_result.first_queue_offset
    commit = messaging_pb2.EndSinkBatchRequest(
        sink_id="s2",
        batch_id=0,
        commit=True,
        decision=[
            messaging_pb2.SinkBrokerPart(
                broker_name="broker-a",
                transactions=[
                    messaging_pb2.SinkTransactionCount(transaction_id="s2.t", messages=2)
                ],
            )
        ],
    )
    assert stubs.messaging.EndSinkBatch(commit).committed_messages == 2
    assert visible(broker.endpoint) == [b"a", b"b"]


def test_pending_rows_survive_a_broker_kill(broker):
    commit = write(broker.endpoint, "s3", "s3.t0", [f"r{i}" for i in range(500)])
    broker.kill()
    broker.restart()  # on another port, maybe
    ep = broker.endpoint
    assert visible(ep) == []
    end = end_batch(options(ep), "s3", 0, [commit])
    assert end.committed_messages == 500
    assert visible(ep) == sorted(f"r{i}".encode() for i in range(500))
    # and the committed batch too survives a kill: its replay is recognised
    broker.kill()
    broker.restart()
    ep = broker.endpoint
    replay = write(ep, "s3", "s3.t1", [f"r{i}" for i in range(500)])
    assert end_batch(options(ep), "s3", 0, [replay]).replayed
    assert len(visible(ep)) == 500


def test_a_replayed_batch_is_committed_once(broker):
    ep = broker.endpoint
    first = write(ep, "s4", "s4.b0.first", ["x", "y"])
    end_batch(options(ep), "s4", 0, [first])
    # the driver died before Spark recorded batch 0: the batch runs again
    replay = write(ep, "s4", "s4.b0.replay", ["x", "y"])
    end = end_batch(options(ep), "s4", 0, [replay])
    assert (end.replayed, end.committed_messages, end.rolled_back) == (True, 0, 1)
    assert visible(ep) == [b"x", b"y"]
    # the next batch goes on as usual
    end_batch(options(ep), "s4", 1, [write(ep, "s4", "s4.b1", ["z"])])
    assert visible(ep) == [b"x", b"y", b"z"]


def test_a_failed_attempt_and_an_abort_leave_nothing_visible(broker):
    ep = broker.endpoint
    write(ep, "s5", "s5.attempt0", ["lost"])  # a task attempt that failed after sending
    good = write(ep, "s5", "s5.attempt1", ["kept"])
    end = end_batch(options(ep), "s5", 0, [good])
    assert end.rolled_back == 1
    write(ep, "s5", "s5.b1", ["aborted"])
    assert abort_batch(options(ep), "s5", 1) == 1
    assert visible(ep) == [b"kept"]


def test_a_dead_querys_rows_are_rolled_back_after_the_timeout(broker_factory):
    timeout_ms = 300
    process = broker_factory("broker-a", "--sink-transaction-timeout-ms", str(timeout_ms))
    ep = process.endpoint
    with Admin(ep) as admin:
        admin.create_topic("out", queues=1)
    dead = write(ep, "s6", "s6.t0", ["never"])
    # the broker judges expiry when the batch ends, against the time the rows were staged:
    # twice the timeout later it has passed, however slow the machine
    time.sleep(2 * timeout_ms / 1000)
    with pytest.raises(InvalidArgumentError, match=r"'s6\.t0' is not pending"):
        end_batch(options(ep), "s6", 0, [dead])
    assert visible(ep) == []
    # the broker keeps serving the sink's later batches
    end_batch(options(ep), "s6", 0, [write(ep, "s6", "s6.t1", ["later"])])
    assert visible(ep) == [b"later"]


def test_a_batch_over_two_brokers_commits_once_when_the_driver_died_between_them(
    broker_factory, connect
):
    a = broker_factory("broker-a")
    b = broker_factory("broker-b")
    eps = f"{a.endpoint},{b.endpoint}"
    for process in (a, b):
        with Admin(process.endpoint) as admin:
            admin.create_topic("out", queues=2)
    rows = [f"r{i}" for i in range(40)]
    original = write(eps, "s7", "s7.orig", rows, sendBatchSize="5")
    assert set(original.parts) == {"broker-a", "broker-b"}
    # The driver asked the coordinator (the first endpoint's broker) and died.
    decision = [
        messaging_pb2.SinkBrokerPart(
            broker_name=name,
            transactions=[messaging_pb2.SinkTransactionCount(transaction_id=t, messages=n)],
        )
        for name, (t, n) in sorted(original.parts.items())
    ]
    connect(a.endpoint).messaging.EndSinkBatch(
        messaging_pb2.EndSinkBatchRequest(sink_id="s7", batch_id=0, commit=True, decision=decision)
    )
    # The restarted query runs batch 0 again; its rows land on the brokers differently.
    replay = write(eps, "s7", "s7.replay", rows, partition=1, sendBatchSize="3")
    end = end_batch(options(eps), "s7", 0, [replay])
    assert end.replayed
    seen = visible(a.endpoint) + visible(b.endpoint)
    assert sorted(seen) == sorted(r.encode() for r in rows)


def test_at_least_once_writes_are_visible_at_once(broker):
    ep = broker.endpoint
    commit = write(ep, "unused", "unused.t", ["now"], exactlyOnce="false")
    assert commit.parts == {} and commit.rows == 1
    assert visible(ep) == [b"now"]


def test_producer_sends_and_staged_sends_share_the_queue(broker):
    ep = broker.endpoint
    staged = write(ep, "s8", "s8.t", ["staged"])
    with Producer(ep) as producer:
        producer.send("out", b"plain")
    assert visible(ep) == [b"plain"]
    end_batch(options(ep), "s8", 0, [staged])
    assert visible(ep) == [b"plain", b"staged"]


@pytest.mark.slow
def test_a_broker_killed_during_a_commit_finishes_it_when_it_starts(broker_factory):
    """The broker is killed while it writes a large commit's rows to their queues: the test
    watches the broker's sink state file and kills it as soon as a commit is recorded as in
    progress. When it starts again it writes the rest, and every row is visible once."""
    process = broker_factory("broker-a")
    state = process.store_dir / "config" / "sinkTransactions.json"
    with Admin(process.endpoint) as admin:
        admin.create_topic("out", queues=3)
    rows = [f"row-{i:06d}" for i in range(60_000)]
    expected = sorted(r.encode() for r in rows)
    cut_short = 0
    for attempt in range(5):  # the window is short: try again if a kill came too late
        sink = f"crash{attempt}"
        commit = write(process.endpoint, sink, f"{sink}.t", rows, sendBatchSize="500")
        ending = threading.Thread(
            target=_end_ignoring_the_kill, args=(options(process.endpoint), sink, commit)
        )
        ending.start()
        deadline = time.monotonic() + 30
        while ending.is_alive() and time.monotonic() < deadline:
            if '"committing": {' in _read(state):
                break
        process.kill()
        ending.join(60)
        process.restart()
        # the driver ends the batch again (Spark retries the commit after a restart)
        end_batch(options(process.endpoint), sink, 0, [commit])
        # every batch so far once: none lost, none doubled by the redo
        assert visible(process.endpoint) == sorted(expected * (attempt + 1))
        cut_short = process.log_text().count("finishing a commit cut short")
        if cut_short:
            break
    assert cut_short, "no kill landed inside a commit"


def _read(path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _end_ignoring_the_kill(opts: SinkOptions, sink: str, commit) -> None:
    try:
        end_batch(opts, sink, 0, [commit])
    except Exception:  # the broker died under the call: expected here
        pass


def test_a_delayed_row_is_delivered_its_delay_after_the_commit(broker):
    ep = broker.endpoint
    plan = plan_columns([("body", "string"), ("delayLevel", "int")], "out")
    writer = TaskWriter(options(ep), plan, "s9", "s9.t", 0)
    try:
        writer.write(pa.RecordBatch.from_pydict({"body": ["now", "later"], "delayLevel": [0, 1]}))
        commit = writer.finish()
    finally:
        writer.close()
    time.sleep(1.2)  # longer than level 1 (1 s): the delay starts at the commit, not the send
    assert visible(ep) == []
    end_batch(options(ep), "s9", 0, [commit])
    assert visible(ep) == [b"now"]
    eventually(lambda: visible(ep) == [b"later", b"now"], what="the delayed row", interval=0.1)
