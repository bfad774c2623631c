"""The store as a library: append, read, filter, limits, timestamps, retention, reopen."""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest

from rmq_spark.codec import record as rec
from rmq_spark.codec.properties import decode_properties, encode_properties
from rmq_spark.codec.taghash import tag_hash_code
from rmq_spark.errors import (
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    StoreError,
    StoreLockedError,
)
from rmq_spark.filter import compile_selector, stored
from rmq_spark.store import MessageStore, StoreConfig, reads, writer
from rmq_spark.store.verify import verify_store
from rmq_spark.structs import PullStatus
from tests.support.eventually import eventually


def bodies(prefix: str, n: int, size: int = 0) -> list[bytes]:
    return [f"{prefix}-{i}".encode().ljust(size, b".") for i in range(n)]


def read_all(store, topic, qid, offset=0, **kw):
    result = store.get_messages(topic, qid, offset, max_count=100_000, **kw)
    return result, list(rec.iter_records(result.data))


def test_append_then_read_returns_exact_records_across_segment_rolls(store_factory):
    store = store_factory(commitlog_segment_bytes=8192)
    store.topics.create("orders", queues=2)
    sent = []
    for batch in range(40):
        data = bodies(f"b{batch}", 7, size=100)
        props = [encode_properties({"TAGS": "TagA", "KEYS": f"k{batch}"})] * 7
        result = store.append("orders", batch % 2, data, props, born_timestamps=batch)
        assert result.count == 7
        sent.append((batch % 2, result.first_queue_offset, data))
    assert len(store.commitlog.segments) > 5, "small segments must have rolled"

    for qid in (0, 1):
        result, records = read_all(store, "orders", qid)
        expected = [b for q, _, data in sent if q == qid for b in data]
        assert result.status is PullStatus.FOUND
        assert [r.body for r in records] == expected
        assert [r.queue_offset for r in records] == list(range(len(expected)))
        assert result.next_begin_offset == result.max_offset == len(expected)
        assert all(r.topic == "orders" and r.queue_id == qid for r in records)
        assert records[0].properties == encode_properties({"TAGS": "TagA", "KEYS": f"k{qid}"})
        # The physical offset stamped in each record is where it really lives.
        for r in records:
            assert store.read_record(r.physical_offset) == rec.encode_record(r)


def test_segments_end_with_a_blank_marker_and_never_split_a_record(store_factory):
    store = store_factory(commitlog_segment_bytes=4096)
    store.topics.create("t", queues=1)
    for _ in range(30):
        store.append("t", 0, bodies("x", 3, size=300))
    for seg in store.commitlog.segments[:-1]:
        raw = bytes(seg.view())
        pos = 0
        while True:
            size = int.from_bytes(raw[pos : pos + 4], "big")
            magic = int.from_bytes(raw[pos + 4 : pos + 8], "big")
            if magic == rec.BLANK_MAGIC:
                assert size == len(raw) - pos, "blank marker holds the remaining size"
                break
            rec.decode_record(raw, pos)  # a whole, valid record
            pos += size


