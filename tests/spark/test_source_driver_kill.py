"""Killing the Spark driver mid-stream loses nothing and duplicates nothing.

The job (``tests/support/driver_kill_job.py``) runs in its own process group, writing
micro-batches to a parquet sink while messages keep arriving. The test SIGKILLs the whole
group (driver JVM, Python, workers) while a batch is planned but not yet committed, restarts
the query from the checkpoint in another driver (this test's session), and checks that the
sink holds every message exactly once.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from tests.support.eventually import eventually
from tests.support.spark_helpers import (
    create_topic,
    produce,
    rows_of,
    run_available_now,
    start_job,
    stream,
    unless_exited,
)

JOB = "driver_kill_job"  # tests/support/driver_kill_job.py


def _batch_in_flight(checkpoint: Path, at_least: int) -> int | None:
    """The id of a batch planned (offset log written) but not committed, if >= at_least."""
    offsets = {int(p.name) for p in (checkpoint / "offsets").glob("[0-9]*")}
    commits = {int(p.name) for p in (checkpoint / "commits").glob("[0-9]*")}
    pending = sorted(offsets - commits)
    return pending[-1] if pending and pending[-1] >= at_least else None


@pytest.mark.slow
def test_driver_killed_mid_stream_restarts_exactly_once(spark, broker, topic, tmp_path):
    create_topic(broker.endpoint, topic, queues=4)
    sent = produce(broker.endpoint, topic, 20, prefix="before")
    flowing = threading.Event()
    stop = threading.Event()

    def keep_producing() -> None:
        round_no = 0
        while not stop.is_set():
            sent.update(produce(broker.endpoint, topic, 2, prefix=f"round{round_no}"))
            round_no += 1
            flowing.set()
            time.sleep(0.1)

    checkpoint, output, log = tmp_path / "checkpoint", tmp_path / "out", tmp_path / "job.log"
    args = [broker.endpoint, topic, str(checkpoint), str(output)]
    producer = threading.Thread(target=keep_producing, daemon=True)
    job = start_job(JOB, args, log)
    try:
        producer.start()
        in_flight = eventually(
            unless_exited(job, log, lambda: _batch_in_flight(checkpoint, at_least=2)),
            what="a batch in flight (planned, not committed)",
            timeout=120,
            interval=0.02,
        )
        os.killpg(job.pid, signal.SIGKILL)
        job.wait(30)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait(30)
    assert flowing.is_set() and producer.is_alive()  # messages were flowing at the kill
    assert not (checkpoint / "commits" / str(in_flight)).exists()  # killed mid-batch
    at_kill = len(sent)
    eventually(lambda: len(sent) >= at_kill + 16, what="a few more messages after the kill")
    stop.set()
    producer.join(30)

    # A new driver (this test's session) restarts from the checkpoint and drains the rest.
    rest = stream(spark, broker.endpoint, topic, startingOffsets="earliest", group="driver-kill")
    run_available_now(rest, checkpoint, output)
    assert rows_of(spark.read.parquet(str(output))) == sent
