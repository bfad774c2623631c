"""Crash safety of the store, tested the way stores fail in production.

* A real writer process (``tests/support/crash_writer.py``) appends in SYNC flush mode and
  is killed with SIGKILL at random moments, over and over, on the same directory. After
  every kill the store must hold every acknowledged message exactly, nothing torn, and
  consume queues that agree with the commit log.
* A crashed store's commit log is damaged by hand (torn tail, flipped body byte, overwritten
  magic code); recovery must cut exactly at the damaged record and the store must go on.
* A store directory is locked against a second opener, in this process or another one.
* verify_store reports damage that recovery does not look for.

Set RMQ_CRASH_SEED to replay a crash loop's choices (its kill timing still varies with the
machine) and RMQ_CRASH_ITERATIONS to change its length (a long loop outlasts the suite's
per-test timeout: pass ``--timeout 0``).
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from rmq_spark.codec import record as rec
from rmq_spark.codec.properties import decode_properties
from rmq_spark.errors import StoreLockedError
from rmq_spark.store import MessageStore
from rmq_spark.store.checkpoint import read_store_checkpoints
from rmq_spark.store.verify import verify_store
from rmq_spark.structs import PullStatus
from tests.support import crash_writer, scripts
from tests.support.crash_writer import TOPICS, batch_digest, expected_message
from tests.support.eventually import eventually

SEGMENT_BYTES = 64 * 1024
CQ_ENTRIES = 64  # 1,280-byte consume-queue files: a queue rolls every 64 messages
STARTUP_TIMEOUT_S = 30


def config(store_dir: Path, checkpoint_ms: int = 1000):
    return crash_writer.store_config(str(store_dir), SEGMENT_BYTES, CQ_ENTRIES, checkpoint_ms)


@dataclass(frozen=True)
class Ack:
    topic: str
    queue_id: int
    first: int
    count: int
    digest: str
    first_physical: int
    last_physical: int

    @property
    def end(self) -> int:
        return self.first + self.count


class Writer:
    """A crash_writer subprocess whose stdout lines are collected as they come."""

    def __init__(self, store_dir: Path, log_dir: Path, *, seed: int, **options) -> None:
        args = scripts.command("crash_writer", str(store_dir), "--seed", str(seed))
        args += ["--segment-bytes", str(SEGMENT_BYTES), "--cq-entries", str(CQ_ENTRIES)]
        for name, value in options.items():
            args += [f"--{name.replace('_', '-')}", str(value)]
        self.stderr_path = log_dir / f"writer-{time.monotonic_ns()}.err"
        with open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(
                args, stdout=subprocess.PIPE, stderr=err, env=scripts.env()
            )
        self.lines: list[bytes] = []
        self._seen: dict[str, threading.Event] = {
            word: threading.Event() for word in ("OPENING", "READY", "DONE")
        }
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in iter(self.proc.stdout.readline, b""):
            self.lines.append(line)
            word = line.split(b" ", 1)[0].strip().decode()
            if word in self._seen and line.endswith(b"\n"):
                self._seen[word].set()
        for event in self._seen.values():  # wake waiters: no more lines will come
            event.set()

    def wait_for(self, word: str) -> None:
        if not self._seen[word].wait(STARTUP_TIMEOUT_S) or not self.said(word):
            self.kill()
            pytest.fail(
                f"writer never said {word} (exit code {self.proc.returncode}); stderr:\n"
                + self.stderr_path.read_text(errors="replace")[-3000:]
            )

    def said(self, word: str) -> bool:
        return any(
            line == word.encode() + b"\n" or line.startswith(word.encode() + b" ")
            for line in self.lines
            if line.endswith(b"\n")
        )

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.wait()

    def wait(self, timeout: float | None = None) -> int:
        self.proc.wait(timeout)
        self._reader.join()
        assert self.proc.stdout is not None
        self.proc.stdout.close()
        return self.proc.returncode

    def acks(self) -> list[Ack]:
        """The acknowledgements; a line cut short by the kill acknowledges nothing."""
        acks = []
        for line in self.lines:
            if line.startswith(b"ACK ") and line.endswith(b"\n"):
                _, topic, qid, first, count, digest, p0, p1 = line.decode().split()
                acks.append(Ack(topic, int(qid), int(first), int(count), digest, int(p0), int(p1)))
        return acks


def expected_batch(ack: Ack) -> tuple[list[bytes], list[bytes]]:
    messages = [expected_message(ack.topic, ack.queue_id, ack.first + i) for i in range(ack.count)]
    return [m[0] for m in messages], [m[1] for m in messages]


def check_ack_digests(acks: list[Ack], context: str) -> None:
    """The writer wrote what expected_message says, so the test can check any record."""
    for ack in acks:
        assert batch_digest(*expected_batch(ack)) == ack.digest, f"{context}: {ack}"


def check_queue_contents(
    store: MessageStore, topic: str, queue_id: int, start: int, context: str
) -> int:
    """Read the queue from ``start`` to its end and compare every record with what the
    writer sent at that offset; returns the queue's max offset."""
    where = f"{context}, {topic}/{queue_id}"
    end = store.max_offset(topic, queue_id)
    assert store.min_offset(topic, queue_id) == 0, where
    offset = start
    while offset < end:
        result = store.get_messages(topic, queue_id, offset, max_count=4096, max_bytes=32 << 20)
        assert result.status is PullStatus.FOUND, f"{where}: reading offset {offset}"
        records = list(rec.iter_records(result.data))
        offsets = list(range(offset, offset + len(records)))
        assert [r.queue_offset for r in records] == offsets, where
        assert result.queue_offsets is not None
        assert result.queue_offsets.tolist() == offsets, where
        for r in records:
            body, properties, tag = expected_message(topic, queue_id, r.queue_offset)
            at = f"{where} offset {r.queue_offset} (physical {r.physical_offset})"
            assert (r.topic, r.queue_id) == (topic, queue_id), at
            assert r.body == body, f"{at}: wrong body"
            assert r.properties == properties, f"{at}: wrong properties"
            assert decode_properties(r.properties).get("TAGS") == tag, at
        offset = result.next_begin_offset
    return end


