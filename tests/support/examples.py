"""Running an example of ``examples/`` as a user does: ``python examples/<name>`` from the
repository's root, which must exit 0."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support.scripts import REPO as ROOT

TIMEOUT_S = 120


def run_example(name: str, timeout_s: float = TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    """``python examples/<name>``, which must exit 0 within ``timeout_s``."""
    env = {**os.environ, "GRPC_ENABLE_FORK_SUPPORT": "false", "PYSPARK_PYTHON": sys.executable}
    try:
        done = subprocess.run(
            [sys.executable, str(ROOT / "examples" / name)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{name} ran longer than {timeout_s} s; output so far:\n{exc.stdout}")
    assert done.returncode == 0, (
        f"{name} exited {done.returncode}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
    )
    return done
