"""The consumer-offset journal: its record codec, replay after a crash, and compaction."""

from __future__ import annotations

import zlib

import pytest

from rmq_spark.errors import ResourceExhaustedError
from rmq_spark.offsets.broker_table import (
    COMPACTING_NAME,
    FILE_NAME,
    JOURNAL_NAME,
    ConsumerOffsetTable,
)
from rmq_spark.offsets.journal import decode_records, encode_drop, encode_set, frame
from tests.support.small_fs import SmallFilesystem


def test_a_record_is_length_crc_and_compact_json():
    payload = encode_set("TopicA", "GroupA", {0: 42, 3: 7})
    assert payload == b'{"set":["TopicA","GroupA",{"0":42,"3":7}]}'
    record = frame(payload)
    assert record[:4] == len(payload).to_bytes(4, "big")
    assert record[4:8] == zlib.crc32(payload).to_bytes(4, "big")
    assert record[8:] == payload
    assert decode_records(record + frame(encode_drop("TopicA", "GroupA"))) == [
        (("set", "TopicA", "GroupA", {0: 42, 3: 7}), len(record)),
        (("drop", "TopicA", "GroupA"), len(record) + 8 + len(encode_drop("TopicA", "GroupA"))),
    ]


def test_a_torn_or_corrupt_tail_ends_the_journal():
    good = frame(encode_set("T", "G", {0: 1}))
    second = frame(encode_set("T", "G", {0: 2}))
    assert [c for c, _ in decode_records(good + second[:-3])] == [("set", "T", "G", {0: 1})]
    flipped = second[:-1] + bytes([second[-1] ^ 1])
    assert [c for c, _ in decode_records(good + flipped)] == [("set", "T", "G", {0: 1})]
    assert decode_records(b"\x00\x00") == []


def crash(table: ConsumerOffsetTable) -> None:
    """Leave the table as a killed broker would: no final persist, journal as written."""
    table._stop.set()  # the test owns the table; only its flusher must stop


def test_acknowledged_commits_survive_a_crash_before_any_persist(tmp_path):
    table = ConsumerOffsetTable.open(tmp_path, persist_interval_ms=3_600_000)
    table.commit("G", "T", {0: 10, 1: 5})
    table.commit("G", "T", {0: 12}, increase_only=True)
    table.commit("G", "T", {0: 3}, increase_only=True)  # ignored: not journaled either
    table.commit("G", "Gone", {0: 1})
    table.remove_topic("Gone")
    crash(table)
    assert not (tmp_path / FILE_NAME).exists()  # nothing was ever compacted
    reopened = ConsumerOffsetTable.open(tmp_path)
    assert reopened.query("G", "T") == {0: 12, 1: 5}
    assert reopened.query("G", "Gone") == {}
    reopened.close()


def test_compaction_writes_the_json_and_starts_a_new_journal(tmp_path):
    table = ConsumerOffsetTable.open(tmp_path, persist_interval_ms=3_600_000)
    table.commit("G", "T", {0: 10})
    assert (tmp_path / JOURNAL_NAME).stat().st_size > 0
    assert table.persist() is True
    assert (tmp_path / JOURNAL_NAME).stat().st_size == 0
    assert not (tmp_path / COMPACTING_NAME).exists()
    table.commit("G", "T", {0: 11})
    crash(table)
    reopened = ConsumerOffsetTable.open(tmp_path)
    assert reopened.query("G", "T") == {0: 11}  # JSON 10, then the new journal
    reopened.close()


def test_a_journal_left_by_a_crash_during_compaction_is_replayed(tmp_path):
    table = ConsumerOffsetTable.open(tmp_path, persist_interval_ms=3_600_000)
    table.commit("G", "T", {0: 10})
    table.persist()
    table.commit("G", "T", {0: 20})
    crash(table)
    # As if killed after moving the journal aside, before the JSON was replaced.
    (tmp_path / JOURNAL_NAME).rename(tmp_path / COMPACTING_NAME)
    reopened = ConsumerOffsetTable.open(tmp_path)
    assert reopened.query("G", "T") == {0: 20}
    reopened.close()  # compacts: the leftover goes
    assert not (tmp_path / COMPACTING_NAME).exists()
    again = ConsumerOffsetTable.open(tmp_path)
    assert again.query("G", "T") == {0: 20}
    again.close()


def test_a_torn_journal_tail_is_cut_and_appending_goes_on(tmp_path):
    table = ConsumerOffsetTable.open(tmp_path, persist_interval_ms=3_600_000)
    table.commit("G", "T", {0: 10})
    crash(table)
    with open(tmp_path / JOURNAL_NAME, "ab") as journal:
        journal.write(frame(encode_set("G", "T", {0: 99}))[:-2])  # torn by the crash
    reopened = ConsumerOffsetTable.open(tmp_path, persist_interval_ms=3_600_000)
    assert reopened.query("G", "T") == {0: 10}
    reopened.commit("G", "T", {0: 11})
    crash(reopened)
    last = ConsumerOffsetTable.open(tmp_path)
    assert last.query("G", "T") == {0: 11}
    last.close()


def test_sync_commits_journal_the_same_way(tmp_path):
    table = ConsumerOffsetTable.open(tmp_path, sync_commits=True)
    assert table.commit("G", "T", {0: 1}) == {0: 1}
    crash(table)
    reopened = ConsumerOffsetTable.open(tmp_path)
    assert reopened.query("G", "T") == {0: 1}
    reopened.close()


def test_a_commit_refused_by_a_full_disk_does_not_hide_the_commits_after_it(tmp_path):
    """A real full disk (a small tmpfs): the refused commit's record is written in part.
    The commits acknowledged once space is back must still be replayed after a crash,
    not lost behind the torn record."""
    disk = SmallFilesystem(tmp_path / "disk", 1 << 20)
    try:
        config = disk.path / "config"
        table = ConsumerOffsetTable.open(config, persist_interval_ms=3_600_000)
        table.commit("G", "T", {0: 560, 1: 560})
        disk.fill()
        # larger than what is left of the journal's last page: the write stops part-way
        too_big = {queue_id: 740 for queue_id in range(1000)}
        with pytest.raises(ResourceExhaustedError, match=r"cannot journal.*the commit was not"):
            table.commit("G", "T", too_big)
        assert table.query("G", "T") == {0: 560, 1: 560}
        disk.free()
        table.commit("G", "T", {0: 740, 1: 740})
        crash(table)
        reopened = ConsumerOffsetTable.open(config, persist_interval_ms=3_600_000)
        assert reopened.query("G", "T") == {0: 740, 1: 740}
        reopened.close()
    finally:
        disk.close()
