"""``rocketlite store inspect DIR --json`` run as a user runs it (a process), on stores real
brokers wrote: a rocketlite broker process, while it runs and after it stopped, and Apache
RocketMQ 4.9 itself (needs ``ROCKETMQ_HOME``, see the README, "Testing against Apache
RocketMQ"). What it reports is what was sent and committed, and the directory is left
exactly as it was."""

from __future__ import annotations

import json
import subprocess
import sys
import time

from rmq_spark.client import Admin, Producer
from rmq_spark.client.remoting import RemotingClient
from rmq_spark.codec.arrow_decode import decode_records
from rmq_spark.store.offline import StoreView
from rmq_spark.structs import MessageQueue
from tests.support import rocketmq_harness
from tests.support.eventually import eventually
from tests.support.store_files import snapshot

INSPECT = [sys.executable, "-m", "rmq_spark.cli", "store", "inspect"]
TIMEOUT_S = 60


def inspect(store, *flags: str) -> subprocess.CompletedProcess:
    run = subprocess.run(
        [*INSPECT, str(store), *flags], capture_output=True, text=True, timeout=TIMEOUT_S
    )
    assert run.returncode == 0, f"exit {run.returncode}\n{run.stdout}\n{run.stderr}"
    assert "Traceback" not in run.stderr, run.stderr
    return run


def report_of(store) -> dict:
    return json.loads(inspect(store, "--json").stdout)


def ranges(report: dict, topic: str) -> dict[int, tuple[int, int, int]]:
    """{queue id: (min, max, messages)} of the queues of ``topic`` that hold messages."""
    (found,) = [t for t in report["topics"] if t["topic"] == topic]
    return {q["queueId"]: (q["min"], q["max"], q["messages"]) for q in found["queues"] if q["max"]}


def group_rows(report: dict, group: str) -> dict[tuple[str, int], tuple[int, int]]:
    (found,) = [g for g in report["consumerGroups"] if g["group"] == group]
    return {(r["topic"], r["queueId"]): (r["committed"], r["lag"]) for r in found["offsets"]}


def test_a_store_a_rocketlite_broker_wrote_live_and_stopped(broker_factory):
    broker = broker_factory("broker-a", "--delay-levels", "200ms 1s")
    counts = {0: 5, 1: 9, 2: 1}
    with Admin(broker.endpoint) as admin:
        admin.create_topic("Inspected", queues=3)
        admin.create_topic("Later", queues=1)
    with Producer(broker.endpoint) as producer:
        for queue_id, n in counts.items():
            producer.send_batch("Inspected", [f"m{queue_id}-{i}" for i in range(n)], queue=queue_id)
        producer.send("Later", "after 200 ms", queue=0, delay_level=1)
    with Admin(broker.endpoint) as admin:
        queues = {MessageQueue("Inspected", "broker-a", q): 2 for q in counts if q != 2}
        admin.commit_offsets("inspect-group", queues)
        later = MessageQueue("Later", "broker-a", 0)  # the delayed message, once delivered
        eventually(
            lambda: admin.query_offsets([later])[later].max_offset == 1,
            what="the delayed message to be delivered",
        )

    live = report_of(broker.store_dir)
    assert live["live"] and "rocketlite" in live["lockHolder"]
    assert ranges(live, "Inspected") == {q: (0, n, n) for q, n in counts.items()}
    assert "LIVE" in inspect(broker.store_dir).stdout

    assert broker.stop() == 0
    before = snapshot(broker.store_dir)
    report = report_of(broker.store_dir)
    text = inspect(broker.store_dir).stdout
    assert snapshot(broker.store_dir) == before, "inspect changed the store directory"

    assert not report["live"] and report["cleanShutdown"] and report["kind"] == "rocketlite"
    assert ranges(report, "Inspected") == {q: (0, n, n) for q, n in counts.items()}
    assert ranges(report, "Later") == {0: (0, 1, 1)}
    assert group_rows(report, "inspect-group") == {
        ("Inspected", 0): (2, counts[0] - 2),
        ("Inspected", 1): (2, counts[1] - 2),
    }
    assert {"level": 1, "offset": 1, "max": 1, "pending": 0} in report["delayLevels"]
    assert "inspect-group" in report["subscriptionGroups"]  # config/subscriptionGroup.json
    segments = report["commitlog"]["segments"]
    assert (
        segments[-1]["startOffset"] + segments[-1]["writtenBytes"]
        == (report["commitlog"]["maxOffset"])
    )
    assert report["checkpoints"]["rocketlite"]["safeOffset"] == report["commitlog"]["maxOffset"]
    assert "closed cleanly" in text and "inspect-group" in text


@rocketmq_harness.needs_rocketmq
def test_a_store_apache_rocketmq_wrote_live_and_stopped(tmp_path):
    # RocketMQ puts the commit log's time into its checkpoint after a periodic flush; by
    # default one flushes only 4 dirty pages or more (or every 10 s): flush every time here.
    cluster = rocketmq_harness.RocketMQCluster(
        tmp_path / "apache", settings=("flushCommitLogLeastPages=0",)
    ).start()
    store = tmp_path / "apache" / "store"
    sent: dict[int, list[bytes]] = {}
    topic, group = "ApacheInspected", "apache-inspect"
    try:
        with RemotingClient(cluster.name_server) as client:
            queues, first = rocketmq_harness.make_topic(client, topic)
            sent[0] = [b"first"] * first
            for i in range(120):
                mq = queues[i % len(queues)]
                body = f"apache-{i}".encode()
                client.send(mq, [body], [{"TAGS": "TagA"}])
                sent.setdefault(mq.queue_id, []).append(body)
            for mq in queues:
                client.commit_offset(group, mq, 3)
        expected = {q: (0, len(b), len(b)) for q, b in sent.items()}

        def every_entry_in_the_consume_queues() -> dict:
            live = report_of(store)
            assert ranges(live, topic) == expected
            return live

        # RocketMQ writes consume-queue entries a moment after the commit log
        live = eventually(
            every_entry_in_the_consume_queues, what="the consume queues", interval=0.2
        )
        assert live["live"] and "POSIX" in live["lockHolder"]
        # the periodic flush runs every flushIntervalCommitLog (500 ms), not at shutdown:
        # let one run after the last send
        time.sleep(2 * 0.5)
    finally:
        cluster.stop(keep_store=True)  # a clean shutdown writes consumerOffset.json

    before = snapshot(store)
    report = report_of(store)
    text = inspect(store).stdout
    assert snapshot(store) == before, "inspect changed the store directory"

    assert report["kind"] == "apache-rocketmq" and not report["live"]
    assert report["cleanShutdown"] and report["geometry"]["commitlogSegmentBytes"] == 16 << 20
    assert ranges(report, topic) == expected
    assert group_rows(report, group) == {(topic, q): (3, len(b) - 3) for q, b in sent.items()}
    checkpoint = report["checkpoints"]["rocketmq"]
    assert checkpoint["physicMsgTimestampIso"].startswith("20")
    assert report["checkpoints"]["rocketlite"] is None
    assert "apache-rocketmq" in text and "closed cleanly" in text

    # what the Spark source will do with such a directory: read every queue offline
    with StoreView.open(store) as view:
        for queue_id, bodies in sent.items():
            low, high = view.queue_range(topic, queue_id)
            got = view.read_records(topic, queue_id, low, high, max_bytes=1 << 20)
            batch = decode_records(got.buffer, sizes=got.sizes)
            assert batch.column("body").to_pylist() == bodies
            assert batch.column("queueOffset").to_pylist() == list(range(low, high))
    assert snapshot(store) == before
