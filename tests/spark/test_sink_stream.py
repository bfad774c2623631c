"""The ``rocketlite`` sink with ``df.writeStream``: a topic copied to another with a
transform, and exactly once through task failures and a driver killed again and again."""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from rmq_spark.client import Admin, Producer
from rmq_spark.errors import NotFoundError
from rmq_spark.structs import MessageQueue
from tests.support.eventually import eventually
from tests.support.sink_copy_job import copy_query
from tests.support.sink_helpers import read_all
from tests.support.spark_helpers import create_topic, drain, start_job, stream, unless_exited

JOB = "sink_copy_job"  # tests/support/sink_copy_job.py
HALF_TOPIC = "RMQ_SYS_SINK_HALF_TOPIC"


def produce_keyed(endpoints: str, topic: str, count: int, keys: int = 10):
    """``count`` messages ``k<key>:<n>`` with key ``k<key>`` as sharding key: one key's
    messages are in one queue, in n order. Returns the bodies."""
    from rmq_spark.client import Message

    by_key: dict[str, list[Message]] = {}
    sent = []
    for n in range(count):
        key = f"k{n % keys}"
        body = f"{key}:{n:06d}"
        by_key.setdefault(key, []).append(Message(body.encode(), keys=[key]))
        sent.append(body)
    with Producer(endpoints) as producer:
        for key, messages in by_key.items():
            producer.send_batch(topic, messages, sharding_key=key)
    return sent


def test_streaming_copy_with_a_transform(spark, broker, topic, tmp_path):
    target = topic + "-out"
    create_topic(broker.endpoint, topic, queues=3)
    create_topic(broker.endpoint, target, queues=2)
    sent = produce_keyed(broker.endpoint, topic, 300)
    copied = (
        stream(
            spark, broker.endpoint, topic, startingOffsets="earliest", maxMessagesPerTrigger="70"
        )
        .selectExpr(
            "upper(CAST(body AS STRING)) AS body",
            "keys AS shardingKey",
            "map('source', topic, 'offset', CAST(queueOffset AS STRING)) AS properties",
        )
        .writeStream.format("rocketlite")
        .option("endpoints", broker.endpoint)
        .option("topic", target)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    copied.awaitTermination(120)
    assert copied.exception() is None
    rows = [row for queue in read_all(broker.endpoint, target).values() for row in queue]
    assert sorted(row["body"].decode() for row in rows) == sorted(b.upper() for b in sent)
    assert {row["properties"]["source"] for row in rows} == {topic}
    progress = copied.lastProgress
    assert progress is not None


def test_checkpoint_from_session_conf_needs_a_sink_id(spark, broker, topic, tmp_path):
    # The sink sees the checkpointLocation option, not the session's default location.
    create_topic(broker.endpoint, topic)
    df = stream(spark, broker.endpoint, topic).selectExpr("CAST(body AS STRING) AS body")
    spark.conf.set("spark.sql.streaming.checkpointLocation", str(tmp_path))
    try:
        with pytest.raises(Exception, match="exactly-once writes need a stable sink id"):
            (
                df.writeStream.format("rocketlite")
                .option("endpoints", broker.endpoint)
                .option("topic", topic)
                .trigger(availableNow=True)
                .start()
                .awaitTermination(60)
            )
    finally:
        spark.conf.unset("spark.sql.streaming.checkpointLocation")


# -- exactly once ----------------------------------------------------------------------------


def _commits(checkpoint: Path) -> int:
    return len(list((checkpoint / "commits").glob("[0-9]*")))


def _wait_for_commit(job: subprocess.Popen, checkpoint: Path, log: Path) -> None:
    """Until the running job commits one more micro-batch."""
    done = _commits(checkpoint)
    eventually(
        unless_exited(job, log, lambda: _commits(checkpoint) > done),
        what=f"one more committed batch (after {done})",
        timeout=120,
    )


def _written(admin: Admin, target: str) -> tuple[int, int]:
    """(rows the broker ever staged for a sink, rows visible in ``target``)."""
    queues = admin.describe_topic(target).readable
    (name,) = {mq.broker_name for mq in queues}
    try:
        (half,) = admin.query_offsets([MessageQueue(HALF_TOPIC, name, 0)]).values()
    except NotFoundError:  # nothing staged yet
        staged = 0
    else:
        staged = half.max_offset
    visible = sum(q.max_offset for q in admin.query_offsets(queues).values())
    return staged, visible


def _wait_for_staged_epoch(job: subprocess.Popen, endpoint: str, target: str, log: Path) -> None:
    """Until a micro-batch is being written and is not committed yet: more rows staged and
    not visible than at the least of that seen in the wait. (Rows staged and never made
    visible, an aborted attempt's, stay staged for good; and the wait may begin while a batch
    is staged, whose commit then brings that least down.)"""
    # one connection for the whole wait: it asks 100 times a second, next to the job
    with Admin(endpoint) as admin:
        least: int | None = None

        def in_flight() -> bool:
            nonlocal least
            staged, visible = _written(admin, target)
            pending = staged - visible  # staged, not (yet) visible
            if least is not None and pending > least:
                return True
            least = pending if least is None else min(least, pending)
            return False

        eventually(
            unless_exited(job, log, in_flight),
            what="a micro-batch staged and not yet committed",
            timeout=120,
            interval=0.01,
        )


def _kill_python_workers(session: int) -> int:
    """SIGKILL the job's forked Python workers (children of its pyspark.daemon processes),
    as an executor losing them; returns how many."""
    daemons, killed = set(), 0
    procs = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if os.getsid(int(entry.name)) != session:
                continue
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ProcessLookupError, ValueError):
            continue
        procs.append((int(entry.name), parent, cmdline))
        if "pyspark.daemon" in cmdline:
            daemons.add(int(entry.name))
    for pid, parent, _ in procs:
        if parent in daemons:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except ProcessLookupError:
                pass
    return killed