def test_a_batch_is_written_whole_into_one_segment(store_factory):
    store = store_factory(commitlog_segment_bytes=4096)
    store.topics.create("t", queues=1)
    results = [store.append("t", 0, bodies(f"b{i}", 5, size=300)) for i in range(12)]
    segment_of = [
        {int(p) // 4096 for p in result.physical_offsets} for result in results
    ]  # a batch of 5 x ~370 bytes would straddle a 4 KiB boundary every few batches
    assert all(len(segments) == 1 for segments in segment_of), segment_of
    assert len(store.commitlog.segments) > 3
    assert verify_store(store).ok
    first = store.commitlog.max_offset
    with pytest.raises(InvalidArgumentError, match="does not fit in one commit-log segment"):
        store.append("t", 0, bodies("huge", 12, size=300))  # ~4.4 KB: more than a segment
    assert store.commitlog.max_offset == first and store.max_offset("t", 0) == 60


def test_tag_filter_returns_only_matching_and_skips_the_gap(store_factory):
    store = store_factory()
    store.topics.create("t", queues=1)
    tags = ["A", "B", "B", "A", "C", "B", "B", "B"]
    store.append("t", 0, bodies("m", len(tags)), tags=tags)
    result, records = read_all(store, "t", 0, tag_codes=[tag_hash_code("A"), tag_hash_code("C")])
    assert result.status is PullStatus.FOUND
    assert [r.body for r in records] == [b"m-0", b"m-3", b"m-4"]
    assert list(result.queue_offsets) == [0, 3, 4]
    assert result.next_begin_offset == 8, "trailing non-matching entries are skipped"

    assert [decode_properties(r.properties).get("TAGS") for r in records] == ["A", "A", "C"]

    none = store.get_messages("t", 0, 5, tag_codes=[tag_hash_code("A")])
    assert none.status is PullStatus.NO_MATCHED_MSG
    assert none.next_begin_offset == 8 and none.data == b""


def test_sql92_selector_picks_by_property_with_tags_and_limits(store_factory, monkeypatch):
    store = store_factory()
    store.topics.create("t", queues=1)
    n = 3000
    regions = ["eu" if i % 100 == 7 else "us" for i in range(n)]
    props = [encode_properties({"region": r, "i": str(i)}) for i, r in enumerate(regions)]
    tags = ["A" if i % 2 else "B" for i in range(n)]
    for at in range(0, n, 100):  # batches that fit the test store's 64 KiB segments
        store.append(
            "t", 0, bodies("m", n, size=200)[at : at + 100], props[at : at + 100],
            tags=tags[at : at + 100],
        )  # fmt: skip
    eu = compile_selector("region = 'eu'")
    result, records = read_all(store, "t", 0, selector=eu)
    wanted = [i for i in range(n) if regions[i] == "eu"]
    assert list(result.queue_offsets) == wanted
    assert [r.body.rstrip(b".") for r in records] == [f"m-{i}".encode() for i in wanted]
    assert result.next_begin_offset == n and int(result.sizes.sum()) == len(result.data)

    # the tag filter first, then the selector: odd offsets are tagged A, 7 + 100k is odd
    both, _ = read_all(store, "t", 0, tag_codes=[tag_hash_code("A")], selector=eu)
    assert list(both.queue_offsets) == wanted
    none, _ = read_all(store, "t", 0, tag_codes=[tag_hash_code("B")], selector=eu)
    assert (none.status, none.next_begin_offset) == (PullStatus.NO_MATCHED_MSG, n)

    # limits: the next read starts after the last message returned
    two = store.get_messages("t", 0, 0, max_count=2, selector=eu)
    assert list(two.queue_offsets) == [7, 107] and two.next_begin_offset == 108
    one = store.get_messages("t", 0, 0, max_bytes=1, selector=eu)
    assert list(one.queue_offsets) == [7] and one.next_begin_offset == 8

    # records looked at a few at a time give the same answer
    monkeypatch.setattr(reads, "SELECT_CHUNK_BYTES", 1000)
    small, _ = read_all(store, "t", 0, selector=compile_selector("i > 2990 OR region = 'eu'"))
    assert list(small.queue_offsets) == wanted + list(range(2991, n))
    limited = store.get_messages("t", 0, 100, max_count=3, selector=eu)
    assert list(limited.queue_offsets) == [107, 207, 307] and limited.next_begin_offset == 308

    # a read scans max(max_count, 800) entries, as RocketMQ's 16,000 bytes of consume queue
    nothing = store.get_messages("t", 0, 10, max_count=32, selector=compile_selector("i = 1"))
    assert (nothing.status, nothing.next_begin_offset) == (PullStatus.NO_MATCHED_MSG, 810)
    # and looks at SELECT_MAX_BYTES of records at most: reads in a row still find every one
    monkeypatch.setattr(reads, "SELECT_MAX_BYTES", 5000)
    found, at = [], 0
    while at < n:
        step = store.get_messages("t", 0, at, max_count=5000, selector=eu)
        assert step.next_begin_offset > at
        found += [] if step.queue_offsets is None else list(step.queue_offsets)
        at = step.next_begin_offset
    assert found == wanted


def test_selected_reads_that_search_for_bytes_are_not_fooled_by_them(store_factory, monkeypatch):
    """The store looks only at the records holding the bytes a match needs
    (``region\x01eu``): bodies, longer values, names that end alike and bytes that span a
    property and the body are looked at and refused; every match is still found."""
    store = store_factory()
    store.topics.create("t", queues=1)
    cases = [  # (properties, body, picked by region = 'eu')
        ({"region": "eu"}, b"plain", True),
        ({"region": "us"}, b"region\x01eu in the body", False),
        ({"region": "europe"}, b"x", False),
        ({"subregion": "eu", "region": "us"}, b"x", False),
        ({"note": "region"}, b"\x01eu", False),
        ({"a": "1", "region": "eu"}, b"region\x01eu", True),
        ({}, b"x", False),
        ({"region": "eu", "zz": "9"}, b"", True),
    ] + [({"region": "us"}, b"x", False)] * 40  # so few hold the bytes: they are searched
    rounds = 10
    for _ in range(rounds):
        store.append(
            "t", 0, [body or b"-" for _, body, _ in cases],
            [encode_properties(props) for props, _, _ in cases],
        )  # fmt: skip
    candidates_looked_at = []
    real = stored.candidates

    def counted(*args: object) -> object:
        found = real(*args)  # type: ignore[arg-type]
        candidates_looked_at.append(-1 if found is None else len(found))
        return found

    monkeypatch.setattr(stored, "candidates", counted)
    wanted = [r * len(cases) + i for r in range(rounds) for i, c in enumerate(cases) if c[2]]
    for text in ("region = 'eu'", "region IN ('eu', 'x')", "region = 'eu' AND a IS NULL"):
        result, records = read_all(store, "t", 0, selector=compile_selector(text))
        expect = wanted if "a IS" not in text else [o for o in wanted if o % len(cases) != 5]
        assert list(result.queue_offsets) == expect, text
        assert all(decode_properties(r.properties)["region"] == "eu" for r in records)
    # 6 records of each 48 hold the bytes (the first eight cases but the fifth and seventh)
    assert candidates_looked_at == [6 * rounds] * 3, "only the records holding them"


def test_read_statuses_at_the_edges(store_factory):
    store = store_factory()
    store.topics.create("t", queues=2)
    store.append("t", 0, bodies("m", 5))
    at_end = store.get_messages("t", 0, 5)
    assert (at_end.status, at_end.next_begin_offset) == (PullStatus.NO_NEW_MSG, 5)
    past = store.get_messages("t", 0, 9)  # nothing deleted: start over, do not skip
    assert (past.status, past.next_begin_offset) == (PullStatus.OFFSET_ILLEGAL, 0)
    below = store.get_messages("t", 0, -3)
    assert (below.status, below.next_begin_offset) == (PullStatus.OFFSET_ILLEGAL, 0)
    empty = store.get_messages("t", 1, 0)
    assert (empty.status, empty.min_offset, empty.max_offset) == (PullStatus.NO_NEW_MSG, 0, 0)


def test_count_and_byte_limits(store_factory):
    store = store_factory()
    store.topics.create("t", queues=1)
    store.append("t", 0, bodies("m", 10, size=1000))
    few = store.get_messages("t", 0, 2, max_count=3)
    assert few.count == 3 and few.next_begin_offset == 5
    by_bytes = store.get_messages("t", 0, 0, max_count=10, max_bytes=2500)
    assert by_bytes.count == 2 and by_bytes.next_begin_offset == 2
    one_big = store.get_messages("t", 0, 0, max_bytes=10)
    assert one_big.count == 1, "a message larger than max_bytes still comes alone"
    sizes = by_bytes.sizes
    starts = by_bytes.record_starts()
    assert [rec.decode_record(by_bytes.data, int(s)).body for s in starts] == bodies("m", 2, 1000)
    assert int(sizes.sum()) == len(by_bytes.data)


def test_offset_by_store_timestamp(store_factory, monkeypatch):
    clock = iter([1_000, 2_000, 3_000, 4_000])
    monkeypatch.setattr(writer, "now_ms", lambda: next(clock))
    store = store_factory()
    store.topics.create("t", queues=1)
    for i in range(4):
        store.append("t", 0, bodies(f"at{i}", 3))
    assert store.offset_by_timestamp("t", 0, 0) == 0
    assert store.offset_by_timestamp("t", 0, 2_000) == 3
    assert store.offset_by_timestamp("t", 0, 2_500) == 6
    assert store.offset_by_timestamp("t", 0, 9_999) == 12, "after the last: the max offset"
    _, records = read_all(store, "t", 0, offset=6)
    assert records[0].store_timestamp == 3_000
    assert [store.queue_store_timestamp("t", 0, i) for i in (0, 5, 6, 11)] == [
        1_000,
        2_000,
        3_000,
        4_000,
    ]
    assert store.queue_store_timestamp("t", 0, 12) is None  # past the end
    with pytest.raises(NotFoundError, match="queue 1 does not exist"):
        store.queue_store_timestamp("t", 1, 0)  # as every read of a queue that is not there


def test_retention_deletes_old_segments_and_reads_below_min_are_illegal(store_factory):
    store = store_factory(commitlog_segment_bytes=4096, consumequeue_entries_per_file=16)
    store.topics.create("t", queues=1)
    for i in range(40):
        store.append("t", 0, bodies(f"r{i}", 2, size=200))
    segments = store.commitlog.segments
    old = time.time() - 3600
    for seg in segments[:3]:
        os.utime(seg.path, (old, old))
    assert store.delete_expired_files(max_age_ms=60_000) == 3
    assert not segments[0].path.exists()
    new_min = store.min_offset("t", 0)
    assert new_min > 0
    below = store.get_messages("t", 0, 0)
    assert (below.status, below.next_begin_offset) == (PullStatus.OFFSET_ILLEGAL, new_min)
    result, records = read_all(store, "t", 0, offset=new_min)
    assert result.status is PullStatus.FOUND
    assert records[0].queue_offset == new_min
    assert records[0].physical_offset >= store.commitlog.min_offset
    assert records[-1].body == bodies("r39", 2, size=200)[1]


def test_retention_survives_reopen(store_factory, tmp_path):
    store = store_factory(commitlog_segment_bytes=4096)
    store.topics.create("t", queues=1)
    for i in range(30):
        store.append("t", 0, bodies(f"r{i}", 2, size=200))
    for seg in store.commitlog.segments[:2]:
        os.utime(seg.path, (1, 1))
    store.delete_expired_files(max_age_ms=1000)
    min_before, max_before = store.min_offset("t", 0), store.max_offset("t", 0)
    store.close()
    again = store_factory(commitlog_segment_bytes=4096)
    assert (again.min_offset("t", 0), again.max_offset("t", 0)) == (min_before, max_before)


def test_errors_name_the_bad_value(store_factory):
    store = store_factory(max_message_bytes=1000)
    store.topics.create("t", queues=2)
    store.topics.create("readonly", queues=1, perm=4)
    with pytest.raises(NotFoundError, match=r"'nope'.*create it"):
        store.append("nope", 0, [b"x"])
    with pytest.raises(NotFoundError, match="'nope'"):
        store.get_messages("nope", 0, 0)
    with pytest.raises(InvalidArgumentError, match=r"queue id 2 .*0\.\.1"):
        store.append("t", 2, [b"x"])
    with pytest.raises(PermissionDeniedError, match=r"'readonly'.*perm 4"):
        store.append("readonly", 0, [b"x"])
    with pytest.raises(InvalidArgumentError, match="1001 bytes exceeds the limit of 1000"):
        store.append("t", 0, [b"ok", b"y" * 1001])
    with pytest.raises(InvalidArgumentError, match="max_count 0"):
        store.get_messages("t", 0, 0, max_count=0)
    assert store.max_offset("t", 0) == 0, "a rejected batch writes nothing"


def test_reopen_continues_offsets_and_keeps_consumer_offsets(store_factory):
    store = store_factory()
    store.topics.create("t", queues=1)
    store.append("t", 0, bodies("a", 5))
    store.offsets.commit("etl", "t", {0: 3})
    store.close()
    store = store_factory()
    assert store.recovery.abnormal is False
    result = store.append("t", 0, bodies("b", 2))
    assert result.first_queue_offset == 5
    assert store.offsets.query_one("etl", "t", 0) == 3
    _, records = read_all(store, "t", 0)
    assert [r.body for r in records] == [*bodies("a", 5), *bodies("b", 2)]


def test_a_store_directory_opens_once(store_factory):
    store_factory()
    with pytest.raises(StoreLockedError, match="in use by another process"):
        store_factory()


def test_sync_appends_from_many_threads_are_all_durable_and_ordered(store_factory):
    store = store_factory(flush_mode="SYNC")
    store.topics.create("t", queues=4)
    errors = []

    def worker(qid):
        try:
            for i in range(50):
                r = store.append("t", qid, [f"{qid}:{i}".encode()])
                assert r.first_queue_offset == i
                # SYNC: acknowledged means fsynced.
                assert store.flush_service.flushed_offset >= int(r.physical_offsets[-1])
        except Exception as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(q,)) for q in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    for qid in range(4):
        _, records = read_all(store, "t", qid)
        assert [r.body for r in records] == [f"{qid}:{i}".encode() for i in range(50)]


