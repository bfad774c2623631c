"""Test-only fault injection: a disk sync that fails. Off unless a broker process is started
with the variable set; never set it in production.

``ROCKETLITE_FAULT_FSYNC_FAIL_AFTER=N`` (N >= 1): the Nth fdatasync of the commit log, counted
from the broker's start, raises EIO instead of syncing, once, as a failing disk does. The store
then fail-stops exactly as after a real failed sync (one CRITICAL line; the broker exits
with 1). Only the broker command reads the variable (:func:`install_from_environment`, called
by ``python -m rmq_spark.broker`` and ``rocketlite broker``); a store opened any other way
never fails on purpose. The chaos test (``tests/spark/test_chaos.py``) uses it, because a
real disk cannot be made to fail a sync without privileges.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
from collections.abc import Mapping
from pathlib import Path

from rmq_spark.errors import InvalidArgumentError

log = logging.getLogger("rmq_spark.store")

FSYNC_FAIL_AFTER = "ROCKETLITE_FAULT_FSYNC_FAIL_AFTER"

_lock = threading.Lock()
#: commit-log syncs left before the one that fails; None: no fault armed
_syncs_left: int | None = None


def install_from_environment(environ: Mapping[str, str] = os.environ) -> None:
    """Arm the fault if ``ROCKETLITE_FAULT_FSYNC_FAIL_AFTER`` is set (and not empty)."""
    global _syncs_left
    value = environ.get(FSYNC_FAIL_AFTER, "").strip()
    if not value:
        return
    try:
        nth = int(value)
    except ValueError:
        nth = 0
    if nth < 1:
        raise InvalidArgumentError(f"{FSYNC_FAIL_AFTER}={value!r} must be a whole number >= 1")
    with _lock:
        _syncs_left = nth
    log.warning(
        "TEST-ONLY fault injection (%s): commit-log fdatasync #%d will fail with EIO",
        FSYNC_FAIL_AFTER,
        nth,
    )


def disarm() -> None:
    global _syncs_left
    with _lock:
        _syncs_left = None


def before_commitlog_sync(path: Path) -> None:
    """Called right before each fdatasync of a commit-log segment; raises the armed EIO."""
    global _syncs_left
    if _syncs_left is None:  # the usual case: no lock taken
        return
    with _lock:
        if _syncs_left is None:
            return
        _syncs_left -= 1
        if _syncs_left > 0:
            return
        _syncs_left = None
    raise OSError(errno.EIO, f"Input/output error (injected by {FSYNC_FAIL_AFTER})", str(path))
