"""The message index must be RocketMQ 4.9.7's byte for byte, or neither broker could query
the other's store by key.

The literal files below were written by RocketMQ 4.9.7's own ``IndexFile`` (its jar, run
from a small Java program on OpenJDK 17.0.15), as were the hashes: they are not computed
here.
"""

from __future__ import annotations

import os
from datetime import UTC
from pathlib import Path

import numpy as np
import pytest

from rmq_spark.errors import CorruptDataError, StoreError
from rmq_spark.store.index import (
    MessageIndex,
    doomed_after_crash,
    expired_count,
    file_name_for,
    index_keys,
)
from rmq_spark.store.index_file import (
    IndexFile,
    IndexHeader,
    chain_links,
    decode_header,
    encode_header,
    index_key_hash,
    index_key_hashes,
    time_diffs,
)

T0 = 1_700_000_000_000  # ms
ALL_TIME = (0, 2**63 - 1)

# RocketMQ's IndexFile(name, hashSlotNum=4, indexNum=6, 0, 0), then putKey("T#a", 100, T0),
# putKey("T#b", 200, T0 + 1500), putKey("T#a", 300, T0 + 3000), flush()
JAVA_FILE = bytes.fromhex(
    "0000018bcfe56800" "0000018bcfe573b8" "0000000000000064" "000000000000012c"
    "00000002" "00000004"  # header: times, offsets, 2 slots used, next entry 4
    "00000000" "00000000" "00000003" "00000002"  # slots: "T#a" -> 3, "T#b" -> 2
    + "00" * 20  # entry 0 is never used
    + "00013ff2" "0000000000000064" "00000000" "00000000"  # hash 81906, 100, +0 s, end
    + "00013ff3" "00000000000000c8" "00000001" "00000000"  # 81907, 200, +1 s (1.5 s)
    + "00013ff2" "000000000000012c" "00000003" "00000001"  # 81906, 300, +3 s, prev 1
    + "00" * 40
)  # fmt: skip
# IndexFile(.., 4, 6, endPhyOffset=50, endTimestamp=T0 - 10000): a file after a full one;
# putKey("T#a", 400, T0 + 3000), putKey("T#c", 500, T0 + 5999), flush(). Its first entry is
# measured from the inherited time (13 s), the second from its own begin (2 s).
JAVA_FILE_AFTER_ROLL = bytes.fromhex(
    "0000018bcfe573b8" "0000018bcfe57f6f" "0000000000000190" "00000000000001f4"
    "00000002" "00000003"
    "00000002" "00000000" "00000001" "00000000"
    + "00" * 20
    + "00013ff2" "0000000000000190" "0000000d" "00000000"
    + "00013ff4" "00000000000001f4" "00000002" "00000000"
    + "00" * 60
)  # fmt: skip


def _add(f: IndexFile, keys: list[str], phys: list[int], stamps: list[int]) -> int:
    return f.add_batch(index_key_hashes(keys), np.array(phys), np.array(stamps))


# -- hashes --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "indexed"),
    [("T#a", 81906), ("日本#😀", 891112065), ("polygenelubricants", 0), ("", 0)],
)
def test_index_key_hash_is_abs_of_java_hash_with_min_value_zero(key: str, indexed: int) -> None:
    assert index_key_hash(key) == indexed
    assert index_key_hashes([key]).tolist() == [indexed]


# -- codec ---------------------------------------------------------------------------------


def test_header_round_trip_and_empty_count() -> None:
    header = IndexHeader(T0, T0 + 3000, 100, 300, 2, 4)
    assert encode_header(header) == JAVA_FILE[:40]
    assert decode_header(JAVA_FILE) == header
    assert decode_header(bytes(40)).index_count == 1  # a new file RocketMQ has not flushed


@pytest.mark.parametrize(
    ("slots", "heads", "first", "prev", "touched", "newest"),
    [
        # no earlier entries: the first of each slot ends its chain
        ([0, 1, 2], [0, 0, 0], 1, [0, 0, 0], [0, 1, 2], [1, 2, 3]),
        # one slot repeated inside the batch: each links to the one before
        ([3, 3, 3], [0, 0, 0], 1, [0, 1, 2], [3], [3]),
        # across batches: the first links to what the slot held
        ([3, 5, 3], [2, 0, 2], 4, [2, 0, 4], [3, 5], [6, 5]),
        # a slot naming an entry not yet written is ignored (garbage), as RocketMQ does
        ([1, 2], [9, -1], 4, [0, 0], [1, 2], [4, 5]),
    ],
)
def test_chain_links(slots, heads, first, prev, touched, newest) -> None:
    got = chain_links(np.array(slots), np.array(heads), first)
    assert [a.tolist() for a in got] == [prev, touched, newest]


