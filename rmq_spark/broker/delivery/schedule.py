"""Delayed delivery: RocketMQ's ScheduleMessageService.

A message sent with delay level L (1-based) is not stored in its topic at once. It goes to
queue ``L - 1`` of the system topic ``SCHEDULE_TOPIC_XXXX`` with three properties added:
``REAL_TOPIC`` and ``REAL_QID`` (where it belongs) and ``DELAY`` (its level). Each schedule
queue holds one level, so its messages fall due in the order they were stored: a message is
due at its store timestamp plus the level's delay. One thread delivers due messages of every
level to their real queue through the broker's single write path, with the body and
properties they had (``DELAY`` removed; ``UNIQ_KEY``, ``RECONSUME_TIME`` and the rest kept,
``REAL_TOPIC``/``REAL_QID`` too, as RocketMQ does), then sleeps until the next message falls
due or a new one arrives. It never polls in a busy loop.

Progress (the next schedule-queue offset per level) is written durably to
``config/delayOffset.json`` after every round that delivered something and at shutdown, so a
restart neither loses pending messages nor delivers again what was delivered before the last
write (only a crash between a delivery and that write repeats it, at-least-once).

A level above the configured count is lowered to the highest level, as RocketMQ does.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from itertools import groupby, takewhile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rmq_spark.clock import now_ms
from rmq_spark.codec.properties import (
    DELAY,
    REAL_QID,
    REAL_TOPIC,
    TAGS,
    decode_properties,
    encode_properties,
)
from rmq_spark.codec.record import Record, iter_records
from rmq_spark.durable_json import read_json_with_backup, write_json_atomic
from rmq_spark.errors import (
    InvalidArgumentError,
    NotFoundError,
    ReservedTopicError,
    RocketliteError,
)
from rmq_spark.names import SCHEDULE_TOPIC
from rmq_spark.store.config_files import (
    DELAY_OFFSETS_FILE,
    delay_offsets_from_json,
    delay_offsets_to_json,
)
from rmq_spark.structs import PullStatus

if TYPE_CHECKING:
    from rmq_spark.broker.write_path import WritePath
    from rmq_spark.store import AppendResult
    from rmq_spark.store.topics import TopicConfig

log = logging.getLogger("rmq_spark.broker")

FILE_NAME = DELAY_OFFSETS_FILE
#: schedule-queue records read (and at most delivered) per level per round
DELIVER_BATCH = 256
#: wait before trying again after a delivery the broker refused (read-only, disk full)
RETRY_BACKOFF_MS = 1000
#: longest sleep; bounds the effect of a wall-clock jump on due times
MAX_SLEEP_S = 1.0

_SCHEDULE_MARKS = (DELAY, REAL_TOPIC, REAL_QID)


@dataclass(frozen=True)
class Due:
    """A due record of a waiting topic (schedule or timer), decoded into what its delivery
    needs: the real topic and queue, and the properties it is delivered with."""

    record: Record
    topic: str
    queue_id: int
    properties: bytes
    tag: str | None

    @property
    def batch_key(self) -> tuple[str, int, str, int]:
        # Records delivered in one append must share what an append sets once per batch.
        return (self.topic, self.queue_id, self.record.born_host, self.record.sysflag)


class DelayScheduler:
    """Holds delayed messages in ``SCHEDULE_TOPIC_XXXX`` and delivers them when due.

    ``levels_ms[i]`` is the delay of level ``i + 1``. ``start()`` after the store is open,
    ``stop()`` before it closes.
    """

    def __init__(
        self, writes: WritePath, levels_ms: Sequence[int], *, clock: Callable[[], int] = now_ms
    ) -> None:
        if not levels_ms or any(ms <= 0 for ms in levels_ms):
            raise InvalidArgumentError(f"delay levels {list(levels_ms)!r} must be positive ms")
        self._writes = writes
        self.levels_ms = list(levels_ms)
        self._clock = clock
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # One entry per schedule queue (level - 1); the topic may hold more queues than
        # levels are configured now, and those are still delivered, with the longest delay.
        self._queue_delays_ms: list[int] = []
        self._offsets: list[int] = []  # next schedule-queue offset to deliver
        self._persisted: list[int] = []
        self._next_due_ms: list[float] = []  # loop thread only
        self._hints_ms: list[float] = []  # earliest due time submitted since the last look
        self._failing: set[int] = set()

    # -- public ------------------------------------------------------------------------------

    @property
    def max_level(self) -> int:
        return len(self.levels_ms)

    def clamp_level(self, level: int) -> int:
        """The level a request for ``level`` gets: above the highest, the highest."""
        if not isinstance(level, int) or level < 1:
            raise InvalidArgumentError(
                f"delay level {level!r} must be 1..{self.max_level} (0 means no delay)"
            )
        return min(level, self.max_level)

    def delay_ms(self, level: int) -> int:
        return self.levels_ms[self.clamp_level(level) - 1]

    def start(self) -> None:
        """Create the schedule topic if needed, load progress and start delivering."""
        self._ensure_topic()
        self._offsets = self._load_offsets()
        self._persisted = list(self._offsets)
        count = len(self._queue_delays_ms)
        self._next_due_ms = [0.0] * count  # look at every queue in the first round
        self._hints_ms = [math.inf] * count
        self._thread = threading.Thread(target=self._run, name="rmq-delay", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop delivering and write the progress; safe to call twice."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
            self._persist()

    def submit(
        self,
        topic: str,
        queue_id: int,
        bodies: Sequence[bytes],
        properties: Sequence[bytes] | None,
        tags: Sequence[str | None],
        delay_level: int,
        **fields: Any,
    ) -> AppendResult:
        """Store a batch for delivery to ``topic``/``queue_id`` after ``delay_level``'s delay.

        One append into the level's schedule queue, so the batch stays atomic; the result
        names that queue and its offsets. Level 0 writes to ``topic`` at once.
        """
        if properties is None:
            properties = [encode_properties({TAGS: t}) if t else b"" for t in tags]
        if delay_level == 0:
            return self._writes.put_messages(topic, queue_id, bodies, properties, tags, **fields)
        level = self.clamp_level(delay_level)
        config = self._writes.topic_for_write(topic)
        check_queue_id(config, queue_id)
        marks = encode_properties({DELAY: str(level), REAL_TOPIC: topic, REAL_QID: str(queue_id)})
        marked = [with_marks(blob, marks, _SCHEDULE_MARKS) for blob in properties]
        # The entries hold the delivery time (store time + the level's delay), as RocketMQ's.
        result = self._writes.put_own(
            SCHEDULE_TOPIC,
            level - 1,
            bodies,
            marked,
            tags,
            delivery_delay_ms=self.levels_ms[level - 1],
            **fields,
        )
        with self._lock:
            if self._hints_ms:
                due = result.store_timestamp + self.levels_ms[level - 1]
                self._hints_ms[level - 1] = min(self._hints_ms[level - 1], due)
                self._wake.set()
        return result

    def pending(self) -> dict[int, int]:
        """Messages waiting per level (schedule queue index + 1), for statistics."""
        store = self._writes.store
        return {
            qid + 1: store.max_offset(SCHEDULE_TOPIC, qid) - offset
            for qid, offset in enumerate(list(self._offsets))
        }

    # -- the delivery thread -----------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                for qid, hint in enumerate(self._hints_ms):
                    self._next_due_ms[qid] = min(self._next_due_ms[qid], hint)
                    self._hints_ms[qid] = math.inf
                self._wake.clear()  # under the lock: a later submit's wake-up is not lost
            now = self._clock()
            for qid, due in enumerate(self._next_due_ms):
                if due <= now and not self._stop.is_set():
                    self._next_due_ms[qid] = self._deliver_queue_safely(qid, now)
            self._persist()
            sleep_ms = min(self._next_due_ms) - self._clock()
            if sleep_ms > 0:
                self._wake.wait(min(sleep_ms / 1000, MAX_SLEEP_S))

    def _deliver_queue_safely(self, qid: int, now: int) -> float:
        try:
            return self._deliver_queue(qid, now)
        except Exception:
            if self._stop.is_set():
                return math.inf
            log.exception("delivering delay level %d failed; retrying shortly", qid + 1)
            return now + RETRY_BACKOFF_MS

    def _deliver_queue(self, qid: int, now: int) -> float:
        """Deliver the due messages of one schedule queue; returns when to look again."""
        delay = self._queue_delays_ms[qid]
        got = self._writes.store.get_messages(
            SCHEDULE_TOPIC, qid, self._offsets[qid], max_count=DELIVER_BATCH
        )
        if got.status == PullStatus.OFFSET_ILLEGAL:
            log.warning(
                "delay level %d: offset %d is outside [%d, %d]; continuing from %d",
                qid + 1,
                self._offsets[qid],
                got.min_offset,
                got.max_offset,
                got.next_begin_offset,
            )
            self._offsets[qid] = got.next_begin_offset
            return now
        if got.status != PullStatus.FOUND:
            return math.inf
        records = list(iter_records(got.data, check_crc=False))
        due = list(takewhile(lambda r: r.store_timestamp + delay <= now, records))
        decoded = (decode_due(r, drop=(DELAY,), what="schedule") for r in due)
        for _, run in groupby(filter(None, decoded), key=lambda d: d.batch_key):
            batch = list(run)
            if not self._put(qid, batch):
                return now + RETRY_BACKOFF_MS
            self._offsets[qid] = batch[-1].record.queue_offset + 1
        if due:  # skipped (undecodable) records at the end still count as done
            self._offsets[qid] = max(self._offsets[qid], due[-1].queue_offset + 1)
        if len(due) < len(records):
            return records[len(due)].store_timestamp + delay
        return now if got.next_begin_offset < got.max_offset else math.inf

    def _put(self, qid: int, batch: list[Due]) -> bool:
        """Append one run of due messages to their real queue. False: try again later."""
        error = put_due(self._writes, batch)
        if error is not None:
            if qid not in self._failing:
                log.warning(
                    "delay level %d: cannot deliver to %s queue %d yet (%s); retrying every %d ms",
                    qid + 1,
                    batch[0].topic,
                    batch[0].queue_id,
                    error,
                    RETRY_BACKOFF_MS,
                )
                self._failing.add(qid)
            return False
        if qid in self._failing:
            self._failing.discard(qid)
            log.info("delay level %d: delivering again", qid + 1)
        return True

    # -- topic and progress ------------------------------------------------------------------

    def _ensure_topic(self) -> None:
        topics = self._writes.store.topics
        wanted = len(self.levels_ms)
        config = topics.find(SCHEDULE_TOPIC)
        if config is None:
            config = topics.create(SCHEDULE_TOPIC, wanted)
            log.info("created %s with %d queues (one per delay level)", SCHEDULE_TOPIC, wanted)
        elif min(config.read_queue_nums, config.write_queue_nums) < wanted:
            config = topics.update(SCHEDULE_TOPIC, queues=wanted)
        count = max(config.read_queue_nums, config.write_queue_nums, wanted)
        if count > wanted:
            log.warning(
                "%s has %d queues but %d delay levels are configured; messages in the extra "
                "queues are delivered after the longest delay",
                SCHEDULE_TOPIC,
                count,
                wanted,
            )
        self._queue_delays_ms = self.levels_ms + [self.levels_ms[-1]] * (count - wanted)

    @property
    def _path(self) -> Path:
        return self._writes.store.config.config_dir / FILE_NAME

    def _load_offsets(self) -> list[int]:
        document, _ = read_json_with_backup(self._path, validate=delay_offsets_from_json)
        saved = delay_offsets_from_json(document) if document is not None else {}
        store = self._writes.store
        offsets = []
        for qid in range(len(self._queue_delays_ms)):
            low = store.min_offset(SCHEDULE_TOPIC, qid)
            high = store.max_offset(SCHEDULE_TOPIC, qid)
            offset = saved.get(qid + 1, low)
            if not low <= offset <= high:
                log.warning(
                    "delay level %d: saved progress %d is outside the schedule queue [%d, %d]; "
                    "continuing from %d",
                    qid + 1,
                    offset,
                    low,
                    high,
                    min(max(offset, low), high),
                )
                offset = min(max(offset, low), high)
            offsets.append(offset)
        return offsets

    def _persist(self) -> None:
        """Write the progress if it moved (called by the delivery thread, or after it ends)."""
        if self._offsets == self._persisted:
            return
        snapshot = list(self._offsets)
        try:
            write_json_atomic(
                self._path, delay_offsets_to_json(snapshot), validate=delay_offsets_from_json
            )
        except Exception:  # the delivery thread must go on; the next round tries again
            log.exception("cannot write %s; will try again after the next delivery", self._path)
            return
        self._persisted = snapshot


def check_queue_id(config: TopicConfig, queue_id: object) -> None:
    """InvalidArgumentError unless ``queue_id`` is one of the topic's write queues."""
    if not isinstance(queue_id, int) or not 0 <= queue_id < config.write_queue_nums:
        raise InvalidArgumentError(
            f"queue id {queue_id!r} is out of range for topic {config.name!r}: it has "
            f"{config.write_queue_nums} write queues"
        )