def all_queues() -> list[tuple[str, int]]:
    return [(topic, qid) for topic, n in TOPICS.items() for qid in range(n)]


# -- the crash loop ------------------------------------------------------------------------


@pytest.mark.slow
def test_sigkill_at_random_moments_loses_no_acknowledged_message_and_tears_nothing(tmp_path):
    """Kill a SYNC-mode writer again and again; after each kill every acknowledged message
    is there, every record present is whole and exactly what was sent at its offset, queues
    run from 0 without holes, and verify_store finds nothing.

    Most kills come 0.05-0.5 s after the writer says READY (starting the interpreter takes
    longer than that, so timing from the process start would mostly kill it during imports);
    one in five comes within 30 ms of OPENING, during or just after recovery.
    """
    seed = int(os.environ.get("RMQ_CRASH_SEED") or random.SystemRandom().randrange(1 << 32))
    iterations = int(os.environ.get("RMQ_CRASH_ITERATIONS", "15"))
    print(f"crash loop: RMQ_CRASH_SEED={seed} RMQ_CRASH_ITERATIONS={iterations}")
    rng = random.Random(seed)
    store_dir = tmp_path / "store"
    acked: dict[tuple[str, int], int] = {}  # queue -> end of its acknowledged messages
    checked: dict[tuple[str, int], int] = {}  # queue -> content checked up to here
    total_acks = kills_while_opening = 0
    for iteration in range(iterations):
        context = f"RMQ_CRASH_SEED={seed} iteration {iteration}"
        checkpoint_ms = rng.choice((20, 200, 1000))
        writer = Writer(store_dir, tmp_path, seed=rng.getrandbits(32), checkpoint_ms=checkpoint_ms)
        if rng.random() < 0.2:
            # Kill while it opens the store (recovery) or right after: recovery must survive
            # being interrupted itself.
            writer.wait_for("OPENING")
            delay = rng.uniform(0.0, 0.03)
        else:
            writer.wait_for("READY")
            delay = rng.uniform(0.05, 0.5)
        time.sleep(delay)
        writer.kill()
        acks = writer.acks()
        kills_while_opening += not writer.said("READY")
        check_ack_digests(acks, context)
        for ack in acks:
            key = (ack.topic, ack.queue_id)
            # Each batch starts where the store's queue ended, which is never before what
            # was acknowledged already (even across kills).
            assert ack.first >= acked.get(key, 0), f"{context}: {ack} rewrote acknowledged data"
            acked[key] = ack.end
        total_acks += len(acks)

        with MessageStore.open(config(store_dir)) as store:
            if writer.said("READY"):
                assert store.recovery is not None and store.recovery.abnormal, context
            report = verify_store(store)
            assert report.problems == [], f"{context}:\n{report.summary()}"
            for key in all_queues():
                if store.topics.find(key[0]) is None:  # killed before it created the topics
                    assert key not in acked, context
                    continue
                end = check_queue_contents(store, *key, checked.get(key, 0), context)
                assert end >= acked.get(key, 0), (
                    f"{context}: {key[0]}/{key[1]} ends at {end} but messages up to "
                    f"{acked[key]} were acknowledged"
                )
                checked[key] = end
        # Complete records of batches whose acknowledgement the kill prevented may stay.
        unacknowledged = sum(checked.values()) - sum(acked.values())
        print(
            f"{context}: killed {delay * 1000:.0f} ms after "
            f"{'READY' if writer.said('READY') else 'OPENING'}, {len(acks)} acknowledged "
            f"batches, {unacknowledged} unacknowledged messages present"
        )

    assert total_acks > iterations, "the writer must get appends in between the kills"
    # A last full pass: nothing checked in an early round was damaged by a later recovery.
    with MessageStore.open(config(store_dir)) as store:
        for key in all_queues():
            if key in checked:
                assert check_queue_contents(store, *key, 0, "final pass") == checked[key]
        report = verify_store(store)
        assert report.problems == [], report.summary()
        assert len(store.commitlog.segments) > 3, "the commit log must have rolled segments"
    print(
        f"{total_acks} acknowledged batches, {kills_while_opening} kills while opening; "
        f"{report.summary()}"
    )