@pytest.mark.parametrize(
    ("stamps", "begin", "first_in_file", "diffs"),
    [
        ([T0, T0 + 1500, T0 + 3000], 0, True, [0, 1, 3]),  # first file: no begin time yet
        ([T0 + 3000, T0 + 5999], T0 - 10_000, True, [13, 2]),  # after a roll
        ([T0 - 5000, T0 + 999], T0, False, [0, 0]),  # earlier than begin: 0
        ([T0 + 2**31 * 1000 + 7000], T0, False, [2**31 - 1]),  # capped at Integer.MAX
    ],
)
def test_time_diffs(stamps, begin, first_in_file, diffs) -> None:
    assert time_diffs(np.array(stamps), begin, first_in_file).tolist() == diffs


# -- one file ------------------------------------------------------------------------------


def test_file_equals_the_one_rocketmq_wrote(tmp_path: Path) -> None:
    f = IndexFile.create(tmp_path / "a", 4, 6)
    assert _add(f, ["T#a", "T#b", "T#a"], [100, 200, 300], [T0, T0 + 1500, T0 + 3000]) == 3
    f.flush()
    g = IndexFile.create(tmp_path / "b", 4, 6, end_phy_offset=50, end_timestamp=T0 - 10_000)
    assert _add(g, ["T#a", "T#c"], [400, 500], [T0 + 3000, T0 + 5999]) == 2
    g.flush()
    assert (tmp_path / "a").read_bytes() == JAVA_FILE
    assert (tmp_path / "b").read_bytes() == JAVA_FILE_AFTER_ROLL


def test_one_key_at_a_time_equals_one_batch(tmp_path: Path) -> None:
    f = IndexFile.create(tmp_path / "a", 4, 6)
    for key, phys, stamp in [("T#a", 100, T0), ("T#b", 200, T0 + 1500), ("T#a", 300, T0 + 3000)]:
        _add(f, [key], [phys], [stamp])
    f.flush()
    assert (tmp_path / "a").read_bytes() == JAVA_FILE


def test_lookup_walks_the_chain_newest_first(tmp_path: Path) -> None:
    path = tmp_path / "a"
    path.write_bytes(JAVA_FILE)
    f = IndexFile.open(path, 4, 6, read_only=True)
    a, b = index_key_hashes(["T#a", "T#b"]).tolist()
    cases = [
        ((a, *ALL_TIME, 10), [300, 100]),
        ((b, *ALL_TIME, 10), [200]),
        ((a, *ALL_TIME, 1), [300]),  # limit
        ((a, T0 + 1000, 2**62, 10), [300]),  # older than begin: the walk stops
        ((a, 0, T0 + 2999, 10), [100]),  # newer than end: skipped, the walk goes on
        ((81910, *ALL_TIME, 10), []),  # same slot as "T#b", another hash
        ((a, *ALL_TIME, 0), []),
    ]
    assert [f.lookup(*args) for args, _ in cases] == [want for _, want in cases]


def test_chain_through_a_repeated_slot_in_one_batch_and_across_batches(tmp_path: Path) -> None:
    f = IndexFile.create(tmp_path / "a", 1, 20)  # one slot: every key shares it
    _add(f, ["t#x", "t#y", "t#x"], [0, 10, 20], [T0] * 3)
    _add(f, ["t#x", "t#y"], [30, 40], [T0 + 1000] * 2)
    x, y = index_key_hashes(["t#x", "t#y"]).tolist()
    assert f.lookup(x, *ALL_TIME, 10) == [30, 20, 0]
    assert f.lookup(y, *ALL_TIME, 10) == [40, 10]
    assert f.header.hash_slot_count == 1 and f.header.index_count == 6


def test_a_full_file_takes_what_fits(tmp_path: Path) -> None:
    f = IndexFile.create(tmp_path / "a", 4, 4)  # entries 1..3: entry 0 is never used
    assert _add(f, ["t#a", "t#b"], [0, 1], [T0, T0]) == 2
    assert not f.is_full
    assert _add(f, ["t#c", "t#d"], [2, 3], [T0, T0]) == 1
    assert f.is_full and _add(f, ["t#e"], [4], [T0]) == 0


