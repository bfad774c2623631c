"""Shared fixtures. Store tests use real files in a temporary directory; integration tests
start real processes. Spark tests (later) share one session-scoped SparkSession."""

from __future__ import annotations

import os
import sys

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


def pytest_collection_modifyitems(config, items):
    """With pytest-xdist (``./dev test`` runs two workers with ``--dist loadgroup``), every
    test of the shared SparkSession (the ``spark`` fixture) goes to one worker, one after
    another: two of them at once would fight over the 2 cores. The other worker runs the
    rest, which mostly waits on brokers and disks, including the Spark tests that run Spark
    in processes of their own (a standalone cluster, Spark Connect, jobs killed on purpose):
    they would otherwise make that one worker the whole run's critical path."""
    for item in items:
        if item.path.parent.name == "spark" and "spark" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group("spark"))
