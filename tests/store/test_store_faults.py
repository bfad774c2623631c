"""Writes that fail part-way (a full disk) leave the store exactly as before them."""

from __future__ import annotations

import errno

import pytest

from rmq_spark.codec import record as rec
from rmq_spark.errors import ResourceExhaustedError
from rmq_spark.store.mapped_file import MappedFile
from rmq_spark.store.verify import verify_store


class FailingWrites:
    """Make the n-th write_at (counted from ``arm()``) of files whose path contains ``part``
    raise ENOSPC after writing half of its bytes, as a filling disk does."""

    def __init__(self, monkeypatch, part: str) -> None:
        self.part = part
        self.countdown: int | None = None
        original = MappedFile.write_at

        def write_at(file, pos, *chunks):
            if self.part in str(file.path) and self.countdown is not None:
                self.countdown -= 1
                if self.countdown == 0:
                    self.countdown = None
                    data = b"".join(bytes(c) for c in chunks)
                    original(file, pos, data[: len(data) // 2])
                    raise OSError(errno.ENOSPC, "No space left on device")
            return original(file, pos, *chunks)

        monkeypatch.setattr(MappedFile, "write_at", write_at)

    def arm(self, nth: int) -> None:
        self.countdown = nth


def bodies(prefix: str, n: int) -> list[bytes]:
    return [f"{prefix}-{i}".encode() * 20 for i in range(n)]


@pytest.mark.parametrize(
    ("part", "nth"),
    [
        ("commitlog", 1),  # the records without the first header
        ("commitlog", 2),  # the first header: every other record is already written
        ("consumequeue", 1),  # the commit log is written, the queue entries are not
    ],
)
def test_a_failed_write_leaves_nothing_behind(store_factory, monkeypatch, part, nth):
    faults = FailingWrites(monkeypatch, part)
    store = store_factory()
    store.topics.create("t", queues=1)
    store.append("t", 0, bodies("before", 10))
    log_end = store.commitlog.max_offset
    faults.arm(nth)
    with pytest.raises(
        ResourceExhaustedError,
        match=r"disk holding .* has [0-9,]+ bytes free; the store needs .* the disk is full",
    ):
        store.append("t", 0, bodies("failed", 10))
    assert store.max_offset("t", 0) == 10 and store.commitlog.max_offset == log_end
    store.health.set_disk_full(False)  # space was freed (housekeeping would notice it)
    again = store.append("t", 0, bodies("after", 3))
    assert again.first_queue_offset == 10  # the failed batch's offsets are reused
    assert verify_store(store).ok
    store.close()
    reopened = store_factory()  # recovery finds exactly what was acknowledged
    got = reopened.get_messages("t", 0, 0, max_count=100)
    texts = [r.body[:9] for r in rec.iter_records(got.data)]
    assert len(texts) == 13 and not any(t.startswith(b"failed") for t in texts)
    assert verify_store(reopened).ok


def test_after_a_full_disk_writes_are_refused_at_once_until_space_is_back(
    store_factory, monkeypatch
):
    faults = FailingWrites(monkeypatch, "commitlog")
    store = store_factory()
    store.topics.create("t", queues=1)
    faults.arm(1)
    with pytest.raises(ResourceExhaustedError):
        store.append("t", 0, bodies("a", 2))
    with pytest.raises(
        ResourceExhaustedError,
        match=r"needs 66,816 bytes free .*writes are refused until that much space is freed",
    ):
        store.append("t", 0, bodies("b", 2))
    assert store.get_messages("t", 0, 0).count == 0  # reads go on


def test_a_failed_sync_stops_the_store_and_restart_recovers(store_factory, monkeypatch):
    from rmq_spark.errors import StoreFailedError
    from rmq_spark.store import mapped_file

    store = store_factory(flush_mode="SYNC")
    store.topics.create("t", queues=1)
    store.append("t", 0, bodies("durable", 5))
    real_fdatasync = mapped_file.os.fdatasync

    def failing_fdatasync(fd):
        raise OSError(errno.EIO, "Input/output error")

    failures = []
    store.add_failure_listener(failures.append)  # before: the flush thread may fail first
    monkeypatch.setattr(mapped_file.os, "fdatasync", failing_fdatasync)
    with pytest.raises(StoreFailedError, match=r"not stored durably|stopped after a failed"):
        store.append("t", 0, bodies("lost", 3))
    assert len(failures) == 1 and store.failure is not None
    # Fail-stop: nothing is served any more, not even what was durable, and a later
    # successful sync changes nothing.
    monkeypatch.setattr(mapped_file.os, "fdatasync", real_fdatasync)
    with pytest.raises(StoreFailedError):
        store.get_messages("t", 0, 0)
    with pytest.raises(StoreFailedError):
        store.append("t", 0, bodies("later", 1))
    store.close()
    reopened = store_factory(flush_mode="SYNC")  # crash recovery: the abort marker stayed
    assert reopened.recovery is not None and reopened.recovery.abnormal
    got = reopened.get_messages("t", 0, 0, max_count=100)
    assert got.count >= 5  # the durable ones; the page cache may still hold the others
    assert verify_store(reopened).ok