def test_a_new_file_is_sparse(tmp_path: Path) -> None:
    f = IndexFile.create(tmp_path / "a", 1000, 1_000_000)
    stat = os.stat(tmp_path / "a")
    assert stat.st_size == 40 + 4000 + 20_000_000
    assert stat.st_blocks * 512 < 1_000_000  # the header and slots only
    f.close()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (JAVA_FILE[:100], "is 100 bytes, but 4 hash slots and 6 entries make 176"),
        (encode_header(IndexHeader(index_count=7)) + JAVA_FILE[40:], "claims 7 entries"),
    ],
)
def test_damaged_files_are_named(tmp_path: Path, data: bytes, message: str) -> None:
    path = tmp_path / "20231114221320000"
    path.write_bytes(data)
    for read_only in (True, False):
        with pytest.raises(CorruptDataError, match=message) as caught:
            MessageIndex.open(tmp_path, 4, 6, read_only=read_only)
        assert str(path) in str(caught.value)


def test_read_only_open_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "index" / "20231114221320000"
    path.parent.mkdir()
    path.write_bytes(JAVA_FILE)
    os.utime(path, ns=(1_000_000_000, 1_000_000_000))
    with MessageIndex.open(tmp_path / "index", 4, 6, read_only=True) as index:
        assert index.query("T", "a") == [300, 100]
        with pytest.raises(StoreError, match="read-only"):
            index.add(["T"], [None], ["z"], [400], [T0 + 4000])
        index.flush()
    assert path.read_bytes() == JAVA_FILE
    assert os.stat(path).st_mtime_ns == 1_000_000_000
    assert os.listdir(tmp_path / "index") == [path.name]
    assert MessageIndex.open(tmp_path / "absent", read_only=True).files == ()
    assert not (tmp_path / "absent").exists()


# -- the directory ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("topics", "uniq", "keys", "flags", "names", "owners"),
    [
        (["T"], ["U1"], ["a b"], None, ["T#U1", "T#a", "T#b"], [0, 0, 0]),
        (["T", "S"], [None, ""], [" a  b ", None], None, ["T#a", "T#b", "S#"], [0, 0, 1]),
        # rolled back (0xC): nothing; prepared (0x4) and committed (0x8) are indexed
        (["T"] * 3, [None] * 3, ["r", "p", "c"], [0xC, 0x4, 0x8], ["T#p", "T#c"], [1, 2]),
    ],
)
def test_index_keys(topics, uniq, keys, flags, names, owners) -> None:
    got_names, got_owners = index_keys(topics, uniq, keys, flags)
    assert (got_names, got_owners.tolist()) == (names, owners)


def test_files_roll_when_full_and_queries_span_them(tmp_path: Path) -> None:
    clock = iter([T0, T0, T0 + 5]).__next__  # two files made in the same millisecond
    with MessageIndex.open(tmp_path, 8, 3, clock=clock) as index:  # 2 keys per file
        assert index.add(["t"] * 3, [None] * 3, ["k a", "k", "k b"], [0, 10, 20], [T0] * 3) == 5
        names = [f.path.name for f in index.files]
        assert index.end_phy_offset == 20 and index.last_timestamp == T0
    assert names == [file_name_for(t) for t in (T0, T0 + 1, T0 + 5)]
    with MessageIndex.open(tmp_path, 8, 3, read_only=True) as index:
        assert index.query("t", "k") == [20, 10, 0]
        assert index.query("t", "k", max_num=2) == [20, 10]
        assert (index.query("t", "a"), index.query("t", "b"), index.query("u", "k")) == (
            [0],
            [20],
            [],
        )


def test_records_already_indexed_are_skipped(tmp_path: Path) -> None:
    with MessageIndex.open(tmp_path, 8, 100) as index:
        index.add(["t", "t"], [None, None], ["k", "k"], [0, 10], [T0, T0])
        # a second dispatch from offset 0: only records from the last one indexed on
        index.add(["t", "t", "t"], [None] * 3, ["k"] * 3, [0, 10, 30], [T0] * 3)
        assert index.query("t", "k") == [30, 10, 10, 0]  # RocketMQ indexes 10 again too


def test_time_window_selects_files_and_entries(tmp_path: Path) -> None:
    clock = iter(range(T0, T0 + 10)).__next__
    with MessageIndex.open(tmp_path, 8, 3, clock=clock) as index:
        stamps = [T0, T0 + 10_000, T0 + 10_000, T0 + 30_000]
        index.add(["t"] * 4, [None] * 4, ["k"] * 4, [0, 1, 2, 3], stamps)
        assert len(index.files) == 2
        assert index.query("t", "k", begin_ms=T0 + 10_000, end_ms=T0 + 20_000) == [2, 1]
        assert index.query("t", "k", begin_ms=T0 + 25_000) == [3]
        assert index.query("t", "k", end_ms=T0 + 5_000) == [0]