class Watcher(threading.Thread):
    """A consumer of the target topic while the job runs: everything it saw, in order."""

    def __init__(self, endpoints: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.endpoints, self.topic = endpoints, topic
        self.seen: list[bytes] = []
        self.stop = threading.Event()

    def run(self) -> None:
        from rmq_spark.client import PullConsumer

        with Admin(self.endpoints) as admin:
            queues = admin.describe_topic(self.topic).readable
        with PullConsumer(self.endpoints) as puller:
            puller.assign(list(queues))
            for mq in queues:
                puller.seek(mq, 0)
            while not self.stop.is_set():
                for mq in queues:
                    result = puller.pull(mq, max_messages=256)
                    if result.message_count:
                        self.seen += result.batch.column("body").to_pylist()
                time.sleep(0.05)


@pytest.mark.slow
# two Spark drivers one after the other, each starting cold (a JVM, a dozen Python workers):
# on a loaded two-core machine each takes a minute or more before its first batch
@pytest.mark.timeout(600)
def test_exactly_once_through_task_failure_and_driver_kills(spark, broker_factory, topic, tmp_path):
    broker = broker_factory("broker-eo")  # its own: the staging queue counts only this test
    source, target = topic, topic + "-out"
    create_topic(broker.endpoint, source, queues=4)
    create_topic(broker.endpoint, target, queues=3)
    # 7 batches of 400 (the job's maxMessagesPerTrigger), so that a batch is still to come
    # at each kill however fast they go: in the first run up to 4 (two commits waited for,
    # one more that may be done before the wait for a staged one begins, and that one), in
    # the second the replay of the last, up to two done in the 0.7 s, and the staged one
    sent = produce_keyed(broker.endpoint, source, 2800)
    checkpoint, marker, log = (
        tmp_path / "checkpoint",
        tmp_path / "failed-once",
        tmp_path / "job.log",
    )
    args = [broker.endpoint, source, target, str(checkpoint), str(marker)]
    watcher = Watcher(broker.endpoint, target)
    watcher.start()
    kills = 0
    try:
        # Kill the driver twice while a batch is staged and not committed, at different
        # points; in the first run, kill the Python workers that run the sink's tasks (the
        # executor's side) once before, and let Spark retry them.
        for run, kill_after_s in enumerate((0.0, 0.7)):
            job = start_job(JOB, args, log)
            try:
                _wait_for_commit(job, checkpoint, log)
                if run == 0:
                    workers_killed = _kill_python_workers(job.pid)
                    _wait_for_commit(job, checkpoint, log)
                time.sleep(kill_after_s)
                _wait_for_staged_epoch(job, broker.endpoint, target, log)
            finally:
                os.killpg(job.pid, signal.SIGKILL)
                job.wait(30)
                kills += 1
        # A last run drains the rest and stops, in another driver: this test's session.
        drain(copy_query(spark, *args))
    finally:
        watcher.stop.set()
        watcher.join(30)

    assert kills == 2
    assert workers_killed, "no Python worker of the job was found to kill"
    assert marker.exists(), "the injected task failure did not happen"
    found = read_all(broker.endpoint, target)
    copied = [row["body"].decode() for queue in found.values() for row in queue]
    counts = collections.Counter(copied)
    assert sorted(counts) == sorted(b.upper() for b in sent), "lost or foreign rows"
    assert max(counts.values()) == 1, [b for b, n in counts.items() if n > 1][:5]
    # per key, the target keeps the source's order
    for queue in found.values():
        last: dict[str, int] = {}
        for row in queue:
            key, n = row["body"].decode().split(":")
            assert int(n) > last.get(key, -1)
            last[key] = int(n)
    # a consumer reading all along saw each row once and only committed rows
    seen = collections.Counter(b.decode() for b in watcher.seen)
    assert max(seen.values(), default=1) == 1
    assert set(seen) <= set(counts)
    # rows were staged that never became visible: the failed attempt's and the replays'
    with Admin(broker.endpoint) as admin:
        (half,) = admin.query_offsets([MessageQueue(HALF_TOPIC, "broker-eo", 0)]).values()
    assert half.max_offset > len(sent)
