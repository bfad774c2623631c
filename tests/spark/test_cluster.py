"""A real Spark standalone cluster on loopback: a master and two workers, each its own JVM
started with pyspark's ``bin/spark-class``, and a driver process reading rocketlite with
both a batch read and a Trigger.AvailableNow stream into parquet, exactly once."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pyspark
import pytest

from tests.support import scripts
from tests.support.broker_harness import free_port
from tests.support.eventually import eventually
from tests.support.spark_helpers import create_topic, produce, unless_exited

SPARK_CLASS = Path(pyspark.__file__).parent / "bin" / "spark-class"


class Daemon:
    """A Spark master or worker JVM in its own process group, logging to a file."""

    def __init__(self, log: Path, *args: str) -> None:
        self.log = log
        env = {
            **os.environ,
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_NO_DAEMONIZE": "1",
            "SPARK_DAEMON_JAVA_OPTS": scripts.SPARK_JVM_OPTIONS,
        }
        with open(log, "wb") as out:
            self.process = subprocess.Popen(
                [str(SPARK_CLASS), *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )

    def wait_for(self, pattern: str, timeout_s: float = 90) -> None:
        """Until ``pattern`` is in its log; fails at once if the JVM exits."""
        eventually(
            unless_exited(
                self.process,
                self.log,
                lambda: re.search(pattern, self.log.read_text("utf-8", "replace")),
            ),
            what=f"{pattern!r} in {self.log}",
            timeout=timeout_s,
            interval=0.3,
        )

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


@pytest.mark.slow
def test_standalone_cluster_reads_batch_and_available_now_exactly_once(broker, topic, tmp_path):
    create_topic(broker.endpoint, topic, queues=4)
    sent = produce(broker.endpoint, topic, 500)
    port = free_port()
    master_url = f"spark://127.0.0.1:{port}"
    daemons = [
        Daemon(
            tmp_path / "master.log",
            "org.apache.spark.deploy.master.Master",
            "--host", "127.0.0.1", "--port", str(port), "--webui-port", str(free_port()),
        )
    ]  # fmt: skip
    try:
        daemons[0].wait_for(r"I have been elected leader|Starting Spark master")
        for i in range(2):
            worker = Daemon(
                tmp_path / f"worker{i}.log",
                "org.apache.spark.deploy.worker.Worker", master_url,
                "--host", "127.0.0.1", "--cores", "1", "--memory", "1g",
                "--webui-port", str(free_port()), "--work-dir", str(tmp_path / f"work{i}"),
            )  # fmt: skip
            daemons.append(worker)
        for worker in daemons[1:]:
            worker.wait_for(r"Successfully registered with master")
        # the job's executors get the repository on PYTHONPATH from the job's environment
        env = scripts.env(PYSPARK_PYTHON=sys.executable)
        done = subprocess.run(
            scripts.command("cluster_job", master_url, broker.endpoint, topic, str(tmp_path)),
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
        )
        assert done.returncode == 0, done.stderr[-4000:]
        report = json.loads(done.stdout.strip().splitlines()[-1])
    finally:
        for daemon in reversed(daemons):
            daemon.stop()
    assert report["executors"] == 2  # the work ran on the workers' executors
    assert sum(report["stream_batches"]) == 2000 and len(report["stream_batches"]) > 1
    for run in ("batch", "stream"):
        table = pq.read_table(
            tmp_path / run, columns=["brokerName", "queueId", "queueOffset", "body"]
        )
        rows = table.to_pylist()
        found = {(r["brokerName"], r["queueId"], r["queueOffset"]): r["body"] for r in rows}
        assert len(found) == len(rows), f"{run}: {len(rows) - len(found)} rows twice"
        assert found == sent, run