def test_first_key_of_a_rolled_file_reads_later_by_the_gap_like_rocketmq(tmp_path: Path) -> None:
    # Its timeDiff is taken from the previous file's end, then added to its own store time.
    with MessageIndex.open(tmp_path, 8, 2) as index:  # one key per file
        index.add(["t", "t"], [None] * 2, ["k", "k"], [0, 1], [T0, T0 + 10_000])
        assert index.query("t", "k", begin_ms=T0 + 10_000, end_ms=T0 + 19_999) == []
        assert index.query("t", "k", begin_ms=T0 + 10_000, end_ms=T0 + 20_000) == [1]
        assert index.query("t", "k") == [1, 0]


@pytest.mark.parametrize(
    ("ends", "checkpoint", "doomed"),
    [
        ([T0, T0 + 5], T0 + 5, [False, False]),
        ([T0, T0 + 5], T0, [False, True]),
        ([T0, T0 + 5], 0, [True, True]),
    ],
)
def test_crash_deletion_rule(ends, checkpoint, doomed) -> None:
    assert doomed_after_crash(ends, checkpoint) == doomed


def test_truncate_after_crash_names_where_to_index_again(tmp_path: Path) -> None:
    clock = iter(range(T0, T0 + 10)).__next__
    with MessageIndex.open(tmp_path, 8, 3, clock=clock) as index:
        index.add(["t"] * 3, [None] * 3, ["k"] * 3, [0, 10, 20], [T0, T0 + 1, T0 + 2])
        assert index.truncate_after_crash(T0 + 2) is None
        assert index.truncate_after_crash(T0 + 1) == 20
        assert len(index.files) == 1 and index.end_phy_offset == 10
        assert len(os.listdir(tmp_path)) == 1
        index.add(["t"], [None], ["k"], [20], [T0 + 2])
        assert index.query("t", "k") == [20, 10, 0]


@pytest.mark.parametrize(
    ("ends", "min_offset", "count"),
    [([100, 200, 300], 250, 2), ([100, 200], 999, 1), ([100, 200], 100, 0), ([], 5, 0)],
)
def test_retention_rule(ends, min_offset, count) -> None:
    assert expired_count(ends, min_offset) == count


def test_delete_before_keeps_the_newest_file(tmp_path: Path) -> None:
    clock = iter(range(T0, T0 + 10)).__next__
    with MessageIndex.open(tmp_path, 8, 2, clock=clock) as index:  # one key per file
        index.add(["t"] * 3, [None] * 3, ["k"] * 3, [0, 10, 20], [T0] * 3)
        assert index.delete_before(15) == 2
        assert index.delete_before(10**9) == 0
        assert index.query("t", "k") == [20]
    assert len(os.listdir(tmp_path)) == 1


@pytest.mark.parametrize(
    ("now_ms", "previous", "name"),
    [
        (1_700_000_000_123, None, "20231114221320123"),
        (1_700_000_000_123, "20231114221320123", "20231114221320124"),
        (1_700_000_000_123, "20231114221359999", "20231114221400000"),  # clock went back
        (1_700_000_000_123, "20231114221320122", "20231114221320123"),
    ],
)
def test_file_names(now_ms: int, previous: str | None, name: str) -> None:
    assert file_name_for(now_ms, previous, tz=UTC) == name


def test_index_keys_over_arrow_columns_equals_the_reference() -> None:
    import random

    import pyarrow as pa

    rng = random.Random(7)
    words = ["", "a", "order-1", "日本", "😀x", "k k"]
    topics = [rng.choice(["t", "orders", "%RETRY%g"]) for _ in range(300)]
    uniq = [rng.choice([None, "", "U1", "7F0000"]) for _ in range(300)]
    keys = [rng.choice([None, "", *words, " ".join(rng.choices(words, k=3))]) for _ in range(300)]
    flags = [rng.choice([0, 0x4, 0x8, 0xC]) for _ in range(300)]
    reference = index_keys(topics, uniq, keys, flags)
    columns = index_keys(pa.array(topics), pa.array(uniq, pa.string()), pa.array(keys), flags)
    assert columns[0] == reference[0]
    assert columns[1].tolist() == reference[1].tolist()