def test_delete_topic_removes_queues_and_offsets(store_factory):
    store = store_factory()
    store.topics.create("t", queues=1)
    store.append("t", 0, bodies("a", 3))
    store.offsets.commit("g", "t", {0: 2})
    store.delete_topic("t")
    with pytest.raises(NotFoundError):
        store.get_messages("t", 0, 0)
    assert store.offsets.query("g", "t") == {}
    assert not (store.config.consumequeue_dir / "t").exists()


def test_config_validation_names_the_option(tmp_path):
    with pytest.raises(InvalidArgumentError, match="flush_mode 'SOMETIMES'"):
        StoreConfig(tmp_path, flush_mode="sometimes")
    with pytest.raises(InvalidArgumentError, match="commitlog_segment_bytes=10"):
        StoreConfig(tmp_path, commitlog_segment_bytes=10)
    with pytest.raises(InvalidArgumentError, match="'nonsense'"):
        StoreConfig(tmp_path, store_host="nonsense")


def test_physical_offsets_are_increasing_and_match_msg_ids(store_factory):
    store = store_factory()
    store.topics.create("t", queues=1)
    result = store.append("t", 0, bodies("m", 50))
    assert np.all(np.diff(result.physical_offsets) > 0)
    ids = result.msg_ids(store.config.store_host)
    host, phys = rec.parse_offset_msg_id(ids[7])
    assert host == store.config.store_host and phys == int(result.physical_offsets[7])
    assert rec.decode_record(store.read_record(phys)).body == b"m-7"


