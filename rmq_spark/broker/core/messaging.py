"""The broker core's operations, the ones every front-end calls: rocketlite.v1 and RocketMQ 5
over gRPC and RocketMQ's remoting protocol each decode a request, call :class:`MessagingCore`
and encode its answer, so a capability is written once and reads the same in every
protocol.

* reads: :meth:`~MessagingCore.check_readable`, :meth:`~MessagingCore.read` and
  :meth:`~MessagingCore.pull`, a read held until a message passing its filter arrives
  (long polling, the one place a new filter kind plugs in), and
  :meth:`~MessagingCore.read_filter`, the one decoder of a subscription's filter;
* offsets: commit, query, the queue's range, search by time;
* send-backs: the record a consumer gives back, and its copy to the group's retry or
  dead-letter topic;
* look-up by key.

Writes go through :class:`~rmq_spark.broker.write_path.WritePath` (``writes``); membership
and queue locks are :mod:`rmq_spark.broker.membership`'s, reached from the broker.

Errors are :mod:`rmq_spark.errors` classes; each front-end turns them into its codes with
the one table in :mod:`rmq_spark.broker.core.errors`.
"""

from __future__ import annotations

import shutil
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from rmq_spark.broker import long_poll
from rmq_spark.broker.config import BrokerConfig
from rmq_spark.broker.core.key_query import KeyMatches, find_by_key
from rmq_spark.broker.delivery import retry
from rmq_spark.broker.delivery.schedule import DelayScheduler
from rmq_spark.broker.long_poll import PullNotifier
from rmq_spark.broker.membership.filters import SubscriptionFilter, read_filter
from rmq_spark.broker.membership.subscription_groups import SubscriptionGroups
from rmq_spark.broker.write_path import WritePath
from rmq_spark.codec.properties import RETRY_TOPIC
from rmq_spark.codec.record import (
    FIXED_WITHOUT_HOSTS,
    IPV4_HOST,
    POS_PHYSICALOFFSET,
    Record,
    decode_record,
    offset_msg_id,
)
from rmq_spark.errors import NotFoundError, PermissionDeniedError
from rmq_spark.filter import Selector
from rmq_spark.histogram import HistogramSnapshot
from rmq_spark.names import DLQ_PREFIX, RETRY_PREFIX
from rmq_spark.offsets.broker_table import ConsumerOffsetTable
from rmq_spark.store import AppendResult, MessageStore
from rmq_spark.store.config import StoreConfig
from rmq_spark.store.file_ranges import RangeFiles
from rmq_spark.store.index import MessageIndex
from rmq_spark.store.message_store import GetResult
from rmq_spark.store.sizes import RangeSize
from rmq_spark.store.topics import TopicConfig, TopicTable
from rmq_spark.structs import Permission, PullStatus

__all__ = [
    "AppendResult",
    "GetResult",
    "MessagingCore",
    "Read",
    "Storage",
    "SubscriptionFilter",
    "TopicConfig",
]

#: the smallest record: empty body, topic and properties, IPv4 hosts
MIN_RECORD_BYTES = FIXED_WITHOUT_HOSTS + 2 * IPV4_HOST
#: how many store times of messages by queue offset are kept (then they are forgotten)
STORE_TIMES_KEPT = 100_000
#: read answers that move a group's reads along (and count what they hand out)
_COUNTED = frozenset({PullStatus.FOUND, PullStatus.NO_MATCHED_MSG})
#: hands blocking store work to the broker's worker threads (``Workers.run``)
Run = Callable[..., Awaitable[Any]]


@dataclass(frozen=True)
class Storage:
    """The store's size and health at one moment."""

    commitlog_bytes: int
    flush_behind_bytes: int
    disk_total_bytes: int
    disk_free_bytes: int
    disk_full: bool
    failure: BaseException | None
    #: how long the commit log's flushes took, in ms
    flush_ms: HistogramSnapshot
    queues: int


@dataclass(frozen=True)
class Read:
    """One read of a queue: from ``offset``, at most ``max_count`` messages and about
    ``max_bytes``, only those whose tag hash is in ``tag_codes`` (None: every message) and
    that ``selector`` picks by their properties (SQL92; None: every message), for
    consumer ``group`` ("" when the reader names none; it is what the statistics count
    the messages out under)."""

    topic: str
    queue_id: int
    offset: int
    max_count: int
    max_bytes: int
    tag_codes: list[int] | None = None
    selector: Selector | None = None
    group: str = ""


