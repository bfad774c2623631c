"""The test-only sync fault: off unless set, fails the Nth commit-log sync once."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from rmq_spark.errors import InvalidArgumentError
from rmq_spark.store import faults


@pytest.fixture(autouse=True)
def disarmed():
    faults.disarm()
    yield
    faults.disarm()


def test_unset_or_empty_injects_nothing():
    for environ in ({}, {faults.FSYNC_FAIL_AFTER: ""}):
        faults.install_from_environment(environ)
        for _ in range(100):
            faults.before_commitlog_sync(Path("seg"))


def test_the_nth_sync_fails_with_eio_once():
    faults.install_from_environment({faults.FSYNC_FAIL_AFTER: "3"})
    faults.before_commitlog_sync(Path("seg"))
    faults.before_commitlog_sync(Path("seg"))
    with pytest.raises(OSError) as info:
        faults.before_commitlog_sync(Path("seg"))
    assert info.value.errno == errno.EIO and faults.FSYNC_FAIL_AFTER in str(info.value)
    for _ in range(10):
        faults.before_commitlog_sync(Path("seg"))


@pytest.mark.parametrize("value", ["0", "-1", "x", "1.5"])
def test_a_bad_value_is_refused(value):
    with pytest.raises(InvalidArgumentError, match=faults.FSYNC_FAIL_AFTER):
        faults.install_from_environment({faults.FSYNC_FAIL_AFTER: value})


def test_the_broker_command_refuses_a_bad_value_with_exit_code_2(tmp_path, monkeypatch, capsys):
    from rmq_spark.broker.__main__ import main

    monkeypatch.setenv(faults.FSYNC_FAIL_AFTER, "0")
    assert main(["--store", str(tmp_path / "store"), "--port", "0"]) == 2
    assert faults.FSYNC_FAIL_AFTER in capsys.readouterr().err
