"""Fixtures for the Spark source tests: one SparkSession for the whole run, real brokers.

* ``spark``: the session (``local[2]``, UI off, 2 shuffle partitions), started once per
  process (each pytest-xdist worker that runs such a test starts its own, ~7 s).
* ``broker``: one broker subprocess shared by every test (each test uses its own topics).
* ``broker_factory``: brokers of the test's own (for restarts, two brokers, small segments).
* ``topic``: a fresh topic name.

Helpers (producing, running streams, reading sinks) are in ``tests/support/spark_helpers.py``;
broker processes come from ``tests/support/broker_harness.py``.
"""

from __future__ import annotations

import itertools
import os
import re
import sys

import pytest

from tests.support.broker_harness import TEST_STORE_FLAGS, BrokerProcess, start_broker
from tests.support.scripts import REPO

_names = itertools.count()


@pytest.fixture(scope="session")
def spark():
    from pyspark.sql import SparkSession

    # Spark's Python workers must run this interpreter (it has pyarrow and the package).
    os.environ["PYSPARK_PYTHON"] = sys.executable
    # pyspark finds ``pyspark_rocketlite`` by listing the modules on its workers' path. A
    # setuptools editable install serves modules through an import hook that listing cannot
    # see, so put the repository on the path, where an installed wheel puts the module.
    # The JVM and its workers inherit the environment it is launched with.
    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), saved) if p)
    session = (
        SparkSession.builder.master("local[2]")
        .appName("rmq-spark-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.streaming.stopTimeout", "10s")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
    if saved is None:
        os.environ.pop("PYTHONPATH", None)
    else:
        os.environ["PYTHONPATH"] = saved


@pytest.fixture(scope="session")
def broker(tmp_path_factory):
    process = start_broker(tmp_path_factory.mktemp("brokers"), "broker-a")
    yield process
    process.clean_up()


@pytest.fixture
def broker_factory(tmp_path):
    """``broker_factory(name, *flags, store_flags=...) -> BrokerProcess`` (started)."""
    started: list[BrokerProcess] = []

    def start(name: str = "broker-b", *flags: str, store_flags=TEST_STORE_FLAGS):
        process = start_broker(tmp_path, name, *flags, store_flags=store_flags)
        started.append(process)
        return process

    yield start
    for process in started:
        process.clean_up()


@pytest.fixture
def topic(request) -> str:
    """A topic name no other test uses."""
    stem = re.sub(r"[^a-zA-Z0-9_-]", "_", request.node.name)[:80]
    return f"{stem}-{next(_names)}"


@pytest.fixture(scope="module")
def apache(tmp_path_factory):
    """An Apache RocketMQ 4.9 name server and broker (``.name_server``); skips the test
    without a build in ``ROCKETMQ_HOME``."""
    from tests.support import rocketmq_harness

    if not rocketmq_harness.available():
        pytest.skip("needs Apache RocketMQ 4.9: set ROCKETMQ_HOME to a build with lib/")
    cluster = rocketmq_harness.RocketMQCluster(tmp_path_factory.mktemp("apache")).start()
    yield cluster
    cluster.stop()