def test_open_reports_unwritable_store_dir(tmp_path):
    target = tmp_path / "file"
    target.write_text("not a directory")
    with pytest.raises(Exception, match="file"):
        MessageStore.open(StoreConfig(target / "store"))


@pytest.mark.parametrize(
    ("setting", "other", "flag"),
    [
        ("commitlog_segment_bytes", 128 * 1024, "--commitlog-segment-bytes"),
        ("consumequeue_entries_per_file", 128, "--consumequeue-entries-per-file"),
    ],
)
def test_reopening_with_other_file_sizes_is_refused_and_changes_nothing(
    store_factory, tmp_path, setting, other, flag
):
    store = store_factory()
    store.topics.create("t", queues=1)
    store.append("t", 0, bodies("x", 100, size=100))
    store.close()
    before = {p: p.stat().st_size for p in (tmp_path / "store").rglob("*") if p.is_file()}
    with pytest.raises(StoreError, match=rf"made with {flag} \d+, but this broker is set to"):
        store_factory(**{setting: other})
    after = {p: p.stat().st_size for p in (tmp_path / "store").rglob("*") if p.is_file()}
    assert after == before  # no file was extended or cut
    reopened = store_factory()
    assert len(read_all(reopened, "t", 0)[1]) == 100


def test_a_store_without_recorded_sizes_has_them_read_from_its_files(store_factory, tmp_path):
    store = store_factory()
    store.topics.create("t", queues=1)
    store.append("t", 0, bodies("x", 10))
    store.close()
    (tmp_path / "store" / "config" / "storeGeometry.json").unlink()  # a store made earlier
    with pytest.raises(StoreError, match="--commitlog-segment-bytes 65536"):
        store_factory(commitlog_segment_bytes=1 << 20)
    assert len(read_all(store_factory(), "t", 0)[1]) == 10


