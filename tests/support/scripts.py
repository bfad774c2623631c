"""Starting the programs of ``tests/support`` (members, writers, Spark jobs) as processes.

A child finds ``tests.support`` and ``rmq_spark`` through ``PYTHONPATH`` (never through
``sys.path`` edits): :func:`env` puts the repository first on it, and Spark's JVM and Python
workers that a job starts inherit it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from tests.support import spark_classes

#: the repository's root (where ``tests`` and ``rmq_spark`` are)
REPO = Path(__file__).resolve().parents[2]

#: JVM options of every Spark JVM the tests start (drivers, executors, a standalone
#: cluster's daemons, the Connect server): each runs for seconds to minutes, most of it
#: starting up, where C2's compiler threads and the parallel collector's threads compete
#: with everything else for the two cores. C1 alone and the serial collector start a driver
#: in about half the time and CPU; the archive of Spark's classes (once it is made, see
#: tests/support/spark_classes.py) halves a SparkSession's start again. What the JVMs do is
#: the same.
SPARK_JVM_OPTIONS = f"{spark_classes.FAST_START} {spark_classes.jvm_options()}".strip()


def env(**extra: str) -> dict[str, str]:
    """This process's environment, with the repository first on ``PYTHONPATH``, and
    ``extra`` variables."""
    path = [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path), **extra}


def command(module: str, *args: str) -> list[str]:
    """``python -m tests.support.<module> args...`` with this interpreter."""
    return [sys.executable, "-m", f"tests.support.{module}", *args]


def path(module: str) -> Path:
    """The file of ``tests.support.<module>``, for a program run by its path."""
    return Path(__file__).with_name(f"{module}.py")