class MessagingCore:
    """The protocol-neutral operations over one broker's store and services."""

    def __init__(
        self,
        config: BrokerConfig,
        store: MessageStore,
        writes: WritePath,
        notifier: PullNotifier,
        delays: DelayScheduler,
        subscription_groups: SubscriptionGroups,
    ) -> None:
        self._config = config
        self._store = store
        self.writes = writes
        self._notifier = notifier
        self._delays = delays
        self._subscription_groups = subscription_groups
        #: store times of messages looked up by queue offset (see queue_store_timestamp)
        self._store_times: dict[tuple[str, int, int], int] = {}
        #: the broker's counters (messages out are counted by :meth:`read`)
        self.counters = writes.stats

    @property
    def name(self) -> str:
        return self._config.name

    # -- reads ------------------------------------------------------------------------------

    @property
    def topics(self) -> TopicTable:
        """This broker's topic table (topics.json)."""
        return self._store.topics

    def topic(self, topic: str) -> TopicConfig | None:
        """The topic's config on this broker, None when it has no such topic."""
        return self._store.topics.find(topic)

    def check_readable(self, config: TopicConfig, queue_id: int) -> None:
        """Refuse a read the broker or the topic does not allow (PermissionDeniedError),
        or of a queue the topic does not have for reading (NotFoundError)."""
        perm = self._config.broker_perm
        if not perm & Permission.READ:
            raise PermissionDeniedError(
                f"broker {self.name!r} is write-only (perm {perm}); read from another broker"
            )
        if not config.is_readable:
            raise PermissionDeniedError(
                f"topic {config.name!r} is not readable (perm {config.perm}); update it with "
                "perm 6 to allow reads"
            )
        if queue_id >= config.read_queue_nums:
            raise NotFoundError(
                f"topic {config.name!r} has {config.read_queue_nums} read queues "
                f"(0..{config.read_queue_nums - 1}); queue {queue_id} is not readable"
            )

    def read_filter(
        self, expression_type: str | None, expression: str | None, *, exact_tags: bool = False
    ) -> SubscriptionFilter:
        """A subscription's filter (``tag_codes`` and ``selector``, for a :class:`Read`),
        read by the one decoder every front-end uses (:func:`~rmq_spark.broker.membership.
        filters.read_filter`) with this broker's limit and property filter setting:
        ``expression_type`` "TAG" (empty or None too) or "SQL92", in any case.

        A tag filter is hash codes only unless ``exact_tags`` (RocketMQ 5's clients do not
        check tags again). Refused: a text longer than --max-subscription-chars, tags not
        joined by "||" or another type (FilterExpressionError), a malformed SQL92 selector
        (SelectorError, naming the column and why), SQL92 on a broker started with
        --no-property-filter (FilterNotSupportedError). Blocking: a selector is compiled
        (once per text while it is among the last ones compiled)."""
        return read_filter(
            expression_type,
            expression,
            max_chars=self._config.max_subscription_chars,
            property_filter=self._config.property_filter,
            broker=self.name,
            exact_tags=exact_tags,
        )

    def read(self, read: Read, offset: int | None = None) -> GetResult:
        """Read once (blocking: call it on a worker thread), from ``offset`` when given.
        What it finds is counted as handed to ``read.group``."""
        result = self._store.get_messages(
            read.topic,
            read.queue_id,
            read.offset if offset is None else offset,
            read.max_count,
            read.max_bytes,
            read.tag_codes,
            read.selector,
        )
        if result.status in _COUNTED:
            found = 0 if result.queue_offsets is None else len(result.queue_offsets)
            self.counters.read(
                read.group, read.topic, read.queue_id, found, len(result.data),
                result.next_begin_offset,
            )  # fmt: skip
        return result

    async def hold(self, run: Run, read: Read, result: GetResult, wait_s: float) -> GetResult:
        """A read that found nothing new (``result``), held up to ``wait_s`` on the event
        loop until a message passing its filter arrives; the last read answers. Arrivals
        the filter rejects do not end the wait, and the answer then moves
        ``next_begin_offset`` past them. A cancelled caller stops waiting."""

        def again(offset: int) -> Awaitable[GetResult]:
            return run(self.read, read, offset)

        return await long_poll.hold(
            self._notifier,
            read.topic,
            read.queue_id,
            read.offset,
            wait_s,
            max_offset=lambda: self._store.max_offset(read.topic, read.queue_id),
            read=again,
            result=result,
        )

    async def pull(self, run: Run, read: Read, wait_s: float) -> GetResult:
        """:meth:`read` on a worker, then :meth:`hold` when it found nothing new."""
        result: GetResult = await run(self.read, read)
        if result.status == PullStatus.NO_NEW_MSG and wait_s > 0:
            result = await self.hold(run, read, result, wait_s)
        return result

    def wake(self, topic: str, queue_id: int) -> None:
        """Wake the reads held on the queue: something other than a write may let them
        find messages now (an ack freed a FIFO queue, a message became visible again)."""
        self._notifier.notify(topic, queue_id)

    def wait_for_messages(
        self, queues: list[tuple[str, int]], wait_s: float, is_ready: Callable[[], bool]
    ) -> Awaitable[bool]:
        """Wait on the event loop until ``is_ready()`` (checked at each write to one of
        ``queues``) or ``wait_s`` passes (pop-style receives over several queues)."""
        return self._notifier.wait_any(queues, wait_s, is_ready)

    def record_at(self, physical: int) -> bytes:
        """The whole stored record that starts at commit-log offset ``physical``
        (NotFoundError when none starts there)."""
        record = self._store.read_record(physical)
        # A record always carries its own position; anything else is bytes inside another.
        stored = int.from_bytes(
            record[POS_PHYSICALOFFSET : POS_PHYSICALOFFSET + 8], "big", signed=True
        )
        if len(record) < MIN_RECORD_BYTES or stored != physical:
            raise NotFoundError(f"no message starts at physical offset {physical}")
        return record

    def record_at_offset(self, topic: str, queue_id: int, offset: int) -> bytes | None:
        """The whole record at queue offset ``offset`` of the queue, None when the queue
        holds none there (deleted, or not yet written). A look-up, not a consumer's read:
        nothing is counted as handed out (blocking: call it on a worker thread)."""
        if not self.min_offset(topic, queue_id) <= offset < self.max_offset(topic, queue_id):
            return None
        result = self._store.get_messages(topic, queue_id, offset, 1, 1)
        if result.status != PullStatus.FOUND or result.sizes is None or not len(result.sizes):
            return None
        return result.data[: int(result.sizes[0])]

    def range_size(
        self, topic: str, queue_id: int, start: int, end: int | None, budget: int | None
    ) -> RangeSize:
        """How many bytes the queue's messages in [start, end) take, and how many of them
        fit in ``budget`` bytes (see :meth:`MessageStore.range_size`)."""
        return self._store.range_size(topic, queue_id, start, end, budget)

    # -- offsets ----------------------------------------------------------------------------

    def queue_range(self, topic: str, queue_id: int) -> tuple[int, int]:
        """The queue's lowest and next offsets (min, max)."""
        return self._store.min_offset(topic, queue_id), self._store.max_offset(topic, queue_id)

    def min_offset(self, topic: str, queue_id: int) -> int:
        return self._store.min_offset(topic, queue_id)

    def max_offset(self, topic: str, queue_id: int) -> int:
        return self._store.max_offset(topic, queue_id)

    def offset_at(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """The first offset stored at or after ``timestamp_ms`` (the max offset when none)."""
        return self._store.offset_by_timestamp(topic, queue_id, timestamp_ms)

    def last_offset_at(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """The last offset stored at or before ``timestamp_ms`` (the min offset when none)."""
        after = self._store.offset_by_timestamp(topic, queue_id, timestamp_ms + 1)
        return max(self._store.min_offset(topic, queue_id), after - 1)

    def queue_store_timestamp(self, topic: str, queue_id: int, offset: int) -> int | None:
        """When the message at ``offset`` was stored (ms), None when there is none. A stored
        message's time never changes, so the answers are kept (lag in time is asked for
        the same committed offsets at every scrape)."""
        key = (topic, queue_id, offset)
        found = self._store_times.get(key)
        if found is None:
            found = self._store.queue_store_timestamp(topic, queue_id, offset)
            if found is not None:
                if len(self._store_times) >= STORE_TIMES_KEPT:
                    self._store_times.clear()
                self._store_times[key] = found
        return found

    def commit_offsets(
        self,
        group: str,
        topic: str,
        offsets: Mapping[int, int],
        *,
        increase_only: bool = False,
    ) -> dict[int, int]:
        """Commit ``group``'s next offsets of ``topic``'s queues; returns what is stored
        after it (with ``increase_only``, a lower offset leaves the stored one)."""
        return self._store.offsets.commit(group, topic, offsets, increase_only=increase_only)

    def committed(self, group: str, topic: str, queue_id: int) -> int | None:
        """``group``'s committed offset of the queue, None when it never committed one."""
        return self._store.offsets.query_one(group, topic, queue_id)

    def committed_queues(self, group: str, topic: str) -> dict[int, int]:
        """``group``'s committed offsets of every queue of ``topic`` it committed."""
        return self._store.offsets.query(group, topic)

    @property
    def offsets(self) -> ConsumerOffsetTable:
        """The consumer-offset table, for listings over every group and topic."""
        return self._store.offsets

    # -- administration -------------------------------------------------------------------

    @property
    def store_config(self) -> StoreConfig:
        """The store's settings (its directory, flush mode, segment sizes)."""
        return self._store.config

    @property
    def index(self) -> MessageIndex | None:
        """The message index (keys and unique keys), None when the broker keeps none."""
        return self._store.index

    def stats(self) -> dict[str, Any]:
        """The store's figures (commit log range, queues, disk), for status calls."""
        return self._store.stats()

    def storage(self) -> Storage:
        """The store's size, disk and flush state (metrics, health, the console)."""
        store = self._store
        usage = shutil.disk_usage(store.config.store_dir)
        return Storage(
            commitlog_bytes=store.commitlog.max_offset - store.commitlog.min_offset,
            flush_behind_bytes=max(
                0, store.commitlog.max_offset - store.flush_service.flushed_offset
            ),
            disk_total_bytes=usage.total,
            disk_free_bytes=usage.free,
            disk_full=store.health.disk_full,
            failure=store.failure,
            flush_ms=store.flush_service.flush_ms.snapshot(),
            queues=store.stats()["queues"],
        )

    def delete_topic(self, topic: str) -> None:
        """Delete ``topic`` from this broker: its config, queues and offsets."""
        self._store.delete_topic(topic)
        self._notifier.notify_topic(topic)
        self.counters.forget_topic(topic)

    def read_record(self, physical: int) -> bytes:
        """The bytes stored at commit-log offset ``physical`` (see :meth:`record_at` for a
        read that checks a record starts there)."""
        return self._store.read_record(physical)

    def range_files(
        self, topic: str, queue_id: int, start: int, end: int, max_files: int
    ) -> RangeFiles:
        """The files that hold the queue's range [start, end) (short-circuit reads)."""
        return self._store.range_files(topic, queue_id, start, end, max_files)

    # -- send-backs -------------------------------------------------------------------------

    def find_record(self, physical: int, host: str | None = None) -> tuple[Record, str]:
        """The record that starts at commit-log offset ``physical`` and its offset message
        id; ``host`` is the store host an id named, which must be the record's."""
        if physical < 0:
            raise NotFoundError(f"no message starts at physical offset {physical}")
        record = decode_record(self.record_at(physical))
        # The record keeps the store host of the run that wrote it (the port may have
        # changed since), so an id is this broker's exactly when it names that host.
        if host is not None and host != record.store_host:
            raise NotFoundError(
                f"message {offset_msg_id(host, physical)} was stored by {host}, not by this "
                f"broker ({self.writes.store_host}); send it back to the broker that "
                "delivered it"
            )
        return record, offset_msg_id(record.store_host, physical)

    def retry_max_times(self, group: str) -> int:
        """How many times ``group``'s messages are redelivered before the dead-letter
        queue (its subscription group's setting, else the broker's)."""
        return self._subscription_groups.retry_max_times(group)

    def send_back(self, record: Record, plan: retry.SendBackPlan) -> tuple[AppendResult, int]:
        """Write the copy ``plan`` describes (:func:`retry.plan_send_back`): at once to the
        dead-letter topic, or through the delay levels to the retry topic; returns the
        append result and the delay level used."""
        written = retry.write_send_back(self.writes, self._delays, record, plan)
        prefix = DLQ_PREFIX if plan.dead_lettered else RETRY_PREFIX
        group = plan.topic.removeprefix(prefix)
        topic = plan.properties.get(RETRY_TOPIC) or record.topic
        self.counters.sent_back(group, topic, dead_letter=plan.dead_lettered)
        return written

    # -- look-up by key ---------------------------------------------------------------------

    def find_by_key(
        self,
        topic: str,
        key: str,
        max_count: int,
        begin_ms: int,
        end_ms: int,
        *,
        max_bytes: int,
        exact_times: bool = False,
    ) -> KeyMatches:
        """The stored records of ``topic`` with ``key`` stored in [begin_ms, end_ms]."""
        return find_by_key(
            self._store,
            self.name,
            topic,
            key,
            max_count,
            begin_ms,
            end_ms,
            max_bytes=max_bytes,
            exact_times=exact_times,
        )
