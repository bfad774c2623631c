"""The pull consumer: reads assigned queues from positions the caller controls.

Records come back as one ``pyarrow.RecordBatch`` per pull with
:data:`~rmq_spark.codec.arrow_decode.RECORD_SCHEMA`, decoded in one vectorised pass. The
schema has no broker column because a pull reads one queue of one broker; callers that mix
queues add it from ``PullResult.message_queue`` (see :meth:`PullResult.with_broker_name`).

A PullConsumer is not thread-safe: use one per thread (as with Kafka's consumer).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import pyarrow as pa
import pyarrow.compute as pc

from rmq_spark.client import offsets as offset_rpc
from rmq_spark.client.cluster import Cluster
from rmq_spark.client.connection import ClientConfig, Connection, PendingCall
from rmq_spark.client.endpoints import Endpoints
from rmq_spark.codec.arrow_decode import RECORD_SCHEMA
from rmq_spark.codec.subscription import Subscription, parse_subscription
from rmq_spark.errors import (
    InvalidArgumentError,
    NotFoundError,
    RocketliteError,
)
from rmq_spark.filter import SQL92, TAG, compile_selector
from rmq_spark.names import RETRY_PREFIX, validate_group
from rmq_spark.structs import MessageQueue, PullStatus
from rmq_spark.wire.proto_gen.rocketlite.v1 import messaging_pb2
from rmq_spark.wire.pull import decode_pull_response
from rmq_spark.wire.v1 import mq_to_pb, pull_status_from_pb

log = logging.getLogger("rmq_spark.client")

__all__ = ["ConsumeFrom", "ConsumerConfig", "PullConsumer", "PullResult", "ReadFilter"]

#: where a queue without a committed offset starts (RocketMQ's ConsumeFromWhere)
ConsumeFrom = Literal["LAST_OFFSET", "FIRST_OFFSET", "TIMESTAMP"]


@dataclass(frozen=True, eq=False)
class ReadFilter:
    """Which messages of a topic a consumer reads: by tag (``expression`` "*" or
    "TagA || TagB"; the broker filters on tag hash codes, so the tags of what it answers
    are checked again here) or by a SQL92 selector over the properties (``expression_type``
    "SQL92"; the broker applies it exactly, nothing is checked again)."""

    expression: str
    expression_type: str = TAG
    #: the tags to keep (None: every message)
    tag_values: pa.Array | None = None

    @classmethod
    def of(cls, expression: str = "*", sql: str | None = None) -> ReadFilter:
        """The filter of tags ``expression``, or of the SQL92 selector ``sql``: compiled
        here, so a malformed one fails now (``SelectorError``, naming the column and why),
        before any broker is asked.

        >>> ReadFilter.of(sql="region = 'eu'").expression_type
        'SQL92'
        """
        if sql is None:
            parsed = parse_subscription(expression)
            return cls(parsed.expression, TAG, subscribed_tag_values(parsed))
        if parse_subscription(expression).tags is not None:
            raise InvalidArgumentError(
                f"both tags {expression!r} and sql {sql!r} given: filter by one of them (a "
                "SQL92 selector can test the tag too: TAGS = 'TagA')"
            )
        return cls(compile_selector(sql).text, SQL92)

    @property
    def wire_type(self) -> str:
        """The request's expression_type: "" for tags (what brokers have always read),
        else the type."""
        return "" if self.expression_type == TAG else self.expression_type

    def keep(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """The records of a pull's answer this filter selects (tags checked again)."""
        return keep_subscribed_tags(batch, self.tag_values)


#: every message
READ_ALL = ReadFilter("*")