@pytest.mark.parametrize("recorded", [True, False])
def test_a_broker_not_told_the_file_sizes_takes_the_stores_own(store_factory, tmp_path, recorded):
    from rmq_spark.broker.config import BrokerConfig

    store = store_factory()  # 64 KiB segments, not the broker's 1 GiB default
    store.topics.create("t", queues=1)
    store.append("t", 0, bodies("x", 10))
    store.close()
    if not recorded:  # a store RocketMQ wrote records no sizes: they are read from its files
        (tmp_path / "store" / "config" / "storeGeometry.json").unlink()
    config = BrokerConfig(store_dir=tmp_path / "store").store_config()
    assert (config.commitlog_segment_bytes, config.consumequeue_entries_per_file) == (
        store.config.commitlog_segment_bytes,
        store.config.consumequeue_entries_per_file,
    )
    fresh = BrokerConfig(store_dir=tmp_path / "new").store_config()
    assert fresh.commitlog_segment_bytes == 1 << 30  # a new store gets the defaults


def test_schedule_topic_entries_hold_the_delivery_time(store_factory, tmp_path):
    """As in RocketMQ, where a broker opening the store reads due times from the entries."""
    topic = "SCHEDULE_TOPIC_XXXX"
    store = store_factory(schedule_delays_ms=(1_000, 5_000))
    store.topics.create(topic, queues=2)
    result = store.append(topic, 1, bodies("later", 3), tags=["A"] * 3, delivery_delay_ms=5_000)
    entries = store.consume_queues()[(topic, 1)].entries(0, 3)
    assert entries["tag_code"].tolist() == [result.store_timestamp + 5_000] * 3
    assert verify_store(store).ok
    store.close()
    # Recovery writes the entries again from the commit log: the same delivery times.
    (tmp_path / "store" / "abort").touch()
    for path in (tmp_path / "store" / "consumequeue" / topic).rglob("0*"):
        path.unlink()
    reopened = store_factory(schedule_delays_ms=(1_000, 5_000))
    again = reopened.consume_queues()[(topic, 1)].entries(0, 3)
    assert again["tag_code"].tolist() == [result.store_timestamp + 5_000] * 3


