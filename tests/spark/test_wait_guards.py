"""The guard the Spark tests wait on their jobs with: a wait ends at once when the job has
exited, and a wait that times out shows the job's log. No Spark here: plain processes."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from tests.support.eventually import eventually
from tests.support.spark_helpers import unless_exited


def _job(tmp_path, code: str):
    log = tmp_path / "job.log"
    with open(log, "wb") as out:
        process = subprocess.Popen([sys.executable, "-c", code], stdout=out, stderr=out)
    return process, log


def test_a_wait_on_an_exited_job_fails_at_once_with_its_log(tmp_path):
    process, log = _job(tmp_path, "print('starting'); print('boom'); raise SystemExit(3)")
    process.wait(30)
    started = time.monotonic()
    with pytest.raises(pytest.fail.Exception) as failed:
        eventually(unless_exited(process, log, lambda: False), what="a commit", timeout=30)
    assert time.monotonic() - started < 5
    assert str(failed.value) == "the process exited (3):\nstarting\nboom"


def test_a_timed_out_wait_on_a_running_job_shows_its_log(tmp_path):
    process, log = _job(
        tmp_path, "print('still planning', flush=True); import time; time.sleep(60)"
    )
    try:
        eventually(lambda: log.read_text(), what="the job's first line", timeout=30)
        with pytest.raises(AssertionError) as timed_out:
            eventually(unless_exited(process, log, lambda: 0), what="a commit", timeout=0.2)
    finally:
        process.kill()
        process.wait(30)
    assert str(timed_out.value) == (
        f"timed out after 0.2 s waiting for a commit; "
        f"last assertion: not yet; the tail of {log}:\nstill planning"
    )


def test_a_met_check_passes_its_value_even_after_the_job_exited(tmp_path):
    process, log = _job(tmp_path, "pass")
    process.wait(30)
    assert eventually(unless_exited(process, log, lambda: 7), what="seven") == 7
