"""StoreView and ``rocketlite store inspect`` over stores the real MessageStore wrote: what
was written reads back, offsets are the committed ones, and the directory is left as it was."""

from __future__ import annotations

import json
import mmap
import os
import struct
from itertools import pairwise

import numpy as np
import pytest

from rmq_spark.cli import main
from rmq_spark.codec.arrow_decode import decode_records
from rmq_spark.codec.consume_queue import encode_entries
from rmq_spark.errors import (
    InvalidArgumentError,
    NotFoundError,
    StoreError,
    StoreLockedError,
)
from rmq_spark.store import MessageStore, StoreConfig, offline
from rmq_spark.store.offline import StoreView
from tests.support.store_files import snapshot

TOPICS = {"orders": 3, "events": 2}
BATCHES = 60


def open_store(root, **overrides) -> MessageStore:
    settings = {
        "store_dir": root,
        "commitlog_segment_bytes": 4096,
        "consumequeue_entries_per_file": 16,
        **overrides,
    }
    return MessageStore.open(StoreConfig(**settings))


def write_messages(store: MessageStore, sent: dict, batches: int = BATCHES, tag="") -> None:
    """Batches of 1-3 messages, round-robin over every queue of every topic: records of one
    queue are spread over several segments, interleaved with the others'."""
    queues = [(t, q) for t, n in TOPICS.items() for q in range(n)]
    for i in range(batches):
        topic, qid = queues[i % len(queues)]
        bodies = [f"{topic}-{qid}-{i}-{k}{tag}".encode().ljust(150, b".") for k in range(1 + i % 3)]
        store.append(topic, qid, bodies, tags=[f"T{i % 2}"] * len(bodies))
        sent.setdefault((topic, qid), []).extend(bodies)


def own_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture
def written(tmp_path):
    """A closed store: (its directory, {(topic, qid): bodies}, committed offsets)."""
    root = tmp_path / "store"
    sent: dict[tuple[str, int], list[bytes]] = {}
    committed = {"billing": {("orders", 0): 2, ("orders", 2): 1}, "audit": {("events", 1): 3}}
    with open_store(root) as store:
        for topic, queues in TOPICS.items():
            store.topics.create(topic, queues=queues)
        write_messages(store, sent)
        for group, offsets in committed.items():
            for (topic, qid), offset in offsets.items():
                store.offsets.commit(group, topic, {qid: offset})
        segments = len(store.commitlog.segments)
    assert segments >= 3, "the test needs records spread over several segments"
    assert len(list((root / "consumequeue" / "orders" / "0").iterdir())) >= 2
    return root, sent, committed


def read_queue(view: StoreView, topic: str, qid: int, max_bytes: int = 300) -> list[dict]:
    """Every row of a queue, read ``max_bytes`` at a time as a Spark reader would."""
    low, high = view.queue_range(topic, qid)
    rows, offset = [], low
    while offset < high:
        got = view.read_records(topic, qid, offset, high, max_bytes)
        batch = decode_records(got.buffer, sizes=got.sizes)
        assert batch.column("queueOffset").to_pylist() == list(range(offset, offset + got.count))
        rows.extend(batch.select(["topic", "queueId", "body", "tags"]).to_pylist())
        offset += got.count
    return rows


def test_every_queue_reads_back_what_was_written(written):
    root, sent, _ = written
    with StoreView.open(root) as view:
        assert set(view.topics()) == set(TOPICS)
        for topic, queues in TOPICS.items():
            assert view.queues(topic) == list(range(queues))
            for qid in range(queues):
                assert view.queue_range(topic, qid) == (0, len(sent[(topic, qid)]))
                rows = read_queue(view, topic, qid)
                assert [r["body"] for r in rows] == sent[(topic, qid)]
                assert {(r["topic"], r["queueId"]) for r in rows} == {(topic, qid)}