def with_marks(blob: bytes, marks: bytes, names: Collection[str]) -> bytes:
    """``blob`` with the properties ``names`` replaced by ``marks`` (encoded properties)."""
    if any(name.encode() + b"\x01" in blob for name in names):
        # A copy that went through a waiting topic before (a retried message).
        props = decode_properties(blob)
        for name in names:
            props.pop(name, None)
        blob = encode_properties(props)
    return blob + marks


def decode_due(
    record: Record,
    *,
    drop: Collection[str],
    extra: Mapping[str, str] | None = None,
    what: str,
) -> Due | None:
    """What delivering ``record`` (waiting in the ``what`` topic) needs: its real topic and
    queue from ``REAL_TOPIC``/``REAL_QID``, its properties without ``drop`` and with
    ``extra``. None (logged) when it names no valid destination."""
    props = decode_properties(record.properties)
    topic = props.get(REAL_TOPIC)
    qid_text = props.get(REAL_QID, "")
    if not topic or not qid_text.isdigit():
        log.error(
            "%s record at physical offset %d has no valid %s/%s; skipping it",
            what,
            record.physical_offset,
            REAL_TOPIC,
            REAL_QID,
        )
        return None
    for name in drop:
        props.pop(name, None)
    if extra:
        props.update(extra)
    return Due(record, topic, int(qid_text), encode_properties(props), props.get(TAGS))


def put_due(writes: WritePath, batch: Sequence[Due]) -> RocketliteError | None:
    """Append one run of due messages (one :attr:`Due.batch_key`) to their real queue with
    their body, flag, born host and time and reconsume count. None when done, including
    when the destination is gone (topic deleted, queues shrunk: logged and dropped, as
    waiting will not help); else the error that refused it, to try again later."""
    first = batch[0]
    try:
        writes.put_messages(
            first.topic,
            first.queue_id,
            [d.record.body for d in batch],
            [d.properties for d in batch],
            [d.tag for d in batch],
            born_host=first.record.born_host,
            born_timestamps=[d.record.born_timestamp for d in batch],
            flags=[d.record.flag for d in batch],
            reconsume_times=[d.record.reconsume_times for d in batch],
            sysflag=first.record.sysflag,
        )
    except (NotFoundError, InvalidArgumentError, ReservedTopicError) as exc:
        log.error(
            "dropping %d delayed message(s) for %s queue %d: %s",
            len(batch),
            first.topic,
            first.queue_id,
            exc,
        )
    except RocketliteError as exc:
        return exc
    return None