@dataclass
class ConsumerConfig(ClientConfig):
    """Pull consumer settings (plus the shared :class:`ClientConfig` ones)."""

    #: most messages one pull of one queue returns (RocketMQ's pullBatchSize)
    pull_batch_size: int = 32
    #: about how many record bytes one pull returns; 0 = the broker's default (4 MiB)
    pull_max_bytes: int = 0
    #: start of a queue the group has no committed offset for
    consume_from: ConsumeFrom = "LAST_OFFSET"
    #: with consume_from="TIMESTAMP": epoch ms (broker's clock) to start from
    consume_timestamp_ms: int | None = None
    #: a long poll's deadline is its suspend time plus this
    long_poll_margin_ms: int = 5_000

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.consume_from not in ("LAST_OFFSET", "FIRST_OFFSET", "TIMESTAMP"):
            raise InvalidArgumentError(
                f"consume_from={self.consume_from!r} must be LAST_OFFSET, FIRST_OFFSET or TIMESTAMP"
            )
        if self.consume_from == "TIMESTAMP" and self.consume_timestamp_ms is None:
            raise InvalidArgumentError(
                "consume_from='TIMESTAMP' needs consume_timestamp_ms (epoch milliseconds)"
            )
        if self.pull_batch_size < 1 or self.pull_max_bytes < 0 or self.long_poll_margin_ms < 0:
            raise InvalidArgumentError(
                f"pull_batch_size={self.pull_batch_size!r} must be >= 1, "
                f"pull_max_bytes={self.pull_max_bytes!r} and "
                f"long_poll_margin_ms={self.long_poll_margin_ms!r} >= 0"
            )


@dataclass(frozen=True)
class PullResult:
    """The outcome of one pull of one queue.

    ``batch`` holds the messages that passed the subscription (empty unless FOUND).
    ``next_begin_offset`` is where the next pull starts; ``max_offset`` is the queue's
    exclusive end, so ``max_offset - next_begin_offset`` is the backlog.
    """

    status: PullStatus
    message_queue: MessageQueue
    next_begin_offset: int
    min_offset: int
    max_offset: int
    batch: pa.RecordBatch

    @property
    def message_count(self) -> int:
        return self.batch.num_rows

    def with_broker_name(self, column: str = "brokerName") -> pa.RecordBatch:
        """The batch plus a column naming the queue's broker (for batches of many queues)."""
        names = pa.repeat(pa.scalar(self.message_queue.broker_name), self.batch.num_rows)
        return self.batch.append_column(column, names)


