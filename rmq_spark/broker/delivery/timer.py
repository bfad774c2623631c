"""Timer (delay) messages: RocketMQ 5's delivery at an arbitrary time in milliseconds.

A RocketMQ 5 DELAY message names its delivery time (``TIMER_DELIVER_MS``), not a level.
:meth:`TimerService.schedule` writes a batch due in the future, in one append, to queue 0
of the system topic ``rmq_sys_wheel_timer`` (created on demand), with ``REAL_TOPIC``,
``REAL_QID`` and ``TIMER_DELIVER_MS`` added; a batch whose time is not in the future goes
to its topic at once (with ``TIMER_DELIVER_MS``), as in RocketMQ. Times more than
``max_delay_ms`` (a day, the RocketMQ proxy's limit) ahead are refused.

One thread delivers: it keeps a heap of (delivery time, timer-queue offset) for every
waiting message and sleeps until the earliest falls due or a new one arrives. Due
messages go to their real queue in delivery-time order (ties in store order) through the
broker's single write path, with the body, flag, born host and time, reconsume count and
properties they were sent with, less ``REAL_TOPIC``/``REAL_QID`` and plus
``TIMER_ENQUEUE_MS`` (when the timer stored it) and ``TIMER_DEQUEUE_MS`` (when it
delivered it), as RocketMQ's TimerMessageStore does; ``TIMER_DELIVER_MS`` stays, so a reader
can tell a delay message. Delivery is at or after the asked time (RocketMQ rounds down to
its 1 s precision and may deliver up to a second early; this timer does not).

Durability. The heap lives in memory only; the timer queue itself holds the messages, and
the progress (:mod:`rmq_spark.broker.delivery.timer_progress`: every offset below a low-water mark,
plus the set delivered above it) is kept in ``config/timerProgress.json`` and the journal
``config/timerProgress.journal`` (one framed record per delivered batch, appended right
after the batch was stored; fdatasynced in SYNC flush mode). The journal is folded into
the JSON when it grows and at a clean stop. Starting reads the progress and rebuilds the
heap from the timer queue at the low-water mark, so what fell due while the broker was
down is delivered at once, late but not lost. A message is delivered exactly once across
clean stops and crashes, except when the process dies between storing a delivered batch
and journaling it (SIGKILL mid-delivery, or a power loss in ASYNC mode): that batch is
delivered again after the restart (at-least-once). A timer message removed by retention
before it fell due is lost, with an error logged.
"""

from __future__ import annotations

import heapq
import logging
import math
import threading
from bisect import bisect_left
from collections.abc import Callable, Sequence
from itertools import groupby
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rmq_spark.broker.delivery.schedule import (
    MAX_SLEEP_S,
    RETRY_BACKOFF_MS,
    Due,
    check_queue_id,
    decode_due,
    put_due,
    with_marks,
)
from rmq_spark.broker.delivery.timer_progress import (
    TimerProgress,
    encode_done,
    parse_done,
    progress_from_json,
)
from rmq_spark.clock import now_ms
from rmq_spark.codec.properties import (
    REAL_QID,
    REAL_TOPIC,
    TAGS,
    TIMER_DELIVER_MS,
    TIMER_DEQUEUE_MS,
    TIMER_ENQUEUE_MS,
    decode_properties,
    encode_properties,
)
from rmq_spark.codec.record import Record, iter_records
from rmq_spark.durable_json import read_json_with_backup, write_json_atomic
from rmq_spark.errors import InvalidArgumentError
from rmq_spark.names import TIMER_TOPIC
from rmq_spark.offsets.journal import OffsetJournal, read_journal
from rmq_spark.structs import PullStatus

if TYPE_CHECKING:
    from rmq_spark.broker.write_path import WritePath
    from rmq_spark.store import AppendResult

log = logging.getLogger("rmq_spark.broker")

TIMER_QUEUE = 0
PROGRESS_FILE = "timerProgress.json"
JOURNAL_FILE = "timerProgress.journal"
#: RocketMQ proxy's limit on how far ahead a delivery time may be (maxDelayTimeMills)
MAX_DELAY_MS = 24 * 3600 * 1000
#: due messages delivered per round (the heap is consulted again between rounds)
DELIVER_BATCH = 256
#: fold the journal into the JSON file once it is this long
COMPACT_JOURNAL_BYTES = 1 << 20