# -- damaged commit logs -------------------------------------------------------------------


@pytest.fixture(scope="module")
def crashed_store(tmp_path_factory) -> tuple[Path, list[Ack]]:
    """A store left behind by a writer that was SIGKILLed after its last acknowledgement.

    A real process and a real kill are the most faithful way to get a crashed store: the
    abort file stays behind and nothing was closed. The writer is killed once its
    checkpoint (every 20 ms here) covers the last record: recovery must check the records
    of the checkpoint's segment anyway.
    """
    base = tmp_path_factory.mktemp("crashed")
    store_dir = base / "store"
    writer = Writer(store_dir, base, seed=20240611, batches=60, checkpoint_ms=20)
    writer.wait_for("DONE")
    last_record = writer.acks()[-1].last_physical

    def checkpointed() -> bool:
        ours = read_store_checkpoints(store_dir).rocketlite
        return ours is not None and ours.safe_offset > last_record

    eventually(checkpointed, what="a checkpoint past the last record", interval=0.01)
    writer.kill()
    acks = writer.acks()
    assert len(acks) == 60
    check_ack_digests(acks, "crashed store")
    assert (store_dir / "abort").exists()
    return store_dir, acks


@dataclass
class LastRecord:
    topic: str
    queue_id: int
    queue_offset: int
    physical_offset: int
    size: int
    segment: Path
    position: int  # within the segment file
    body_len: int


def last_record(store_dir: Path, acks: list[Ack]) -> LastRecord:
    ack = acks[-1]
    phys = ack.last_physical
    segments = sorted((store_dir / "commitlog").iterdir())
    segment = max((p for p in segments if int(p.name) <= phys), key=lambda p: int(p.name))
    position = phys - int(segment.name)
    with open(segment, "rb") as f:
        f.seek(position)
        size = struct.unpack(">i", f.read(4))[0]
        f.seek(position)
        record = rec.decode_record(f.read(size))
    assert record.physical_offset == phys and record.queue_offset == ack.end - 1
    return LastRecord(
        ack.topic, ack.queue_id, ack.end - 1, phys, size, segment, position, len(record.body)
    )


def copy_store(crashed_store, tmp_path) -> tuple[Path, list[Ack], LastRecord]:
    source, acks = crashed_store
    store_dir = tmp_path / "store"
    shutil.copytree(source, store_dir)
    (store_dir / "lock").unlink()  # the copy of a lock file is not a lock anyone holds
    return store_dir, acks, last_record(store_dir, acks)