class PullConsumer:
    """Reads queues you assign, from positions you control, with an optional group for
    committed offsets.

    >>> with PullConsumer("127.0.0.1:10911", group="g1", subscription="TagA || TagB") as c:
    ...     c.assign(c.queues("orders"))                         # doctest: +SKIP
    ...     c.seek_to_beginning()                                # doctest: +SKIP
    ...     for result in c.poll(timeout_ms=1000):               # doctest: +SKIP
    ...         print(result.message_queue, result.batch.column("body"))
    ...     c.commit()                                           # doctest: +SKIP

    ``subscription`` selects by tag; ``sql`` instead selects by RocketMQ's SQL92 selector
    over the messages' properties (``sql="region = 'eu' AND amount > 100"``), applied by
    the brokers; a malformed one raises ``SelectorError`` here, naming the column. A
    queue's first position is the group's committed offset, else ``consume_from``.
    """

    def __init__(
        self,
        endpoints: str | Iterable[str] | Endpoints,
        group: str | None = None,
        subscription: str = "*",
        config: ConsumerConfig | None = None,
        *,
        sql: str | None = None,
    ) -> None:
        self.group = validate_group(group) if group is not None else None
        self.filter = ReadFilter.of(subscription, sql)
        self.subscription = parse_subscription(subscription)
        self.config = config or ConsumerConfig()
        self._cluster = Cluster(endpoints, self.config)
        self._assigned: list[MessageQueue] = []
        self._positions: dict[MessageQueue, int] = {}
        self._rotation = 0

    # --- queues and positions ------------------------------------------------------------

    def queues(self, topic: str) -> list[MessageQueue]:
        """The readable queues of ``topic`` on every broker, sorted."""
        return list(self._cluster.route(topic).readable)

    def assign(self, queues: Iterable[MessageQueue]) -> None:
        """Read exactly these queues from now on; positions of queues kept are kept."""
        wanted = list(dict.fromkeys(queues))
        for mq in wanted:
            if not isinstance(mq, MessageQueue):
                raise InvalidArgumentError(
                    f"{mq!r} is not a MessageQueue(topic, broker_name, queue_id)"
                )
        for topic in {mq.topic for mq in wanted}:
            route = self._cluster.route(topic)
            for mq in wanted:
                if mq.topic == topic and mq not in route.readable:
                    if mq.broker_name not in route.brokers:
                        route.endpoint_of(mq.broker_name)  # raises, naming the brokers
                    count = route.brokers[mq.broker_name].read_queue_nums
                    raise NotFoundError(
                        f"{mq} is not a readable queue of topic {topic!r}: broker "
                        f"{mq.broker_name!r} has {count} read queues (0..{count - 1})"
                    )
        self._assigned = sorted(wanted)
        self._positions = {mq: p for mq, p in self._positions.items() if mq in wanted}

    def assignment(self) -> list[MessageQueue]:
        return list(self._assigned)

    def position(self, mq: MessageQueue) -> int:
        """The offset the next pull of ``mq`` starts at."""
        self._check_assigned([mq])
        self._ensure_positions([mq])
        return self._positions[mq]

    def seek(self, mq: MessageQueue, offset: int) -> None:
        """Pull ``mq`` from ``offset`` next (past the end answers OFFSET_ILLEGAL, then moves)."""
        self._check_assigned([mq])
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
            raise InvalidArgumentError(f"seek offset {offset!r} for {mq} must be an int >= 0")
        self._positions[mq] = offset

    def seek_to_beginning(self, queues: Iterable[MessageQueue] | None = None) -> None:
        """Move to the oldest readable offset (all assigned queues by default)."""
        for mq, answer in self._query(queues).items():
            self._positions[mq] = answer.min_offset

    def seek_to_end(self, queues: Iterable[MessageQueue] | None = None) -> None:
        """Move past the newest message: only messages sent from now on are pulled."""
        for mq, answer in self._query(queues).items():
            self._positions[mq] = answer.max_offset

    def seek_to_timestamp(self, queues: Iterable[MessageQueue] | None, timestamp_ms: int) -> None:
        """Move to the first message stored at or after ``timestamp_ms`` (broker's clock),
        or to the end when every message is older."""
        for mq, answer in self._query(queues, timestamp_ms).items():
            self._positions[mq] = _timestamp_position(mq, answer)

    # --- pulling -------------------------------------------------------------------------

    def pull(
        self,
        mq: MessageQueue,
        max_messages: int | None = None,
        max_bytes: int | None = None,
        timeout_ms: int = 0,
    ) -> PullResult:
        """Pull ``mq`` from its position and advance the position to next_begin_offset.

        ``timeout_ms > 0`` long-polls: with nothing new the broker holds the call that long
        waiting for a message. Statuses are outcomes, not errors; OFFSET_ILLEGAL (the
        position was deleted or past the end) moves to where the broker says, with a warning.
        """
        self._check_assigned([mq])
        self._ensure_positions([mq])
        conn, request, timeout_s = self._pull_request(mq, max_messages, max_bytes, timeout_ms)
        response = conn.call(conn.messaging.PullMessages, request, timeout_s=timeout_s)
        return self._accept(mq, request.queue_offset, response)

    def poll(self, timeout_ms: int = 0) -> list[PullResult]:
        """Pull every assigned queue once, in parallel; results of queues that had messages.

        With nothing anywhere and ``timeout_ms > 0``, long-polls every queue and returns as
        soon as one has messages. The starting queue rotates between calls, so results are
        fair across queues. A broker that cannot be reached or does not answer in time is
        skipped with a warning.
        """
        if not self._assigned:
            raise InvalidArgumentError("poll needs assigned queues; call assign() first")
        start = self._rotation % len(self._assigned)
        self._rotation += 1
        order = self._assigned[start:] + self._assigned[:start]
        order = self._ensure_positions(order, skip_unavailable=True)
        results = self._pull_all(order, 0)
        found = [r for r in results if r.status == PullStatus.FOUND]
        if found or timeout_ms <= 0:
            return found
        results = self._pull_all(order, timeout_ms)
        return [r for r in results if r.status == PullStatus.FOUND]

    # --- committed offsets ---------------------------------------------------------------

    def commit(
        self, offsets: Mapping[MessageQueue, int] | None = None, *, increase_only: bool = True
    ) -> dict[MessageQueue, int]:
        """Commit the current positions of the assigned queues (or ``offsets``) for the
        group, one UpdateConsumerOffsets per broker; returns what is committed now.

        Increase-only by default, like RocketMQ clients (a late commit cannot move the group
        back); pass ``increase_only=False`` to commit a rewind.
        """
        group = self._require_group("commit")
        if offsets is None:
            offsets = {mq: self._positions[mq] for mq in self._assigned if mq in self._positions}
        if not offsets:
            return {}
        done = offset_rpc.commit_offsets(self._cluster, group, offsets, increase_only=increase_only)
        return {mq: committed.offset for mq, committed in done.items()}

    def committed(self, mq: MessageQueue) -> int | None:
        """The group's committed offset of ``mq`` on the broker; None when never committed."""
        group = self._require_group("committed")
        return offset_rpc.query_committed(self._cluster, group, [mq]).get(mq)

    def close(self) -> None:
        self._cluster.close()

    def __enter__(self) -> PullConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- internals -----------------------------------------------------------------------

    def _check_assigned(self, queues: Iterable[MessageQueue]) -> None:
        assigned = set(self._assigned)
        for mq in queues:
            if mq not in assigned:
                raise InvalidArgumentError(
                    f"{mq!r} is not assigned to this consumer; call assign() with it first"
                )

    def _require_group(self, what: str) -> str:
        if self.group is None:
            raise InvalidArgumentError(
                f"{what} needs a consumer group; create PullConsumer(endpoints, group=...)"
            )
        return self.group

    def _query(
        self, queues: Iterable[MessageQueue] | None, timestamp_ms: int | None = None
    ) -> dict[MessageQueue, offset_rpc.QueueOffsets]:
        mqs = self._assigned if queues is None else list(queues)
        self._check_assigned(mqs)
        if not mqs:
            return {}
        return offset_rpc.query_queue_offsets(self._cluster, mqs, timestamp_ms)

    def _ensure_positions(
        self, queues: Sequence[MessageQueue], *, skip_unavailable: bool = False
    ) -> list[MessageQueue]:
        """Give unpositioned queues the committed offset, else their consume_from start.

        Returns the queues that have a position. With ``skip_unavailable`` the queues of a
        broker that failed with a retriable error (unreachable, no answer in time) are left
        out (with a warning) instead of failing, and tried again at the next poll.
        """
        missing = [mq for mq in queues if mq not in self._positions]
        by_endpoint = self._cluster.group_by_endpoint(missing) if missing else {}
        for endpoint, mqs in by_endpoint.items():
            try:
                self._resolve_positions(mqs)
            except RocketliteError as exc:
                if not (skip_unavailable and exc.retriable):
                    raise
                log.warning("queues of broker %s skipped: %s", endpoint, exc)
        return [mq for mq in queues if mq in self._positions]

    def _resolve_positions(self, missing: list[MessageQueue]) -> None:
        if self.group is not None:
            committed = offset_rpc.query_committed(self._cluster, self.group, missing)
            self._positions.update(committed)
            missing = [mq for mq in missing if mq not in committed]
        if not missing:
            return
        config = self.config
        stamp = config.consume_timestamp_ms if config.consume_from == "TIMESTAMP" else None
        for mq, answer in offset_rpc.query_queue_offsets(self._cluster, missing, stamp).items():
            if config.consume_from == "FIRST_OFFSET" or mq.topic.startswith(RETRY_PREFIX):
                self._positions[mq] = answer.min_offset
            elif config.consume_from == "TIMESTAMP":
                self._positions[mq] = _timestamp_position(mq, answer)
            else:
                self._positions[mq] = answer.max_offset

    def _pull_request(
        self, mq: MessageQueue, max_messages: int | None, max_bytes: int | None, timeout_ms: int
    ) -> tuple[Connection, messaging_pb2.PullMessagesRequest, float]:
        if timeout_ms < 0:
            raise InvalidArgumentError(f"timeout_ms={timeout_ms!r} must be >= 0")
        request = messaging_pb2.PullMessagesRequest(
            consumer_group=self.group or "",
            queue=mq_to_pb(mq),
            queue_offset=self._positions[mq],
            max_messages=max_messages or self.config.pull_batch_size,
            max_bytes=max_bytes or self.config.pull_max_bytes,
            subscription_expression=self.filter.expression,
            suspend_timeout_ms=timeout_ms,
            expression_type=self.filter.wire_type,
        )
        if timeout_ms:
            timeout_s = (timeout_ms + self.config.long_poll_margin_ms) / 1000
        else:
            timeout_s = self.config.request_timeout_s
        conn = self._cluster.connection(self._cluster.endpoint_of(mq.broker_name))
        return conn, request, timeout_s

    def _pull_all(self, order: Sequence[MessageQueue], timeout_ms: int) -> list[PullResult]:
        """Pull ``order`` in parallel. With ``timeout_ms`` (long polls) return once one
        queue has messages and cancel the rest: a cancelled pull moves no position."""
        wake = threading.Event()
        calls: dict[MessageQueue, tuple[PendingCall, int]] = {}

        def start(mq: MessageQueue) -> None:
            conn, request, timeout_s = self._pull_request(mq, None, None, timeout_ms)
            call = conn.start(conn.messaging.PullMessages, request, timeout_s=timeout_s)
            call.future.add_done_callback(lambda _f: wake.set())
            calls[mq] = (call, request.queue_offset)

        for mq in order:
            start(mq)
        results: dict[MessageQueue, PullResult] = {}
        if timeout_ms:
            wait_s = (timeout_ms + self.config.long_poll_margin_ms) / 1000
        else:
            wait_s = self.config.request_timeout_s
        deadline = time.monotonic() + wait_s
        try:
            while calls:
                wake.wait(max(0.0, deadline - time.monotonic()))
                wake.clear()
                for mq in [mq for mq, (call, _) in calls.items() if call.done()]:
                    call, offset = calls.pop(mq)
                    result = self._finish(mq, call, offset)
                    if result is None:
                        continue
                    results[mq] = result
                    moved = result.status in (PullStatus.NO_MATCHED_MSG, PullStatus.OFFSET_ILLEGAL)
                    if timeout_ms and moved and time.monotonic() < deadline - 0.05:
                        start(mq)  # the broker answered early from a new position: wait on
                if timeout_ms and any(r.status == PullStatus.FOUND for r in results.values()):
                    break
                if time.monotonic() >= deadline:
                    break
        finally:
            for call, _ in calls.values():
                call.cancel()
        return [results[mq] for mq in order if mq in results]

    def _finish(self, mq: MessageQueue, call: PendingCall, offset: int) -> PullResult | None:
        if call.cancelled():
            return None
        try:
            response = call.result()
        except RocketliteError as exc:
            if not exc.retriable:
                raise
            log.warning("pull of %s skipped: %s", mq, exc)
            return None
        return self._accept(mq, offset, response)

    def _accept(
        self, mq: MessageQueue, offset: int, response: messaging_pb2.PullMessagesResponse
    ) -> PullResult:
        """Decode and filter an answer, and move the queue's position."""
        try:
            status = pull_status_from_pb(response.status)
        except KeyError:
            raise RocketliteError(
                f"pull of {mq} got status {response.status}, which this client does not know; "
                "is the broker newer than the client?"
            ) from None
        batch = _empty_batch()
        if status == PullStatus.FOUND:
            batch = self.filter.keep(decode_pull_response(mq, response))
            if batch.num_rows == 0:
                status = PullStatus.NO_MATCHED_MSG  # every match was a tag-hash collision
        elif status == PullStatus.OFFSET_ILLEGAL:
            log.warning(
                "offset %d of %s is illegal (readable %d..%d); moving to %d",
                offset,
                mq,
                response.min_offset,
                response.max_offset,
                response.next_begin_offset,
            )
        if mq in self._positions and self._positions[mq] == offset:
            self._positions[mq] = response.next_begin_offset
        return PullResult(
            status,
            mq,
            response.next_begin_offset,
            response.min_offset,
            response.max_offset,
            batch,
        )


