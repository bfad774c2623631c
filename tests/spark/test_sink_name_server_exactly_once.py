"""The ``rocketlite`` sink exactly once through ``nameServer``: a streaming copy whose driver
is SIGKILLed twice and restarted from its checkpoint, into a rocketlite broker's remoting
port (always) and into Apache RocketMQ 4.9 with a broker restart between the kills, judged
by Java's own consumer (when ``ROCKETMQ_HOME`` names a build)."""

from __future__ import annotations

import collections
import os
import re
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from rmq_spark.client.remoting import RemotingClient
from tests.spark.test_sink_stream import produce_keyed
from tests.support.eventually import eventually
from tests.support.sink_name_server_job import copy_query
from tests.support.spark_helpers import create_topic, drain, start_job, unless_exited

JOB = "sink_name_server_job"  # tests/support/sink_name_server_job.py
ROWS = 2400


def _commits(checkpoint: Path) -> int:
    return len(list((checkpoint / "commits").glob("[0-9]*")))


def _recorded_not_ended(checkpoint: Path) -> bool:
    """A batch is recorded in the checkpoint and not yet ended: its commit is under way
    (read cheaply: the test polls it often while Spark runs)."""
    for path in (checkpoint / "rocketlite-sink").glob("batch-*.json"):
        try:
            with open(path, "rb") as handle:
                head = handle.read(300)
        except OSError:
            continue
        if b'"ended": false' in head:
            return True
    return False


def _stop_responder(checkpoint: Path) -> None:
    pid_file = checkpoint / "rocketlite-sink" / "responder.pid"
    try:
        pid = int(pid_file.read_text())
    except (OSError, ValueError):
        return
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _copy_with_driver_kills(
    spark,
    endpoint: str,
    source: str,
    name_server: str,
    target: str,
    tmp_path: Path,
    between_runs: Callable[[int], None] = lambda run: None,
) -> list[str]:
    """Produce ROWS keyed rows into ``source``, run the copy job twice and SIGKILL its
    driver each time (once as soon as a batch is recorded and not yet ended: in the middle
    of its commit; once a while after a commit), then let a last run drain the rest in
    another driver, ``spark``'s. Returns the bodies sent."""
    sent = produce_keyed(endpoint, source, ROWS)
    checkpoint, log = tmp_path / "checkpoint", tmp_path / "job.log"
    args = [endpoint, source, name_server, target, str(checkpoint)]
    try:
        for run in range(2):
            job = start_job(JOB, args, log)
            try:
                done = _commits(checkpoint)
                if run == 0:
                    eventually(
                        unless_exited(
                            job,
                            log,
                            lambda: _recorded_not_ended(checkpoint),
                        ),
                        what="a batch recorded and not yet ended",
                        timeout=180,
                        interval=0.01,
                    )
                else:
                    eventually(
                        unless_exited(job, log, lambda d=done: _commits(checkpoint) > d + 1),
                        what="two more committed batches",
                        timeout=180,
                    )
                    time.sleep(0.3)
            finally:
                os.killpg(job.pid, signal.SIGKILL)
                job.wait(30)
            between_runs(run)
        drain(copy_query(spark, *args))
    finally:
        _stop_responder(checkpoint)
    assert _commits(checkpoint) >= ROWS // 400
    return sent


def _read_all(name_server: str, topic: str) -> list[tuple[int, str]]:
    """(queue id, body) of every message of ``topic``, in queue order."""
    found = []
    with RemotingClient(name_server) as client:
        for mq in client.route(topic).readable:
            offset = client.min_offset(mq)
            end = client.max_offset(mq)
            while offset < end:
                answer = client.pull(mq, offset, max_messages=256)
                batch = answer.records(["body"])
                found += [(mq.queue_id, b.decode()) for b in batch.column("body").to_pylist()]
                offset = answer.next_begin_offset
    return found


def _check_exactly_once(sent: list[str], copied: list[tuple[int, str]]) -> None:
    counts = collections.Counter(body for _, body in copied)
    assert sorted(counts) == sorted(b.upper() for b in sent), "lost or foreign rows"
    doubled = [b for b, n in counts.items() if n > 1]
    assert not doubled, f"{len(doubled)} rows twice, e.g. {doubled[:5]}"
    last: dict[tuple[int, str], int] = {}
    for queue, body in copied:  # per key, the target keeps the source's order
        key, n = body.split(":")
        assert int(n) > last.get((queue, key), -1), f"{body} out of order"
        last[(queue, key)] = int(n)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_exactly_once_into_the_remoting_port_through_driver_kills(
    spark, broker_factory, topic, tmp_path
):
    broker = broker_factory(
        "broker-nseo",
        "--remoting-port",
        "0",
        # checks early and often, so the sink's responder answers many while the test runs
        "--transaction-check-after-ms",
        "1000",
        "--transaction-check-interval-ms",
        "2000",
    )
    source, target = topic, topic + "-out"
    create_topic(broker.endpoint, source, queues=4)
    create_topic(broker.endpoint, target, queues=3)
    sent = _copy_with_driver_kills(
        spark, broker.endpoint, source, broker.remoting_address, target, tmp_path
    )
    _check_exactly_once(sent, _read_all(broker.remoting_address, target))


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_exactly_once_into_apache_rocketmq_through_driver_kills_and_a_broker_restart(
    spark, broker_factory, topic, tmp_path, tmp_path_factory
):
    from tests.support import rocketmq_harness
    from tests.support.java_probe import MISSING, compile_probe

    if not rocketmq_harness.available() or MISSING is not None:
        pytest.skip(MISSING or "needs Apache RocketMQ 4.9: set ROCKETMQ_HOME")
    apache = rocketmq_harness.RocketMQCluster(
        tmp_path_factory.mktemp("apache-eo"),
        # first check 2 s after a half message is stored, then every 3 s
        settings=("transactionTimeOut=2000", "transactionCheckInterval=3000"),
    ).start()
    try:
        broker = broker_factory("broker-src")
        source, target = topic, topic + "-out"
        create_topic(broker.endpoint, source, queues=4)
        with RemotingClient(apache.name_server) as client:
            rocketmq_harness.make_topic(client, target)

        def restart_broker(run: int) -> None:
            if run == 0:  # after the first kill: halves are pending on the broker
                apache.stop(keep_store=True)
                apache.start()

        sent = _copy_with_driver_kills(
            spark, broker.endpoint, source, apache.name_server, target, tmp_path, restart_broker
        )
        copied = [(q, b) for q, b in _read_all(apache.name_server, target) if b != "first"]
        _check_exactly_once(sent, copied)
        # Java's own consumer, in a group of its own, sees every row once
        java = compile_probe(tmp_path_factory.mktemp("java"))
        lines = java("lite", apache.name_server, target, "g-eo-judge", str(ROWS + 100), "40",
                     timeout_s=120)  # fmt: skip
        got = [
            m.group(1) for line in lines if (m := re.match(r"GOT \d+ \d+ \d+ \S+ \S+ (.*)$", line))
        ]
        counts = collections.Counter(b for b in got if b != "first")
        assert sorted(counts) == sorted(b.upper() for b in sent)
        assert max(counts.values()) == 1
    finally:
        apache.stop()