def test_entries_and_commit_log_agree_with_the_store(written):
    root, _, _ = written
    with open_store(root) as store:
        expected = store.get_messages("orders", 1, 0, max_count=1000)
        log_range = (store.commitlog.min_offset, store.commitlog.max_offset)
        files = sorted(p.name for p in (root / "commitlog").iterdir())
    with StoreView.open(root) as view:
        entries = view.entries("orders", 1, 0, 100)
        stored_at = decode_records(expected.data, sizes=expected.sizes).column("commitLogOffset")
        assert entries["physical_offset"].tolist() == stored_at.to_pylist()
        assert entries["size"].tolist() == expected.sizes.tolist()
        assert view.commitlog_range() == log_range
        segments = view.segments()
        assert [s.name for s in segments] == files
        assert all(a.start_offset + a.file_bytes == b.start_offset for a, b in pairwise(segments))
        assert segments[-1].start_offset + segments[-1].written_bytes == log_range[1]
        assert view.entries("orders", 1, 5, 7)["size"].tolist() == expected.sizes[5:7].tolist()


def test_read_records_stops_at_max_bytes_and_slices_the_map_when_it_can(tmp_path):
    with open_store(tmp_path / "s") as store:
        store.topics.create("one", queues=1)
        store.append("one", 0, [b"x" * 50] * 10)  # one batch: back to back in one segment
    with StoreView.open(tmp_path / "s") as view:
        whole = view.read_records("one", 0, 0, 10, max_bytes=1 << 20)
        assert whole.count == 10
        assert isinstance(whole.buffer.obj, mmap.mmap), "contiguous records are not copied"
        assert (
            decode_records(whole.buffer, sizes=whole.sizes)["body"].to_pylist() == [b"x" * 50] * 10
        )
        size = int(whole.sizes[0])
        part = view.read_records("one", 0, 2, 10, max_bytes=3 * size + 1)
        assert part.count == 3 and len(part.buffer) == 3 * size
        assert view.read_records("one", 0, 0, 10, max_bytes=1).count == 1  # at least one
        assert view.read_records("one", 0, 10, 20, max_bytes=1 << 20).count == 0


def test_descriptors_stay_bounded_however_many_segments_a_read_spans(tmp_path, monkeypatch):
    """A read over many segments keeps at most MAX_OPEN_SEGMENTS open, one descriptor each
    (the map's); a buffer returned earlier stays valid after its segment closed."""
    monkeypatch.setattr(offline, "MAX_OPEN_SEGMENTS", 4)
    bodies = [f"m{i}".encode().ljust(300, b".") for i in range(300)]
    with open_store(tmp_path / "s") as store:
        store.topics.create("long", queues=1)
        for i in range(0, len(bodies), 10):
            store.append("long", 0, bodies[i : i + 10])
        segments = len(store.commitlog.segments)
    assert segments > 20, "the test needs a read over many segments"
    before = own_descriptors()
    with StoreView.open(tmp_path / "s") as view:
        first = view.read_records("long", 0, 0, 1, max_bytes=1)
        read, offset, peak = [], 0, 0
        while offset < len(bodies):
            found = view.read_records("long", 0, offset, len(bodies), max_bytes=2048)
            read += decode_records(found.buffer, sizes=found.sizes)["body"].to_pylist()
            offset += found.count
            peak = max(peak, own_descriptors() - before)
        assert read == bodies
        # the segments open, and the first buffer's map, which it keeps alive
        assert peak <= 4 + 1, f"{peak} descriptors for {segments} segments"
        assert decode_records(first.buffer, sizes=first.sizes)["body"].to_pylist() == bodies[:1]
        del first, found
    assert own_descriptors() == before