def test_checkpoints_rocketmqs_file_in_its_layout_and_ours_beside_it(store_factory):
    from rmq_spark.store.checkpoint import RocketMQCheckpoint, read_store_checkpoints

    store = store_factory(commitlog_segment_bytes=8192)
    store.topics.create("orders", queues=1)
    for batch in range(30):
        store.append("orders", 0, bodies(f"b{batch}", 5, size=200), [b""] * 5)
    last = store.get_messages("orders", 0, 149, max_count=1)
    last_ts = next(rec.iter_records(last.data)).store_timestamp
    end = store.commitlog.max_offset
    root = store.config.store_dir
    store.close()

    cps = read_store_checkpoints(root)
    assert cps.rocketmq == RocketMQCheckpoint(last_ts, last_ts, last_ts)
    assert cps.rocketlite is not None and cps.rocketlite.safe_offset == end
    assert (root / "checkpoint").stat().st_size == 4096


def test_a_store_with_only_rocketmqs_checkpoint_recovers_from_the_segment_it_names(
    store_factory,
):
    from rmq_spark.store.checkpoint import RocketMQCheckpoint, encode_rocketmq

    store = store_factory(commitlog_segment_bytes=8192)
    store.topics.create("orders", queues=1)
    for batch in range(30):
        store.append("orders", 0, bodies(f"b{batch}", 5, size=200), [b""] * 5)
        time.sleep(0.003)  # distinct store times, so each segment starts at its own
    segments = [s.start_offset for s in store.commitlog.segments]
    firsts = [store.commitlog.first_store_timestamp(s) for s in store.commitlog.segments]
    root = store.config.store_dir
    store.close()
    assert len(segments) > 3 and firsts == sorted(set(firsts))
    # As Apache RocketMQ leaves it after a crash: its checkpoint, an abort file, none of
    # ours. Its checkpoint says the third segment's first record is 3 s older than what
    # was flushed: the scan starts there.
    (root / "rocketlite.checkpoint").unlink()
    (root / "abort").touch()
    flushed = firsts[2] + 3_000
    (root / "checkpoint").write_bytes(encode_rocketmq(RocketMQCheckpoint(flushed, flushed, 0)))

    store = store_factory(commitlog_segment_bytes=8192)
    assert store.recovery.abnormal and store.recovery.scanned_from == segments[2]
    _, records = read_all(store, "orders", 0)
    assert [r.body for r in records] == [b for i in range(30) for b in bodies(f"b{i}", 5, 200)]