def patch(path: Path, position: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        f.write(data)


def truncate_in_the_middle(last: LastRecord) -> None:
    os.truncate(last.segment, last.position + last.size // 2)


def flip_a_body_byte(last: LastRecord) -> None:
    assert last.body_len > 0, "the fixture's last message must have a body"
    at = last.position + 88 + last.body_len // 2  # IPv4 hosts: the body starts at 88
    with open(last.segment, "rb") as f:
        f.seek(at)
        byte = f.read(1)[0]
    patch(last.segment, at, bytes([byte ^ 0x40]))


def overwrite_the_magic(last: LastRecord) -> None:
    patch(last.segment, last.position + 4, struct.pack(">I", 0xDEADBEEF))


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (truncate_in_the_middle, ""),
        (flip_a_body_byte, "CRC"),
        (overwrite_the_magic, "magic 0xDEADBEEF"),
    ],
    ids=["truncated", "body-crc", "magic"],
)
def test_recovery_cuts_exactly_at_a_damaged_last_record(crashed_store, tmp_path, damage, reason):
    store_dir, acks, last = copy_store(crashed_store, tmp_path)
    damage(last)
    key = (last.topic, last.queue_id)

    with MessageStore.open(config(store_dir)) as store:
        report = store.recovery
        assert report is not None and report.abnormal
        assert report.end_offset == last.physical_offset
        assert report.stop_reason not in ("", "end")
        assert reason in report.stop_reason
        assert report.queues_truncated == {key: 1}
        assert store.commitlog.max_offset == last.physical_offset
        assert store.max_offset(*key) == last.queue_offset
        # Every earlier record is intact, in this queue and in all the others.
        ends = {(a.topic, a.queue_id): a.end for a in acks}
        ends[key] = last.queue_offset
        for topic, qid in ends:
            assert check_queue_contents(store, topic, qid, 0, damage.__name__) == ends[topic, qid]
        assert verify_store(store).problems == []

        # The store goes on: the next message takes the damaged one's queue offset and place.
        body, properties, _ = expected_message(*key, last.queue_offset)
        result = store.append(*key, [body], [properties])
        assert result.first_queue_offset == last.queue_offset
        assert int(result.physical_offsets[0]) == last.physical_offset
        more = [expected_message(*key, last.queue_offset + 1 + i) for i in range(30)]
        store.append(*key, [m[0] for m in more], [m[1] for m in more])
        assert check_queue_contents(store, *key, 0, damage.__name__) == last.queue_offset + 31
        sizes = {p.stat().st_size for p in (store_dir / "commitlog").iterdir()}
        assert sizes == {SEGMENT_BYTES}, "every commit-log segment keeps its full size"
        assert verify_store(store).problems == []

    # And all of it survives a clean restart.
    report = verify_store(config(store_dir))
    assert report.problems == [], report.summary()
    assert report.records == sum(a.count for a in acks) + 30


def test_a_write_cut_short_by_a_kill_leaves_no_torn_record(tmp_path):
    """SIGKILL can stop a write between two pages. BODYCRC covers only the body, so a record
    cut inside its properties would pass every check of recovery: the store must write so
    that such a record is never there to find."""
    store_dir = tmp_path / "store"
    writer = Writer(store_dir, tmp_path, seed=11, tear_after=25)
    assert writer.wait(timeout=60) == -signal.SIGKILL
    acks = writer.acks()
    assert len(acks) == 25
    torn = next(line for line in writer.lines if line.startswith(b"TEARING "))
    _, topic, qid, first, _ = torn.decode().split()
    key = (topic, int(qid))

    with MessageStore.open(config(store_dir)) as store:
        assert store.max_offset(*key) == int(first), "no message of the torn batch is visible"
        ends = {(a.topic, a.queue_id): a.end for a in acks}
        for (t, q), end in ends.items():
            assert check_queue_contents(store, t, q, 0, "torn write") == end
        report = verify_store(store)
        assert report.problems == [], report.summary()
        assert report.records == sum(a.count for a in acks)


