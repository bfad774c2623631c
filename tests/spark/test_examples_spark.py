"""The Spark examples as a user runs them: ``python examples/X.py``, exit 0, and what they
print checked."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 300


def run_example(name: str) -> str:
    env = {**os.environ, "GRPC_ENABLE_FORK_SUPPORT": "false", "PYSPARK_PYTHON": sys.executable}
    try:
        done = subprocess.run(
            [sys.executable, str(ROOT / "examples" / name)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{name} ran longer than {TIMEOUT_S} s; output so far:\n{exc.stdout}")
    assert done.returncode == 0, (
        f"{name} exited {done.returncode}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
    )
    return done.stdout


def test_copy_topic_example_copies_every_paid_order_once():
    out = run_example("copy_topic.py")
    produced = re.search(r"produced 3000 orders to 'orders', (\d+) of them paid", out)
    assert produced, out
    first = re.search(r"the query read (\d+) orders and wrote the (\d+) paid ones", out)
    second = re.search(r"the query read (\d+) and wrote (\d+) more", out)
    assert first and second, out
    assert first.groups() == ("3000", produced[1]) and second.groups() == ("600", "200"), out
    first, second = int(first[2]), int(second[2])
    held = re.search(
        r"holds (\d+) orders for (\d+) paid: (\d+) distinct, (\d+) doubled, "
        r"order per customer kept: (\w+)",
        out,
    )
    assert held, out
    assert held.groups() == (str(first + second),) * 3 + ("0", "True"), out