def test_consumer_offsets_delay_progress_and_groups_are_the_stored_ones(written):
    root, _, committed = written
    config = root / "config"
    # the broker's schedule service and RocketMQ write these; fastjson's bare numeric keys
    (config / "delayOffset.json").write_text('{"offsetTable":{1:4,3:0}}')
    (config / "subscriptionGroup.json").write_text(
        '{"subscriptionGroupTable":{"billing":{"groupName":"billing","retryMaxTimes":16}},'
        '"dataVersion":{"counter":1,"timestamp":1}}'
    )
    with StoreView.open(root) as view:
        assert view.consumer_offsets() == committed
        assert view.delay_offsets() == {1: 4, 3: 0}
        assert view.subscription_groups() == ["billing"]
        checkpoints = view.checkpoints()
        assert checkpoints.rocketlite is not None
        assert checkpoints.rocketlite.safe_offset == view.commitlog_range()[1]
        kind, evidence = view.kind
        assert kind == "rocketlite" and "config/storeGeometry.json" in evidence
        assert view.geometry.commitlog_segment_bytes == 4096
        assert view.geometry.consumequeue_entries_per_file == 16
        assert not view.live and view.clean_shutdown


def test_nothing_in_the_directory_changes(written, capsys):
    root, _, _ = written
    before = snapshot(root)
    with StoreView.open(root) as view:
        for topic in view.topics():
            for qid in view.queues(topic):
                read_queue(view, topic, qid)
        view.consumer_offsets(), view.delay_offsets(), view.subscription_groups()
        view.checkpoints(), view.geometry, view.kind, view.segments()
    assert main(["store", "inspect", str(root)]) == 0
    assert main(["store", "inspect", str(root), "--json"]) == 0
    capsys.readouterr()
    assert snapshot(root) == before


def test_a_live_store_is_refused_unless_allowed_and_read_as_a_snapshot(tmp_path):
    root = tmp_path / "store"
    sent: dict[tuple[str, int], list[bytes]] = {}
    with open_store(root) as store:
        for topic, queues in TOPICS.items():
            store.topics.create(topic, queues=queues)
        write_messages(store, sent)
        store.offsets.commit("live-group", "orders", {0: 1})  # journaled, not compacted yet
        with pytest.raises(StoreLockedError, match=str(root)):
            StoreView.open(root)
        with StoreView.open(root, allow_live=True) as view:
            assert view.live and not view.clean_shutdown
            write_messages(store, {}, batches=6, tag="-later")  # after the view opened
            for (topic, qid), bodies in sent.items():
                assert [r["body"] for r in read_queue(view, topic, qid)] == bodies
            assert view.consumer_offsets() == {"live-group": {("orders", 0): 1}}
        with StoreView.open(root, allow_live=True) as again:
            assert again.queue_range("orders", 0)[1] > len(sent[("orders", 0)])
    with StoreView.open(root) as closed:  # the lock went with the store
        assert not closed.live


def test_entries_whose_record_was_never_written_are_not_served(written):
    root, sent, _ = written
    with StoreView.open(root) as view:
        log_end = view.commitlog_range()[1]
    # a crash: the consume queue got entries for records the commit log never received
    n = len(sent[("events", 0)])
    queue_dir = root / "consumequeue" / "events" / "0"
    last = max(queue_dir.iterdir(), key=lambda p: int(p.name))
    position = n * 20 - int(last.name)
    with open(last, "r+b") as f:
        f.seek(position)
        f.write(encode_entries([log_end, log_end + 200], [200, 200], [0, 0]))
    with StoreView.open(root) as view:
        assert view.queue_range("events", 0) == (0, n)
        assert [r["body"] for r in read_queue(view, "events", 0)] == sent[("events", 0)]


def test_records_deleted_by_retention_are_below_the_min(tmp_path):
    root = tmp_path / "store"
    sent: dict[tuple[str, int], list[bytes]] = {}
    with open_store(root, consumequeue_entries_per_file=64) as store:
        for topic, queues in TOPICS.items():
            store.topics.create(topic, queues=queues)
        write_messages(store, sent, batches=40)
        assert store.delete_expired_files(max_age_ms=0) >= 1
        mins = {key: store.min_offset(*key) for key in sent}
    assert any(mins.values()), "retention must have deleted records"
    with StoreView.open(root) as view:
        for (topic, qid), bodies in sent.items():
            low, high = view.queue_range(topic, qid)
            assert (low, high) == (mins[(topic, qid)], len(bodies))
            assert [r["body"] for r in read_queue(view, topic, qid)] == bodies[low:]
            if low:
                with pytest.raises(NotFoundError, match=f"start at {low}"):
                    view.read_records(topic, qid, low - 1, high, 1 << 20)


