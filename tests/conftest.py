"""Shared fixtures. Store tests use real files in a temporary directory; integration tests
start real processes. Spark tests (later) share one session-scoped SparkSession."""

from __future__ import annotations

import os
import sys
import tempfile

import pytest

# The shared helpers (tests/support, imported as ``tests.support.<module>``) fail with their
# asserts' operands spelled out, as the tests' own asserts do.
pytest.register_assert_rewrite("tests.support")

# Spark workers must run the interpreter that has our dependencies.
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
# The Spark session (created lazily) forks the JVM from this process while gRPC threads of
# earlier tests may run; gRPC's fork handlers then can break the child, so turn them off
# (the child only execs java). Must be set before grpc is imported.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")


def _child_environment() -> None:
    """What every process the tests start inherits (set before any is started)."""
    from tests.support.scripts import SPARK_JVM_OPTIONS

    # Every Spark driver started by pyspark here or in a child process (the shared session,
    # the jobs and examples run as processes) gets the JVM options of a short-lived JVM.
    os.environ.setdefault(
        "PYSPARK_SUBMIT_ARGS", f'--driver-java-options "{SPARK_JVM_OPTIONS}" pyspark-shell'
    )
    # The tests start thousands of Python processes (brokers, the CLI, Spark's Python
    # workers, jobs) that import the package from source. Where PYTHONDONTWRITEBYTECODE is
    # set (as on the CI machines) each would compile every module it imports again (about
    # 0.2 s of CPU for a broker, 0.4 s for a CLI command): keep their bytecode in a cache
    # outside the tree instead (Python checks each file against its source's time and size).
    if os.environ.get("PYTHONDONTWRITEBYTECODE") and not os.environ.get("PYTHONPYCACHEPREFIX"):
        del os.environ["PYTHONDONTWRITEBYTECODE"]
        os.environ["PYTHONPYCACHEPREFIX"] = os.path.join(
            tempfile.gettempdir(), f"rocketlite-tests-pycache-{os.getuid()}"
        )


_child_environment()


def pytest_configure(config):
    """The run's first process (xdist's controller, or the only one) starts making the
    archive of Spark's classes when this machine has none yet (see
    tests/support/spark_classes.py): the Spark JVMs started once it is there start in half
    the time. It runs on by itself (a minute or two) if the tests end first."""
    if hasattr(config, "workerinput"):
        return
    from tests.support import spark_classes

    spark_classes.build_in_background()


@pytest.fixture
def store_factory(tmp_path):
    """Open MessageStores in tmp_path with small segments; closes them after the test."""
    from rmq_spark.store import MessageStore, StoreConfig

    opened = []

    def open_store(**overrides):
        settings = {
            "store_dir": tmp_path / "store",
            "commitlog_segment_bytes": 64 * 1024,
            "consumequeue_entries_per_file": 64,
            "index_hash_slots": 4096,
            "index_max_entries": 16384,
        }
        settings.update(overrides)
        store = MessageStore.open(StoreConfig(**settings))
        opened.append(store)
        return store

    yield open_store
    for store in opened:
        store.close()


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """Make ``--dist loadgroup`` (``./dev test``) keep each ``xdist_group`` on one worker.

    pytest-xdist 3.8 groups tests by a suffix (``@<group>``) it gives their node ids when a
    worker collects them, written to an attribute pytest 9.2 no longer reads node ids from:
    without this every group's tests spread over the workers like any others. Here the
    suffix goes where pytest 9.2 keeps the id (this runs after xdist's hook, which has no
    effect there).

    The tests of the shared SparkSession (the ``spark`` fixture) are in no group: each
    worker starts its own session when it first needs one. One worker running them all in
    order was the plan once, but never happened (see above); measured, it would make that
    worker the run's critical path (their time is about the time of all the other Spark
    tests together), for the two session starts it saves."""
    if not getattr(config.option, "loadgroup", False):
        return
    try:
        from _pytest.nodeid import NodeId
    except ImportError:  # another pytest: xdist's own suffix may work there
        return
    for item in items:
        names = {
            str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
            for mark in item.iter_markers("xdist_group")
        }
        if names and "@" not in item.nodeid:
            item._id = NodeId.parse(f"{item.nodeid}@{'_'.join(sorted(names))}")
