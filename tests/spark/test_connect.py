"""Spark Connect: a Connect server (pyspark's own, ``spark-submit`` of SparkConnectServer)
whose Python environment has the package serves ``format("rocketlite")`` to a thin
client, for batch reads, streams and the sink's writes; the client needs pyspark's Connect
client only."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pyspark
import pytest

from tests.support import scripts
from tests.support.broker_harness import free_port
from tests.support.eventually import eventually
from tests.support.sink_helpers import bodies
from tests.support.spark_helpers import create_topic, produce, unless_exited

SPARK_SUBMIT = Path(pyspark.__file__).parent / "bin" / "spark-submit"
CONNECT_JAR = next((Path(pyspark.__file__).parent / "jars").glob("spark-connect_*.jar"))
#: run by its path, without PYTHONPATH: a client that does not have the package
CLIENT = scripts.path("connect_client")


@pytest.mark.slow
def test_connect_client_reads_through_the_server(broker, topic, tmp_path):
    create_topic(broker.endpoint, topic, queues=2)
    create_topic(broker.endpoint, f"{topic}-copy", queues=2)
    sent = produce(broker.endpoint, topic, 100)
    port = free_port()
    # The server's Python workers run this interpreter, which has the package.
    env = {
        **os.environ,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
        "PYTHONPATH": str(scripts.REPO),
    }
    log = tmp_path / "connect-server.log"
    with open(log, "wb") as out:
        server = subprocess.Popen(
            [
                str(SPARK_SUBMIT),
                "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
                "--master", "local[2]",
                "--conf", f"spark.connect.grpc.binding.port={port}",
                "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
                "--conf", "spark.ui.enabled=false",
                "--driver-java-options", scripts.SPARK_JVM_OPTIONS,
                str(CONNECT_JAR),
            ],
            stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True,
        )  # fmt: skip
    try:
        eventually(
            unless_exited(
                server,
                log,
                lambda: "Spark Connect server started" in log.read_text("utf-8", "replace"),
            ),
            what="the Spark Connect server to start",
            timeout=120,
            interval=0.3,
        )
        client_env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        done = subprocess.run(
            [sys.executable, str(CLIENT), f"sc://127.0.0.1:{port}", broker.endpoint, topic,
             str(tmp_path)],
            capture_output=True, text=True, timeout=300, env=client_env, cwd=tmp_path,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-4000:]
        report = json.loads(done.stdout.strip().splitlines()[-1])
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
    assert report == {
        "batch_rows": 200,
        "stream_rows": 200,
        "stream_distinct": 200,
        "client_imported_rmq_spark": False,
    }
    # the sink ran on the server too: the copy holds the topic's bodies, once each
    assert bodies(broker.endpoint, f"{topic}-copy") == sorted(sent.values())