def test_files_left_short_by_a_kill_while_creating_or_cutting_them_are_repaired(
    crashed_store, tmp_path
):
    """A kill between creating a file and sizing it leaves it empty; a kill inside
    recovery's truncation (shrink, then grow back) leaves it short. Either must not stop the
    store from opening, and the files get their full size back."""
    store_dir, acks, last = copy_store(crashed_store, tmp_path)
    next_segment = int(last.segment.name) + SEGMENT_BYTES
    (store_dir / "commitlog" / f"{next_segment:020d}").touch()
    queue_dir = store_dir / "consumequeue" / last.topic / str(last.queue_id)
    queue_files = sorted(queue_dir.iterdir())
    # Recovery cut this queue file right after its last entry and was killed before it
    # could grow the file back.
    os.truncate(queue_files[-1], (last.queue_offset + 1) * 20 - int(queue_files[-1].name))
    (queue_dir / f"{int(queue_files[-1].name) + CQ_ENTRIES * 20:020d}").touch()

    with MessageStore.open(config(store_dir)) as store:
        for ack in acks:
            assert store.max_offset(ack.topic, ack.queue_id) >= ack.end
        for topic, qid in {(a.topic, a.queue_id) for a in acks}:
            check_queue_contents(store, topic, qid, 0, "short files")
        more = [
            expected_message(last.topic, last.queue_id, last.queue_offset + 1 + i)
            for i in range(100)
        ]
        for i in range(0, len(more), 20):  # a batch must fit in one 64 KiB segment
            part = more[i : i + 20]
            store.append(last.topic, last.queue_id, [m[0] for m in part], [m[1] for m in part])
        check_queue_contents(store, last.topic, last.queue_id, 0, "short files")
        report = verify_store(store)
        assert report.problems == [], report.summary()
    assert {p.stat().st_size for p in (store_dir / "commitlog").iterdir()} == {SEGMENT_BYTES}
    assert {p.stat().st_size for p in queue_dir.iterdir()} == {CQ_ENTRIES * 20}


def test_a_crashed_store_recovers_with_nothing_lost(crashed_store, tmp_path):
    store_dir, acks, _ = copy_store(crashed_store, tmp_path)
    report = verify_store(config(store_dir))
    assert report.problems == [], report.summary()
    assert report.records == sum(a.count for a in acks)
    assert not (store_dir / "abort").exists(), "a clean close removes the abort file"


# -- the directory lock --------------------------------------------------------------------

OPEN_IN_CHILD = """
import sys
from rmq_spark.errors import StoreLockedError
from rmq_spark.store import MessageStore, StoreConfig
try:
    MessageStore.open(StoreConfig(sys.argv[1]))
except StoreLockedError as exc:
    print(exc)
    sys.exit(3)
print("opened")
"""


def test_a_store_cannot_be_opened_twice_in_one_process(tmp_path):
    store_dir = tmp_path / "store"
    with MessageStore.open(config(store_dir)) as store:
        store.topics.create("Locked", queues=1)
        with pytest.raises(StoreLockedError) as err:
            MessageStore.open(config(store_dir))
        assert str(store_dir) in str(err.value)
        assert f"pid {os.getpid()}" in str(err.value)
        # The failed attempt changed nothing for the owner.
        store.append("Locked", 0, [b"still mine"])
    with MessageStore.open(config(store_dir)) as store:
        assert store.max_offset("Locked", 0) == 1


