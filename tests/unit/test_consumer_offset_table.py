"""The broker's consumer-offset table: commits, queries, persistence and recovery."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rmq_spark.durable_json import backup_path
from rmq_spark.errors import InvalidArgumentError, InvalidNameError, StoreError
from rmq_spark.offsets import broker_table
from rmq_spark.offsets.broker_table import ConsumerOffsetTable
from rmq_spark.offsets.json_codec import decode_offset_table
from tests.support.eventually import eventually

# Long enough that the background thread never writes during a test unless asked to.
QUIET_MS = 600_000


@pytest.fixture
def table(tmp_path: Path) -> Iterator[ConsumerOffsetTable]:
    offsets = ConsumerOffsetTable.open(tmp_path, persist_interval_ms=QUIET_MS)
    yield offsets
    offsets.close()


def _file_table(path: Path) -> dict | None:
    try:
        return decode_offset_table(path.read_text())
    except (OSError, ValueError):
        return None


def test_commit_returns_what_is_stored_and_query_reads_it(table: ConsumerOffsetTable) -> None:
    assert table.commit("GroupA", "TopicA", {0: 10, 1: 20}) == {0: 10, 1: 20}
    assert table.query("GroupA", "TopicA") == {0: 10, 1: 20}
    assert table.query("GroupA", "TopicA", [1]) == {1: 20}
    assert table.query_one("GroupA", "TopicA", 0) == 10


def test_unknown_queue_is_absent_which_differs_from_zero(table: ConsumerOffsetTable) -> None:
    table.commit("GroupA", "TopicA", {0: 0})
    assert table.query_one("GroupA", "TopicA", 0) == 0
    assert table.query_one("GroupA", "TopicA", 1) is None
    assert table.query("GroupA", "TopicA", [0, 1, 2]) == {0: 0}
    assert table.query("OtherGroup", "TopicA") == {}
    assert table.query_one("GroupA", "OtherTopic", 0) is None


def test_commit_can_move_backwards_unless_increase_only(table: ConsumerOffsetTable) -> None:
    table.commit("G", "T", {0: 100, 1: 100})
    # A reset (e.g. an admin rewinding the group) may lower the offset...
    assert table.commit("G", "T", {0: 50}) == {0: 50}
    # ...but a late, stale commit from a consumer must not.
    assert table.commit("G", "T", {0: 40, 1: 120}, increase_only=True) == {0: 50, 1: 120}
    assert table.commit("G", "T", {2: 7}, increase_only=True) == {2: 7}
    assert table.query("G", "T") == {0: 50, 1: 120, 2: 7}


def test_retry_and_dlq_topics_have_offsets(table: ConsumerOffsetTable) -> None:
    table.commit("GroupA", "%RETRY%GroupA", {0: 3})
    table.commit("GroupA", "%DLQ%GroupA", {0: 1})
    assert table.topics_of_group("GroupA") == ["%DLQ%GroupA", "%RETRY%GroupA"]


def test_round_trip_through_close_and_open(tmp_path: Path) -> None:
    with ConsumerOffsetTable.open(tmp_path, persist_interval_ms=QUIET_MS) as offsets:
        offsets.commit("GroupA", "TopicA", {0: 88526, 1: 88528})
        offsets.commit("GroupB", "%RETRY%GroupB", {0: 4})

    with ConsumerOffsetTable.open(tmp_path) as reopened:
        assert reopened.snapshot() == {
            ("TopicA", "GroupA"): {0: 88526, 1: 88528},
            ("%RETRY%GroupB", "GroupB"): {0: 4},
        }
    # The file is RocketMQ's consumerOffset.json shape, readable by other tools.
    document = json.loads((tmp_path / "consumerOffset.json").read_text())
    assert document == {
        "offsetTable": {
            "%RETRY%GroupB@GroupB": {"0": 4},
            "TopicA@GroupA": {"0": 88526, "1": 88528},
        }
    }


def test_open_creates_the_config_directory(tmp_path: Path) -> None:
    config_dir = tmp_path / "store" / "config"
    with ConsumerOffsetTable.open(config_dir) as offsets:
        offsets.commit("G", "T", {0: 1})
    assert (config_dir / "consumerOffset.json").exists()


def test_changes_are_persisted_periodically_without_close(tmp_path: Path) -> None:
    offsets = ConsumerOffsetTable.open(tmp_path, persist_interval_ms=50)
    try:
        path = offsets.path
        offsets.commit("G", "T", {0: 5})
        eventually(lambda: _file_table(path) == {("T", "G"): {0: 5}}, what="offset 5 on disk")
        offsets.commit("G", "T", {0: 6})
        eventually(lambda: _file_table(path) == {("T", "G"): {0: 6}}, what="offset 6 on disk")
    finally:
        offsets.close()


def test_an_unchanged_table_is_not_rewritten(tmp_path: Path) -> None:
    offsets = ConsumerOffsetTable.open(tmp_path, persist_interval_ms=20)
    try:
        offsets.commit("G", "T", {0: 5})
        assert offsets.persist() is True
        written = offsets.path.stat().st_mtime_ns
        time.sleep(0.2)  # ten intervals
        offsets.commit("G", "T", {0: 5})  # same value: not a change
        assert offsets.persist() is False
        assert offsets.path.stat().st_mtime_ns == written
    finally:
        offsets.close()


def test_a_failed_background_persist_is_logged_and_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    real_write = broker_table.write_json_atomic
    failures = []

    def flaky_write(*args: object, **kwargs: object) -> None:
        if not failures:
            failures.append(1)
            raise OSError(28, "No space left on device")
        real_write(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(broker_table, "write_json_atomic", flaky_write)
    offsets = ConsumerOffsetTable.open(tmp_path, persist_interval_ms=20)
    try:
        with caplog.at_level(logging.ERROR, logger="rmq_spark.store"):
            offsets.commit("G", "T", {0: 9})
            eventually(
                lambda: _file_table(offsets.path) == {("T", "G"): {0: 9}},
                what="the retried persist",
            )
        assert "No space left on device" in caplog.text
    finally:
        offsets.close()


def _write_two_versions(config_dir: Path) -> Path:
    """Leave {0: 2} in consumerOffset.json and the older {0: 1} in its .bak."""
    for offset in (1, 2):
        with ConsumerOffsetTable.open(config_dir) as offsets:
            offsets.commit("G", "T", {0: offset})
    return config_dir / "consumerOffset.json"


@pytest.mark.parametrize(
    "damage",
    [
        b'{"offsetTable": {"T@G": {"0"',  # truncated
        b"\x00" * 64,  # garbage
        b'{"offsetTable": {"T@G": {"0": -3}}}',  # valid JSON, impossible offset
        b'{"something": "else"}',  # valid JSON, wrong shape
    ],
)
def test_damaged_main_file_falls_back_to_backup_and_is_repaired(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: bytes
) -> None:
    path = _write_two_versions(tmp_path)
    path.write_bytes(damage)

    with caplog.at_level(logging.WARNING, logger="rmq_spark.store"):
        offsets = ConsumerOffsetTable.open(tmp_path, persist_interval_ms=QUIET_MS)
    with offsets:
        # The backup is one persist older: consumers re-read a little, nothing is skipped.
        assert offsets.query("G", "T") == {0: 1}
    assert str(path) in caplog.text and "backup" in caplog.text
    assert _file_table(path) == {("T", "G"): {0: 1}}  # main rewritten at close


def test_both_files_unreadable_refuses_to_start_naming_both(tmp_path: Path) -> None:
    path = _write_two_versions(tmp_path)
    path.write_text("{")
    backup_path(path).write_text("")

    with pytest.raises(StoreError) as info:
        ConsumerOffsetTable.open(tmp_path)

    assert str(path) in str(info.value)
    assert str(backup_path(path)) in str(info.value)
    assert "force_empty" in str(info.value)


def test_force_empty_starts_empty_and_keeps_the_broken_files_aside(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = _write_two_versions(tmp_path)
    path.write_text('{"offsetTable": {"T@G": {"0": 2')
    backup_path(path).write_text("garbage")

    with caplog.at_level(logging.ERROR, logger="rmq_spark.store"):
        offsets = ConsumerOffsetTable.open(tmp_path, force_empty=True)
    with offsets:
        assert offsets.snapshot() == {}
        offsets.commit("G", "T", {0: 7})

    assert "force_empty" in caplog.text
    kept = sorted(p.read_text() for p in tmp_path.glob("consumerOffset.json*.corrupt-*"))
    assert kept == ["garbage", '{"offsetTable": {"T@G": {"0": 2']
    with ConsumerOffsetTable.open(tmp_path) as reopened:  # no flag needed any more
        assert reopened.query("G", "T") == {0: 7}


def test_force_empty_does_not_wipe_a_readable_table(tmp_path: Path) -> None:
    _write_two_versions(tmp_path)
    with ConsumerOffsetTable.open(tmp_path, force_empty=True) as offsets:
        assert offsets.query("G", "T") == {0: 2}


def test_concurrent_commits_from_threads_are_all_kept(tmp_path: Path) -> None:
    offsets = ConsumerOffsetTable.open(tmp_path, persist_interval_ms=5)
    start = threading.Barrier(8)

    def consumer(queue_id: int) -> None:
        start.wait()
        for offset in range(500):
            offsets.commit("G", "T", {queue_id: offset}, increase_only=True)
            # Every queue also races on a shared one; increase-only keeps the maximum.
            offsets.commit("G", "T", {99: offset * 8 + queue_id}, increase_only=True)

    threads = [threading.Thread(target=consumer, args=(q,)) for q in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    offsets.close()

    expected = {q: 499 for q in range(8)} | {99: 499 * 8 + 7}
    assert offsets.query("G", "T") == expected
    with ConsumerOffsetTable.open(tmp_path) as reopened:
        assert reopened.query("G", "T") == expected


def test_groups_and_topics_are_listed_and_removed(tmp_path: Path) -> None:
    with ConsumerOffsetTable.open(tmp_path) as offsets:
        offsets.commit("G1", "T1", {0: 1})
        offsets.commit("G1", "T2", {0: 1})
        offsets.commit("G2", "T1", {0: 1})
        assert offsets.groups_of_topic("T1") == ["G1", "G2"]
        assert offsets.topics_of_group("G1") == ["T1", "T2"]

        assert offsets.remove_group("G1", "T2") == 1
        assert offsets.topics_of_group("G1") == ["T1"]
        assert offsets.remove_topic("T1") == 2
        assert offsets.groups_of_topic("T1") == []
        assert offsets.remove_topic("T1") == 0

    with ConsumerOffsetTable.open(tmp_path) as reopened:
        assert reopened.snapshot() == {}


def test_remove_group_everywhere(table: ConsumerOffsetTable) -> None:
    table.commit("G1", "T1", {0: 1})
    table.commit("G1", "%RETRY%G1", {0: 1})
    table.commit("G2", "T1", {0: 1})
    assert table.remove_group("G1") == 2
    assert table.snapshot() == {("T1", "G2"): {0: 1}}


def test_snapshot_is_a_copy(table: ConsumerOffsetTable) -> None:
    table.commit("G", "T", {0: 1})
    table.snapshot()[("T", "G")][0] = 999
    assert table.query_one("G", "T", 0) == 1


@pytest.mark.parametrize(
    ("group", "topic", "offsets", "error", "named"),
    [
        ("bad group", "T", {0: 1}, InvalidNameError, "'bad group'"),
        ("G@x", "T", {0: 1}, InvalidNameError, "'G@x'"),
        ("G", "T/x", {0: 1}, InvalidNameError, "'T/x'"),
        ("G", "", {0: 1}, InvalidNameError, "''"),
        ("G", "T", {-1: 1}, InvalidArgumentError, "queue id -1"),
        ("G", "T", {"0": 1}, InvalidArgumentError, "queue id '0'"),
        ("G", "T", {0: -1}, InvalidArgumentError, "offset -1"),
        ("G", "T", {0: 1.0}, InvalidArgumentError, "offset 1.0"),
        ("G", "T", {0: True}, InvalidArgumentError, "offset True"),
        ("G", "T", [(0, 1)], InvalidArgumentError, "mapping"),
    ],
)
def test_invalid_commits_name_the_bad_value(
    table: ConsumerOffsetTable,
    group: str,
    topic: str,
    offsets: dict,
    error: type[Exception],
    named: str,
) -> None:
    with pytest.raises(error) as info:
        table.commit(group, topic, offsets)
    assert named in str(info.value)


def test_a_commit_with_one_bad_value_stores_nothing(table: ConsumerOffsetTable) -> None:
    with pytest.raises(InvalidArgumentError, match="offset -5 for queue 2 of T@G"):
        table.commit("G", "T", {0: 10, 1: 11, 2: -5})
    assert table.query("G", "T") == {}


def test_query_with_a_bad_queue_id_names_it(table: ConsumerOffsetTable) -> None:
    with pytest.raises(InvalidArgumentError, match="queue id -2"):
        table.query("G", "T", [0, -2])


@pytest.mark.parametrize("interval", [0, -5, 1.5, True])
def test_bad_persist_interval_is_refused(tmp_path: Path, interval: object) -> None:
    with pytest.raises(InvalidArgumentError, match="persist_interval_ms"):
        ConsumerOffsetTable.open(tmp_path, persist_interval_ms=interval)  # type: ignore[arg-type]


def test_a_closed_table_refuses_changes_but_close_is_idempotent(tmp_path: Path) -> None:
    offsets = ConsumerOffsetTable.open(tmp_path)
    offsets.commit("G", "T", {0: 1})
    offsets.close()
    offsets.close()
    with pytest.raises(StoreError, match="closed"):
        offsets.commit("G", "T", {0: 2})
    assert offsets.query_one("G", "T", 0) == 1