#: bookkeeping a message gets in the timer queue; replaced when it is scheduled again
_TIMER_MARKS = (REAL_TOPIC, REAL_QID, TIMER_DELIVER_MS, TIMER_ENQUEUE_MS, TIMER_DEQUEUE_MS)


class TimerService:
    """Holds timer messages in ``rmq_sys_wheel_timer`` and delivers each at its time.

    ``start()`` after the store is open, ``stop()`` before it closes.
    """

    def __init__(
        self,
        writes: WritePath,
        *,
        max_delay_ms: int = MAX_DELAY_MS,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self._writes = writes
        self.max_delay_ms = max_delay_ms
        self._clock = clock
        self._lock = threading.Lock()  # the heap, and creating the timer topic
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._heap: list[tuple[int, int]] = []  # (delivery ms, timer-queue offset)
        self._retry_at = 0  # no delivery before this (after a refused one)
        self._progress = TimerProgress()
        self._journal: OffsetJournal | None = None
        self._unjournaled: list[int] = []  # done, but the journal write failed
        self._failing = False  # the last delivery was refused
        self._dirty = False  # progress moved since the JSON file was written

    # -- public ------------------------------------------------------------------------------

    def start(self) -> None:
        """Load the progress, rebuild the waiting set from the timer queue, start delivering."""
        self._progress, journal_bytes = self._load_progress()
        self._dirty = journal_bytes > 0  # fold a journal left by a crash at the next stop
        self._journal = OffsetJournal(self._journal_path, sync=self._sync, keep_bytes=journal_bytes)
        self._rebuild()
        self._thread = threading.Thread(target=self._run, name="rmq-timer", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop delivering and fold the journal into the progress file; safe to call twice."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
            self._compact()
        if self._journal is not None:
            self._journal.close()
            self._journal = None

    def schedule(
        self,
        topic: str,
        queue_id: int,
        bodies: Sequence[bytes],
        properties: Sequence[bytes] | None,
        tags: Sequence[str | None],
        deliver_at_ms: int,
        **fields: Any,
    ) -> AppendResult:
        """Store a batch for delivery to ``topic``/``queue_id`` at ``deliver_at_ms``
        (wall-clock epoch ms). ``fields`` are :meth:`MessageStore.append`'s (born host and
        timestamps, flags, ...), kept on delivery.

        A future time: one append to the timer queue (the batch stays atomic); the result
        names that queue and its offsets. Otherwise the batch goes to ``topic`` at once.
        InvalidArgumentError for a time more than ``max_delay_ms`` ahead.
        """
        if not isinstance(deliver_at_ms, int) or isinstance(deliver_at_ms, bool):
            raise InvalidArgumentError(f"delivery time {deliver_at_ms!r} must be epoch ms")
        now = self._clock()
        if deliver_at_ms > now + self.max_delay_ms:
            raise InvalidArgumentError(
                f"delivery time {deliver_at_ms} is {deliver_at_ms - now} ms ahead; "
                f"the limit is {self.max_delay_ms} ms"
            )
        if properties is None:
            properties = [encode_properties({TAGS: t}) if t else b"" for t in tags]
        if deliver_at_ms <= now:
            stamp = encode_properties({TIMER_DELIVER_MS: str(deliver_at_ms)})
            marked = [with_marks(blob, stamp, _TIMER_MARKS) for blob in properties]
            return self._writes.put_messages(topic, queue_id, bodies, marked, tags, **fields)
        check_queue_id(self._writes.topic_for_write(topic), queue_id)
        self._ensure_topic()
        marks = encode_properties(
            {REAL_TOPIC: topic, REAL_QID: str(queue_id), TIMER_DELIVER_MS: str(deliver_at_ms)}
        )
        marked = [with_marks(blob, marks, _TIMER_MARKS) for blob in properties]
        result = self._writes.put_own(TIMER_TOPIC, TIMER_QUEUE, bodies, marked, tags, **fields)
        first = result.first_queue_offset
        with self._lock:
            for offset in range(first, first + result.count):
                heapq.heappush(self._heap, (deliver_at_ms, offset))
            self._wake.set()
        return result

    def pending(self) -> int:
        """Messages waiting in the timer, for statistics."""
        with self._lock:
            return len(self._heap)

    # -- the delivery thread -----------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            due: list[tuple[int, int]] = []
            with self._lock:
                self._wake.clear()  # under the lock: a later schedule's wake-up is not lost
                now = self._clock()
                if now >= self._retry_at:
                    while self._heap and self._heap[0][0] <= now and len(due) < DELIVER_BATCH:
                        due.append(heapq.heappop(self._heap))
                next_ms = self._heap[0][0] if self._heap else math.inf
            if due:
                self._deliver_safely(due, now)
                continue
            self._journal_unjournaled()
            if self._journal is not None and self._journal.size >= COMPACT_JOURNAL_BYTES:
                self._compact()
            sleep_ms = max(next_ms, self._retry_at) - self._clock()
            if sleep_ms > 0:
                self._wake.wait(min(sleep_ms / 1000, MAX_SLEEP_S))

    def _deliver_safely(self, due: list[tuple[int, int]], now: int) -> None:
        left = list(due)  # what is not done yet, in delivery order
        try:
            self._deliver(left, now)
        except Exception:
            if not self._stop.is_set():
                log.exception("delivering timer messages failed; retrying shortly")
            self._retry_at = now + RETRY_BACKOFF_MS
        if left:
            with self._lock:
                for item in left:
                    heapq.heappush(self._heap, item)

    def _deliver(self, left: list[tuple[int, int]], now: int) -> None:
        """Deliver ``left`` in order, removing each from it once done."""
        records = self._read(sorted(offset for _, offset in left))
        extra = {TIMER_DEQUEUE_MS: str(now)}
        decoded: list[tuple[int, Due | None]] = []
        for _, offset in left:
            record = records.get(offset)
            if record is None:
                log.error(
                    "timer message at %s offset %d is gone (removed by retention?) before "
                    "it fell due; it is lost",
                    TIMER_TOPIC,
                    offset,
                )
                decoded.append((offset, None))
                continue
            extra[TIMER_ENQUEUE_MS] = str(record.store_timestamp)
            drop = (REAL_TOPIC, REAL_QID)
            decoded.append((offset, decode_due(record, drop=drop, extra=extra, what=TIMER_TOPIC)))
        for _, run in groupby(decoded, key=lambda pair: pair[1] and pair[1].batch_key):
            batch = list(run)
            dues = [d for _, d in batch if d is not None]
            if dues:
                error = put_due(self._writes, dues)
                if error is not None:
                    if not self._failing:
                        self._failing = True
                        log.warning(
                            "cannot deliver timer messages to %s queue %d yet (%s); retrying "
                            "every %d ms",
                            dues[0].topic,
                            dues[0].queue_id,
                            error,
                            RETRY_BACKOFF_MS,
                        )
                    self._retry_at = now + RETRY_BACKOFF_MS
                    return
                if self._failing:
                    self._failing = False
                    log.info("delivering timer messages again")
            self._mark_done([offset for offset, _ in batch])
            del left[: len(batch)]

    def _read(self, offsets: list[int]) -> dict[int, Record]:
        """The timer-queue records at ``offsets`` (sorted) that the queue still holds."""
        store = self._writes.store
        wanted = set(offsets)
        found: dict[int, Record] = {}
        pos = 0
        while pos < len(offsets):
            start = offsets[pos]
            count = min(DELIVER_BATCH, offsets[-1] - start + 1)
            got = store.get_messages(TIMER_TOPIC, TIMER_QUEUE, start, max_count=count)
            if got.status == PullStatus.FOUND:
                for record in iter_records(got.data, check_crc=False):
                    if record.queue_offset in wanted:
                        found[record.queue_offset] = record
            end = got.next_begin_offset if got.next_begin_offset > start else start + 1
            pos = bisect_left(offsets, end, lo=pos + 1)
        return found

    def _mark_done(self, offsets: list[int]) -> None:
        self._progress.mark(offsets)
        self._dirty = True
        self._unjournaled += offsets
        self._journal_unjournaled()

    def _journal_unjournaled(self) -> None:
        if not self._unjournaled or self._journal is None:
            return
        try:
            end = self._journal.append(encode_done(self._unjournaled))
            self._journal.make_durable(end)
        except OSError:
            log.exception(
                "cannot journal %d delivered timer message(s) in %s; trying again (a crash "
                "before that would deliver them again)",
                len(self._unjournaled),
                self._journal_path,
            )
            return
        self._unjournaled = []

    # -- topic and progress ------------------------------------------------------------------

    @property
    def _sync(self) -> bool:
        return self._writes.store.config.flush_mode == "SYNC"

    @property
    def _progress_path(self) -> Path:
        return self._writes.store.config.config_dir / PROGRESS_FILE

    @property
    def _journal_path(self) -> Path:
        return self._writes.store.config.config_dir / JOURNAL_FILE

    def _ensure_topic(self) -> None:
        topics = self._writes.store.topics
        if topics.find(TIMER_TOPIC) is not None:
            return
        with self._lock:
            if topics.find(TIMER_TOPIC) is None:
                topics.create(TIMER_TOPIC, 1, system=True)
                log.info("created the timer topic %s", TIMER_TOPIC)

    def _load_progress(self) -> tuple[TimerProgress, int]:
        """The saved progress with the journal replayed, and the journal's intact length."""
        document, _ = read_json_with_backup(self._progress_path, validate=progress_from_json)
        progress = progress_from_json(document) if document is not None else TimerProgress()
        done_lists, journal_bytes = read_journal(self._journal_path, parse_done)
        for done in done_lists:
            progress.mark(done)
        return progress, journal_bytes

    def _rebuild(self) -> None:
        """Fill the heap with every message of the timer queue not yet delivered."""
        store = self._writes.store
        if store.topics.find(TIMER_TOPIC) is None:
            return
        low = store.min_offset(TIMER_TOPIC, TIMER_QUEUE)
        high = store.max_offset(TIMER_TOPIC, TIMER_QUEUE)
        progress = self._progress
        if progress.low > high or any(o >= high for o in progress.done):
            log.warning(
                "timer progress reaches past the end of %s (offset %d); forgetting it there",
                TIMER_TOPIC,
                high,
            )
            progress.cut_at(high)
        if progress.low < low:
            log.error(
                "timer messages at %s offsets %d..%d were removed by retention before they "
                "were delivered; they are lost",
                TIMER_TOPIC,
                progress.low,
                low - 1,
            )
            progress.skip_below(low)
        offset = progress.low
        while offset < high:
            got = store.get_messages(TIMER_TOPIC, TIMER_QUEUE, offset, max_count=DELIVER_BATCH)
            if got.status != PullStatus.FOUND:
                break
            for record in iter_records(got.data, check_crc=False):
                if not progress.is_done(record.queue_offset):
                    self._heap.append((_deliver_ms(record), record.queue_offset))
            offset = got.next_begin_offset
        heapq.heapify(self._heap)
        if self._heap:
            log.info("timer: %d message(s) waiting in %s", len(self._heap), TIMER_TOPIC)

    def _compact(self) -> None:
        """Write the progress to the JSON file, then empty the journal it covers (a crash
        in between replays the journal over the newer file, which changes nothing)."""
        if not self._dirty:
            return
        try:
            write_json_atomic(
                self._progress_path, self._progress.to_json(), validate=progress_from_json
            )
        except Exception:
            log.exception("cannot write the timer progress %s; trying again", self._progress_path)
            return
        self._unjournaled = []
        self._dirty = False
        if self._journal is not None:
            try:
                self._journal.truncate()
            except OSError:
                log.exception("cannot empty %s; it is replayed at start", self._journal_path)


def _deliver_ms(record: Record) -> int:
    """A timer record's delivery time (0, i.e. at once, if it has none)."""
    text = decode_properties(record.properties).get(TIMER_DELIVER_MS, "")
    if text.isdigit():
        return int(text)
    log.error(
        "timer record at physical offset %d has no valid %s; delivering it now",
        record.physical_offset,
        TIMER_DELIVER_MS,
    )
    return 0