def test_a_topic_left_only_as_directories_is_listed(written):
    root, sent, _ = written
    with open_store(root) as store:
        store.topics.delete("events")  # its consume queues stay on disk
    with StoreView.open(root) as view:
        topics = view.topics()
        assert topics["orders"].configured and topics["orders"].read_queue_nums == 3
        assert not topics["events"].configured and topics["events"].perm is None
        assert view.queues("events") == [0, 1]
        assert [r["body"] for r in read_queue(view, "events", 1)] == sent[("events", 1)]
        with pytest.raises(NotFoundError, match="nope"):
            view.queues("nope")


def test_bad_directories_are_named(tmp_path, written):
    with pytest.raises(NotFoundError, match=str(tmp_path / "missing")):
        StoreView.open(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InvalidArgumentError, match="no commitlog/"):
        StoreView.open(tmp_path / "empty")
    root, _, _ = written
    for name in ("topics.json", "topics.json.bak"):
        (root / "config" / name).write_text('{"topicConfigTable": {')
    with StoreView.open(root) as view, pytest.raises(StoreError, match=r"topics\.json"):
        view.topics()


def test_inspect_prints_tables_and_one_json_document(written, capsys):
    root, sent, committed = written
    assert main(["store", "inspect", str(root), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["kind"] == "rocketlite" and report["live"] is False
    queues = {(t["topic"], q["queueId"]): q for t in report["topics"] for q in t["queues"]}
    assert {k: (q["min"], q["max"], q["messages"]) for k, q in queues.items()} == {
        k: (0, len(v), len(v)) for k, v in sent.items()
    }
    groups = {g["group"]: g for g in report["consumerGroups"]}
    billing = {
        (r["topic"], r["queueId"]): (r["committed"], r["lag"]) for r in groups["billing"]["offsets"]
    }
    assert billing == {
        key: (offset, len(sent[key]) - offset) for key, offset in committed["billing"].items()
    }
    rocketlite_cp = report["checkpoints"]["rocketlite"]
    assert rocketlite_cp["safeOffset"] == report["commitlog"]["maxOffset"]
    assert rocketlite_cp["physicMsgTimestampIso"].startswith("20")

    assert main(["store", "inspect", str(root)]) == 0
    text = capsys.readouterr().out
    assert "closed cleanly" in text and "written by rocketlite" in text
    header = next(line for line in text.splitlines() if line.startswith("group "))
    row = next(line for line in text.splitlines() if line.startswith("billing "))
    assert row.split() == ["billing", "orders", "0", "2", str(len(sent[("orders", 0)])),
                           str(len(sent[("orders", 0)]) - 2)]  # fmt: skip
    assert row.index("orders") == header.index("topic"), "columns are aligned"


def test_inspect_errors_are_one_line_with_the_path(tmp_path, written, capsys):
    assert main(["store", "inspect", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(tmp_path / "missing") in err
    root, _, _ = written
    for name in ("topics.json", "topics.json.bak"):
        (root / "config" / name).write_text("garbage")
    assert main(["store", "inspect", str(root)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "topics.json" in err and "Traceback" not in err


def test_record_offsets_inside_records_match_the_consume_queue(written):
    root, _, _ = written
    with StoreView.open(root) as view:
        got = view.read_records("orders", 2, 0, 100, 1 << 20)
        entries = view.entries("orders", 2, 0, got.count)
        batch = decode_records(got.buffer, sizes=got.sizes)
        assert batch.column("commitLogOffset").to_pylist() == entries["physical_offset"].tolist()
        assert np.array_equal(got.sizes, entries["size"].astype(np.int64))
        first = struct.unpack(">i", bytes(got.buffer[:4]))[0]
        assert first == got.sizes[0]