def subscribed_tag_values(subscription: Subscription) -> pa.Array | None:
    """The tags of a parsed subscription as an Arrow array, or None for "all tags"."""
    tags = subscription.tags
    return None if tags is None else pa.array(sorted(tags), pa.string())


def keep_subscribed_tags(batch: pa.RecordBatch, tag_values: pa.Array | None) -> pa.RecordBatch:
    """Keep records whose real tag is subscribed: the broker filtered on hash codes only."""
    if tag_values is None:
        return batch
    keep = pc.fill_null(pc.is_in(batch.column("tags"), value_set=tag_values), False)
    if pc.all(keep).as_py():
        return batch
    return batch.filter(keep)


def _timestamp_position(mq: MessageQueue, answer: offset_rpc.QueueOffsets) -> int:
    if answer.timestamp_offset is None:
        raise RocketliteError(
            f"the broker of {mq} answered a timestamp query without timestamp_offset; "
            "is it older than the client?"
        )
    return answer.timestamp_offset


@functools.cache
def _empty_batch() -> pa.RecordBatch:
    """The batch of a pull that found nothing; built on first use, because building Arrow
    arrays from Python values makes pyarrow import pandas (about half a second)."""
    return pa.RecordBatch.from_pylist([], schema=RECORD_SCHEMA)