# -- the message index -----------------------------------------------------------------------


def keyed(prefix: str, n: int) -> list[bytes]:
    return [encode_properties({"KEYS": f"{prefix}-{i} {prefix}", "UNIQ_KEY": f"U-{prefix}-{i}"})
            for i in range(n)]  # fmt: skip


def bodies_found(store, topic, key, **kw) -> list[bytes]:
    return sorted(rec.decode_record(raw).body for raw in store.query_messages(topic, key, **kw))


def test_messages_are_found_by_key_and_by_uniq_key(store_factory):
    store = store_factory(commitlog_segment_bytes=8192)
    store.topics.create("orders", queues=2)
    store.topics.create("refunds", queues=1)
    store.append("orders", 0, bodies("a", 5), keyed("a", 5))
    store.append("orders", 1, bodies("b", 5), keyed("b", 5))
    store.append("refunds", 0, bodies("r", 5), keyed("a", 5))  # same keys, other topic
    store.index_builder.catch_up()
    assert bodies_found(store, "orders", "a-3") == [b"a-3"]
    assert bodies_found(store, "orders", "U-b-4") == [b"b-4"]
    assert bodies_found(store, "orders", "a") == sorted(bodies("a", 5))
    assert bodies_found(store, "refunds", "a-3") == [b"r-3"]
    assert len(store.query_messages("orders", "a", max_count=2)) == 2
    assert store.query_messages("orders", "nothing") == []


def test_keys_sharing_a_hash_slot_are_told_apart(store_factory):
    store = store_factory(index_hash_slots=1)  # every key in one chain
    store.topics.create("orders", queues=1)
    store.append("orders", 0, bodies("a", 50), keyed("a", 50))
    store.index_builder.catch_up()
    assert bodies_found(store, "orders", "a-17") == [b"a-17"]


def test_the_index_is_built_in_the_background_and_rolls_to_new_files(store_factory):
    store = store_factory(index_max_entries=40)  # 39 keys a file
    store.topics.create("orders", queues=1)
    for batch in range(10):
        store.append("orders", 0, bodies(f"b{batch}", 5), keyed(f"b{batch}", 5))
    # no catch_up: the thread indexes
    eventually(lambda: bodies_found(store, "orders", "b9-4"), what="the last batch indexed")
    assert len(store.index.files) == 4  # 150 keys
    assert all(bodies_found(store, "orders", f"b{b}-2") == [f"b{b}-2".encode()] for b in range(10))