def test_a_store_open_here_cannot_be_opened_by_another_process(tmp_path):
    store_dir = tmp_path / "store"
    with MessageStore.open(config(store_dir)):
        child = subprocess.run(
            [sys.executable, "-c", OPEN_IN_CHILD, str(store_dir)],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert child.returncode == 3, child.stdout + child.stderr
    assert str(store_dir) in child.stdout
    assert f"pid {os.getpid()}" in child.stdout
    assert "in use by another process" in child.stdout


def test_a_store_held_by_a_live_writer_is_refused_and_freed_by_its_death(tmp_path):
    store_dir = tmp_path / "store"
    writer = Writer(store_dir, tmp_path, seed=5, batches=3)
    try:
        writer.wait_for("DONE")
        with pytest.raises(StoreLockedError) as err:
            MessageStore.open(config(store_dir))
        assert str(store_dir) in str(err.value)
        assert f"pid {writer.proc.pid}" in str(err.value)
    finally:
        writer.kill()
    # The kernel drops a dead process's lock: no stale lock file blocks the restart.
    acks = writer.acks()
    with MessageStore.open(config(store_dir)) as store:
        for ack in acks:
            assert store.max_offset(ack.topic, ack.queue_id) >= ack.end


# -- what verify_store reports -------------------------------------------------------------


def test_verify_store_counts_a_consistent_store(crashed_store, tmp_path):
    store_dir, acks, _ = copy_store(crashed_store, tmp_path)
    report = verify_store(store_dir)  # a bare directory: sizes are taken from its files
    total = sum(a.count for a in acks)
    assert report.ok and report.problems == []
    assert (report.records, report.queue_entries, report.queues) == (
        total,
        total,
        len(all_queues()),
    )
    assert report.segments == len(list((store_dir / "commitlog").iterdir()))
    assert report.summary().endswith("consistent")


def test_verify_store_finds_a_damaged_record_that_recovery_does_not_rescan(crashed_store, tmp_path):
    """Recovery only rescans from the checkpoint's segment on; verify reads everything."""
    store_dir, acks, last = copy_store(crashed_store, tmp_path)
    first_segment = store_dir / "commitlog" / f"{0:020d}"
    assert first_segment != last.segment, "the damage must lie before the checkpoint's segment"
    first = acks[0]
    body, _, _ = expected_message(first.topic, first.queue_id, first.first)
    assert body, "the first message must have a body to damage"
    patch(first_segment, 88, bytes([body[0] ^ 0xFF]))

    report = verify_store(config(store_dir))
    assert not report.ok
    assert report.problems[0].startswith(
        "commit log: bad record at physical offset 0 (body CRC mismatch"
    )
    # The entries of the records it can no longer vouch for are named too.
    assert any("a position where no valid record starts" in p for p in report.problems)
    assert "problem(s):" in report.summary()


def test_verify_store_finds_consume_queue_entries_that_disagree_with_the_commit_log(
    crashed_store, tmp_path
):
    store_dir, _, _ = copy_store(crashed_store, tmp_path)
    entry = struct.Struct(">qiq")
    queue_root = store_dir / "consumequeue"

    def queue_file(topic: str, qid: int) -> Path:
        return queue_root / topic / str(qid) / f"{0:020d}"

    def read_entry(topic: str, qid: int, n: int) -> tuple[int, int, int]:
        with open(queue_file(topic, qid), "rb") as f:
            f.seek(n * 20)
            return entry.unpack(f.read(20))

    with MessageStore.open(config(store_dir)) as store:
        assert verify_store(store).ok
        end = store.commitlog.max_offset
        phys, size, code = read_entry("CrashOrders", 0, 3)
        patch(queue_file("CrashOrders", 0), 3 * 20, entry.pack(phys, size, code + 1))
        patch(queue_file("CrashOrders", 1), 5 * 20, bytes(20))
        patch(queue_file("CrashAudit", 0), 2 * 20, entry.pack(end + 100, size, code))
        other = read_entry("CrashAudit", 1, 0)
        patch(queue_file("Crash_Single-Queue", 0), 1 * 20, entry.pack(*other))
        problems = verify_store(store).problems

    assert any(
        p.startswith("queue CrashOrders/0: entry 3 is")
        and f"tag code {code + 1}) but its record is ({phys}, {size}, {code})" in p
        for p in problems
    ), problems
    assert "queue CrashOrders/1: no entry at offset 5 (holes in the queue)" in problems
    assert any(
        p.startswith("queue CrashAudit/0: entry 2 points at") and "outside the commit log" in p
        for p in problems
    ), problems
    assert any(
        p.startswith("queue Crash_Single-Queue/0: entry 1 is")
        and f"(physical offset {other[0]}, size {other[1]}," in p
        for p in problems
    ), problems
    # Entries moved out of place also break the queue's commit-log order.
    assert "queue CrashAudit/0: entries are not in commit-log order" in problems
    assert "queue Crash_Single-Queue/0: entries are not in commit-log order" in problems
    assert len(problems) == 6, problems


def test_verify_store_finds_leftover_data_after_the_end_of_the_commit_log(crashed_store, tmp_path):
    """Bytes past the end would be taken for records by the next crash recovery."""
    store_dir, _, last = copy_store(crashed_store, tmp_path)
    with MessageStore.open(config(store_dir)) as store:
        end = store.commitlog.max_offset
        segment = store.commitlog.segment_for(end)
        assert segment is not None
        with open(last.segment, "rb") as f:
            f.seek(last.position)
            record = f.read(last.size)
        patch(segment.path, end - segment.start_offset, record)
        problems = verify_store(store).problems
    assert problems == [
        f"the bytes after the end of the commit log (physical offset {end}) are not zero: "
        "a crash recovery could take them for records"
    ]