def test_a_store_whose_index_is_gone_or_cut_by_a_crash_indexes_again(store_factory):
    from rmq_spark.store.checkpoint import (
        RocketMQCheckpoint,
        encode_rocketmq,
        read_store_checkpoints,
    )

    store = store_factory(index_max_entries=40)
    store.topics.create("orders", queues=1)
    for batch in range(10):
        store.append("orders", 0, bodies(f"b{batch}", 5), keyed(f"b{batch}", 5))
    root = store.config.store_dir
    store.close()
    names = sorted(p.name for p in (root / "index").iterdir())
    assert len(names) == 4

    # As after a crash: the abort file stays, and the checkpoint's index time is older than
    # the keys of every file, so all are deleted and their keys indexed again.
    (root / "abort").touch()
    checkpoint = read_store_checkpoints(root).rocketmq
    stale = RocketMQCheckpoint(checkpoint.physic_msg_timestamp, checkpoint.logics_msg_timestamp, 1)
    (root / "checkpoint").write_bytes(encode_rocketmq(stale).ljust(4096, b"\0"))
    store = store_factory(index_max_entries=40)
    store.index_builder.catch_up()
    assert all(bodies_found(store, "orders", f"b{b}-2") == [f"b{b}-2".encode()] for b in range(10))
    store.close()
    rebuilt = sorted(p.name for p in (root / "index").iterdir())
    assert len(rebuilt) == 4 and not set(rebuilt) & set(names), "the files were made again"

    for path in (root / "index").iterdir():  # no index at all (a store from before it)
        path.unlink()
    store = store_factory(index_max_entries=40)
    store.index_builder.catch_up()
    assert bodies_found(store, "orders", "b0-0") == [b"b0-0"]
    assert bodies_found(store, "orders", "U-b9-4") == [b"b9-4"]


def test_retention_deletes_index_files_that_point_only_at_deleted_segments(store_factory):
    store = store_factory(commitlog_segment_bytes=4096, index_max_entries=20)
    store.topics.create("orders", queues=1)
    for batch in range(30):
        store.append("orders", 0, bodies(f"b{batch}", 3, size=200), keyed(f"b{batch}", 3))
    store.index_builder.catch_up()
    before = len(store.index.files)
    assert store.delete_expired_files(max_age_ms=0) > 0
    assert 0 < len(store.index.files) < before
    assert bodies_found(store, "orders", "b0-0") == []  # its segment is gone
    assert bodies_found(store, "orders", "b29-2") == [b"b29-2".ljust(200, b".")]


def test_a_store_without_the_index_says_so(store_factory):
    store = store_factory(message_index=False)
    store.topics.create("orders", queues=1)
    store.append("orders", 0, bodies("a", 2), keyed("a", 2))
    with pytest.raises(StoreError, match="message_index=False"):
        store.query_messages("orders", "a-1")
    assert not (store.config.store_dir / "index").exists()


def test_range_files_name_the_files_holding_a_queue_range(store_factory):
    store = store_factory(commitlog_segment_bytes=4096, consumequeue_entries_per_file=16)
    store.topics.create("orders", queues=2)
    for batch in range(40):  # the two queues interleaved over about 20 segments
        store.append("orders", batch % 2, bodies(f"b{batch}", 5, size=200), [b""] * 5)
    found = store.range_files("orders", 1, 10, 90, max_files=64)
    assert (found.min_offset, found.max_offset, found.start, found.end) == (0, 100, 10, 90)
    assert [f.start for f in found.queue_files] == [0, 320, 640, 960, 1280, 1600]  # 16 * 20
    entries = store.get_messages("orders", 1, 10, max_count=80)
    records = list(rec.iter_records(entries.data))
    spans = [(f.start, f.start + f.size) for f in found.segments]
    assert all(any(a <= r.physical_offset < b for a, b in spans) for r in records)
    assert spans == sorted(spans) and all(f.path.exists() for f in found.segments)

    capped = store.range_files("orders", 1, 0, 100, max_files=6)
    assert len(capped.queue_files) + len(capped.segments) <= 6
    assert 0 < capped.end < 100  # the reader asks again from capped.end
    last = store.get_messages("orders", 1, capped.end - 1, max_count=1)
    record = next(rec.iter_records(last.data))
    seg_end = capped.segments[-1].start + capped.segments[-1].size
    assert record.physical_offset + len(rec.encode_record(record)) <= seg_end

    assert store.range_files("orders", 1, 100, 200, max_files=64).start == 100  # none yet
    assert store.range_files("orders", 1, 100, 200, max_files=64).segments == []
