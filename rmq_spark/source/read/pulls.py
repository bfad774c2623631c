"""Range reads by pulling: over gRPC (:class:`GrpcReader`) or over RocketMQ's remoting
protocol (:class:`RemotingReader`, option ``nameServer``).

Both follow RocketMQ's pull (:class:`PullReader`), and differ only in how a pull reaches
the broker and how its answer is decoded. A range is read exactly: pulls start at its
start and ask for at most what is left (rows at or past the end, which a tag-filtered pull
may reach, are cut by the caller). The next pull is sent before the current answer is
decoded, so the broker reads while the task decodes. Statuses, as RocketMQ's pull defines
them:

- FOUND: records; the next pull starts at ``next_begin_offset``.
- NO_MATCHED_MSG: the tag filter skipped every entry scanned; ``next_begin_offset`` moved
  past them. A filtered gap is not data loss.
- OFFSET_ILLEGAL below the queue's min: retention deleted the rest of the range before it
  was read; past the max, or NO_NEW_MSG before the end: the queue now ends early (it was
  re-created). Both are data loss: ``failOnDataLoss`` fails the task naming the queue and
  offsets, or warns and skips.

With a SQL92 selector (option ``sqlFilter``) the pulls carry it and the broker picks the
messages; a broker that does not filter by SQL92 (Apache RocketMQ without
``enablePropertyFilter``, a rocketlite broker with ``--no-property-filter``) is pulled with
the tag filter only, and the task applies the selector to what it gets
(:mod:`~rmq_spark.source.read.selection`). The driver finds such brokers before the tasks
run and names them in the partition (``filter_in_task``); a task that meets one the driver
did not know switches by itself. Answers of a broker that is not rocketlite's through a
name server are checked against the selector too (RocketMQ 4.9's parser reads a few texts
differently, and delivers everything for one it cannot parse).

A broker that is briefly unavailable (restarting) is retried ``maxRetries`` times with a
doubling backoff from ``retryBackoffMs``; so is a pull that timed out. Over gRPC a retry
goes out as soon as the connection is back (within about a second of the broker listening
again), not at the end of its backoff.
"""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Generator
from dataclasses import replace
from typing import Generic, Protocol, TypedDict, TypeVar

import numpy as np
import pyarrow as pa

from rmq_spark.client.connection import NO_RETRY, Connection, PendingCall
from rmq_spark.client.remoting import PendingPull, PullAnswer, RemotingClient
from rmq_spark.client.remoting.client import BrokerGroupGoneError
from rmq_spark.client.remoting.replicas import MASTER_ID
from rmq_spark.codec.arrow_decode import decode_records
from rmq_spark.errors import NotFoundError, RocketliteError, UnavailableError
from rmq_spark.filter import Selector, compile_selector
from rmq_spark.offsets.spark import DataLoss
from rmq_spark.retry import backoff_delays
from rmq_spark.source.options import SourceOptions
from rmq_spark.source.planning import QueueRange
from rmq_spark.source.read.range_reader import PULL_MAX_BYTES, report_loss
from rmq_spark.source.read.selection import decode_selected, keep_selected, with_properties
from rmq_spark.source.sql_filter import TAG, refuses_sql92, task_only_reason
from rmq_spark.spark_options.connect_options import MAX_RETRY_BACKOFF_MS
from rmq_spark.structs import MessageQueue, PullStatus
from rmq_spark.wire.proto_gen.rocketlite.v1 import messaging_pb2
from rmq_spark.wire.pull import decode_pull_response
from rmq_spark.wire.v1 import mq_to_pb, pull_status_from_pb

log = logging.getLogger("rmq_spark.source")

__all__ = ["GrpcReader", "PullReader", "RemotingReader"]

#: pulls a remoting read keeps in flight for one queue
READ_AHEAD = 8
#: a remoting read decodes the records of small pull answers together, this many bytes
DECODE_BYTES = 1 << 20


class _PullTerms(TypedDict):
    max_bytes: int
    group: str | None
    expression: str
    expression_type: str


class _Answer(Protocol):
    """What every pull's answer says besides its records."""

    @property
    def next_begin_offset(self) -> int: ...
    @property
    def min_offset(self) -> int: ...
    @property
    def max_offset(self) -> int: ...


AnswerT = TypeVar("AnswerT", bound=_Answer)
AnswerT_co = TypeVar("AnswerT_co", covariant=True)


class _Pending(Protocol[AnswerT_co]):
    """A pull already sent: a gRPC call in flight, or a remoting pull written ahead."""

    def result(self) -> AnswerT_co: ...
    def cancel(self) -> object: ...


class PullReader(ABC, Generic[AnswerT]):
    """A :class:`~rmq_spark.source.read.range_reader.RangeReader` that pulls; see the
    module doc. A subclass says how one pull reaches the broker and what its answer holds."""

    def __init__(
        self, options: SourceOptions, columns: tuple[str, ...], filter_in_task: tuple[str, ...]
    ) -> None:
        self.options = options
        self.columns = columns
        selector = options.selector
        self.selector: Selector | None = None if selector is None else compile_selector(selector)
        #: broker groups pulled with the tag filter only, the selector applied here
        self.in_task: set[str] = set(filter_in_task) if selector is not None else set()

    def pull_filter(self, mq: MessageQueue) -> tuple[str, str]:
        """(expression type, expression) of the pulls of ``mq``."""
        if mq.broker_name in self.in_task:
            return TAG, self.options.subscription.expression
        return self.options.pull_filter()

    def broker_filters(self, mq: MessageQueue) -> bool:
        """Whether the broker skips messages of ``mq`` (then where a pull ends is unknown)."""
        return self.pull_filter(mq) != (TAG, "*")

    def read_range(self, queue_range: QueueRange) -> Generator[pa.RecordBatch, None, None]:
        mq, offset, end = queue_range.mq, queue_range.start, queue_range.end
        ahead: _Pending[AnswerT] | None = None  # the pull at ``offset``, already started
        held: list[AnswerT] = []  # answers found but not decoded yet (small ones together)
        try:
            while offset < end:
                answer = self._pull(mq, offset, end, ahead)
                ahead = None
                if answer is None:  # the queue is gone, and failOnDataLoss is false
                    break
                status = self._status(mq, answer)
                following = answer.next_begin_offset
                if status in (PullStatus.FOUND, PullStatus.NO_MATCHED_MSG):
                    _check_progress(mq, offset, following, status)
                    if following < end:  # the broker reads on while this pull is decoded
                        ahead = self._start(mq, following, self._batch(following, end))
                    if status == PullStatus.FOUND:
                        held.append(answer)
                        if self._enough(held):
                            yield self._decoded(mq, held)
                            held = []
                elif status == PullStatus.OFFSET_ILLEGAL and offset < answer.min_offset:
                    self._lost(DataLoss(mq, "deleted", offset, answer.min_offset))
                    following = answer.min_offset
                else:  # NO_NEW_MSG or OFFSET_ILLEGAL past the end, before ``end``
                    self._lost(DataLoss(mq, "reset", end, answer.max_offset))
                    break
                offset = following
            if held:
                yield self._decoded(mq, held)
        finally:
            if ahead is not None:
                ahead.cancel()
            self._range_done(mq)

    def _enough(self, held: list[AnswerT]) -> bool:
        """Whether the answers held are decoded now (each at once unless a subclass
        gathers small ones)."""
        return True

    def _decoded(self, mq: MessageQueue, held: list[AnswerT]) -> pa.RecordBatch:
        """The records of the FOUND answers ``held``, in order, as one batch."""
        assert len(held) == 1, "a subclass that holds several answers decodes them"
        return self._records(mq, held[0])

    def _range_done(self, mq: MessageQueue) -> None:
        """The read of a range of ``mq`` ended (pulls started ahead may be dropped)."""

    def _batch(self, offset: int, end: int) -> int:
        """How many messages the pull at ``offset`` asks for."""
        return min(self.options.pull_batch_size, end - offset)

    def _pull(
        self, mq: MessageQueue, offset: int, end: int, ahead: _Pending[AnswerT] | None
    ) -> AnswerT | None:
        """The answer of the pull at ``offset`` (``ahead`` if it was started early), retried
        while the broker is unavailable; None when the queue vanished and that is accepted."""
        first_ms = self.options.retry_backoff_ms
        delays_ms = backoff_delays(first_ms, max(first_ms, MAX_RETRY_BACKOFF_MS))
        attempts = self.options.max_retries + 1
        for attempt in range(1, attempts + 1):
            try:
                if ahead is not None:
                    call, ahead = ahead, None
                    return call.result()
                return self._call(mq, offset, self._batch(offset, end))
            except BrokerGroupGoneError as exc:
                # every broker of the group stopped: it may be restarting, so wait for it as
                # for an unavailable broker; still gone after the retries, its ranges are lost
                if attempt == attempts:
                    self._lost(DataLoss(mq, "vanished", offset), detail=str(exc))
                    return None
                backoff_ms = next(delays_ms)
                log.warning(
                    "pull of %s at %d: %s; retry %d/%d within %d ms",
                    mq.describe(), offset, exc, attempt, attempts - 1, backoff_ms,
                )  # fmt: skip
                self._pause(exc, backoff_ms / 1000)
                continue
            except NotFoundError as exc:
                self._lost(DataLoss(mq, "vanished", offset), detail=str(exc))
                return None
            except RocketliteError as exc:
                if mq.broker_name not in self.in_task and self._refuses_selector(exc):
                    self._filter_in_task(mq, exc)
                    return self._pull(mq, offset, end, None)
                if not exc.retriable:
                    raise
                if attempt == attempts:
                    raise type(exc)(
                        f"pull of {mq.describe()} at offset {offset} from "
                        f"{self._address(mq)} failed {attempts} times; last error: {exc}. "
                        "Is the broker running? Raise maxRetries or retryBackoffMs to wait "
                        "longer for a restarting broker"
                    ) from exc
                backoff_ms = next(delays_ms)
                log.warning(
                    "pull of %s at %d failed (%s); retry %d/%d within %d ms",
                    mq.describe(), offset, exc, attempt, attempts - 1, backoff_ms,
                )  # fmt: skip
                self._pause(exc, backoff_ms / 1000)
        raise AssertionError("unreachable")

    def _lost(self, loss: DataLoss, detail: str = "") -> None:
        report_loss(loss, fail_on_data_loss=self.options.fail_on_data_loss, detail=detail)

    def _refuses_selector(self, error: RocketliteError) -> bool:
        """Whether a pull failed because the broker does not apply SQL92 selectors."""
        return False

    def _filter_in_task(self, mq: MessageQueue, error: RocketliteError) -> None:
        """Pull ``mq``'s broker group with the tag filter from now on, applying the
        selector here; said once per broker group in this process."""
        self.in_task.add(mq.broker_name)
        if mq.broker_name not in _SAID_IN_TASK:
            _SAID_IN_TASK.add(mq.broker_name)
            log.warning(
                "broker group %s does not apply the SQL92 selector of option sqlFilter (%s); "
                "its messages are pulled whole and the Spark tasks apply the selector",
                mq.broker_name,
                error,
            )

    # -- the transport: how one pull reaches the broker, and what its answer holds ---------

    @abstractmethod
    def _call(self, mq: MessageQueue, offset: int, max_messages: int) -> AnswerT:
        """One pull at ``offset``, not retried."""

    @abstractmethod
    def _start(self, mq: MessageQueue, offset: int, max_messages: int) -> _Pending[AnswerT]:
        """The pull at ``offset``, sent without waiting for its answer."""

    @abstractmethod
    def _pause(self, error: RocketliteError, pause_s: float) -> None:
        """Wait before a retry."""

    @abstractmethod
    def _address(self, mq: MessageQueue) -> str:
        """Where ``mq``'s broker is, for messages."""

    @abstractmethod
    def _status(self, mq: MessageQueue, answer: AnswerT) -> PullStatus: ...

    @abstractmethod
    def _records(self, mq: MessageQueue, answer: AnswerT) -> pa.RecordBatch:
        """The records of a FOUND answer, decoded (the reader's columns)."""

    @abstractmethod
    def close(self) -> None: ...


#: broker groups a task of this process found not filtering by SQL92 and said so
_SAID_IN_TASK: set[str] = set()


def _check_progress(mq: MessageQueue, offset: int, following: int, status: PullStatus) -> None:
    if following <= offset:
        raise RocketliteError(
            f"pull of {mq.describe()} at offset {offset} answered {status.name} with "
            f"next offset {following}, which does not move forward; the broker is "
            "inconsistent"
        )


class GrpcReader(PullReader[messaging_pb2.PullMessagesResponse]):
    """Pulls from one rocketlite broker over gRPC (``PullMessages``, the answer's records
    indexed: see :func:`~rmq_spark.wire.pull.decode_pull_response`). It owns ``conn``."""

    def __init__(
        self,
        conn: Connection,
        options: SourceOptions,
        columns: tuple[str, ...],
        filter_in_task: tuple[str, ...] = (),
    ):
        super().__init__(options, columns, filter_in_task)
        self.conn = conn
        self._timeout_s = options.pull_timeout_ms / 1000

    def _request(
        self, mq: MessageQueue, offset: int, max_messages: int
    ) -> messaging_pb2.PullMessagesRequest:
        expression_type, expression = self.pull_filter(mq)
        return messaging_pb2.PullMessagesRequest(
            queue=mq_to_pb(mq),
            queue_offset=offset,
            max_messages=max_messages,
            max_bytes=PULL_MAX_BYTES,
            subscription_expression=expression,
            expression_type=expression_type,
        )

    def _refuses_selector(self, error: RocketliteError) -> bool:
        return refuses_sql92(error)

    def _call(
        self, mq: MessageQueue, offset: int, max_messages: int
    ) -> messaging_pb2.PullMessagesResponse:
        request = self._request(mq, offset, max_messages)
        response: messaging_pb2.PullMessagesResponse = self.conn.call(
            self.conn.messaging.PullMessages, request, timeout_s=self._timeout_s, retry=NO_RETRY
        )
        return response

    def _start(self, mq: MessageQueue, offset: int, max_messages: int) -> PendingCall:
        return self.conn.start(
            self.conn.messaging.PullMessages,
            self._request(mq, offset, max_messages),
            timeout_s=self._timeout_s,
        )

    def _pause(self, error: RocketliteError, pause_s: float) -> None:
        # the connection's wait ends early when it is back
        self.conn.pause_before_retry(error, pause_s)

    def _address(self, mq: MessageQueue) -> str:
        return self.conn.endpoint

    def _status(self, mq: MessageQueue, answer: messaging_pb2.PullMessagesResponse) -> PullStatus:
        try:
            return pull_status_from_pb(answer.status)
        except KeyError:
            raise RocketliteError(
                f"pull of {mq.describe()} got status {answer.status}, which this client does "
                "not know; is the broker newer than the client?"
            ) from None

    def _records(
        self, mq: MessageQueue, answer: messaging_pb2.PullMessagesResponse
    ) -> pa.RecordBatch:
        if mq.broker_name in self.in_task and self.selector is not None:
            decoded = decode_pull_response(mq, answer, with_properties(self.columns))
            return keep_selected(decoded, self.selector)
        return decode_pull_response(mq, answer, self.columns)  # checks the index

    def close(self) -> None:
        self.conn.close()


class RemotingReader(PullReader[PullAnswer]):
    """Pulls with RocketMQ's PULL_MESSAGE over the remoting protocol (option
    ``nameServer``): its answer's body the stored records back to back. The brokers'
    addresses come with the partition, so no name server is asked. Pulls ahead of the
    reader go out together on the replica's connection without waiting
    (:meth:`~rmq_spark.client.remoting.RemotingClient.start_pulls`)."""

    def __init__(
        self,
        client: RemotingClient,
        brokers: tuple[tuple[str, str], ...],
        options: SourceOptions,
        columns: tuple[str, ...],
        replicas: tuple[tuple[str, int, str], ...] = (),
        filter_in_task: tuple[str, ...] = (),
    ) -> None:
        super().__init__(options, columns, filter_in_task)
        self.client = client
        if options.selector is not None and task_only_reason(options.selector) is not None:
            self.in_task.update(name for name, _ in brokers)
        groups: dict[str, dict[int, str]] = {}
        for name, broker_id, address in replicas:
            groups.setdefault(name, {})[broker_id] = address
        for name, address in brokers:
            if name not in groups:
                client.learn_broker(name, address)
        for name, group in groups.items():
            client.learn_replicas(name, group)
        #: pulls started ahead of the reader, by queue and offset
        self._started: dict[tuple[MessageQueue, int], _Ahead] = {}
        #: per queue, how many messages its last pull found (where the next ones start)
        self._step: dict[MessageQueue, int] = {}
        self._end: dict[MessageQueue, int] = {}
        #: bytes of the answers held for decoding together (see :meth:`_enough`)
        self._held_bytes = 0

    def read_range(self, queue_range: QueueRange) -> Generator[pa.RecordBatch, None, None]:
        self._end[queue_range.mq] = queue_range.end
        return super().read_range(queue_range)

    def _start(self, mq: MessageQueue, offset: int, max_messages: int) -> _Pending[PullAnswer]:
        """The pull at ``offset``: one started ahead when its guess was right, else a new
        one; then, while the queue's pulls find whole batches (RocketMQ's brokers answer
        at most 32 messages a pull by default), the pulls after it are started too, each
        where the one before would end, so that several are in flight."""
        started = self._started.pop((mq, offset), None)
        for key in [k for k in self._started if k[0] == mq and k[1] < offset]:
            self._started.pop(key).cancel()  # guessed wrong: the pull moved elsewhere
        wanted = [] if started is not None else [(offset, max_messages)]
        step, end = self._step.get(mq, 0), self._end.get(mq, offset)
        if step > 0 and not self.broker_filters(mq):
            after = [(at, min(self.options.pull_batch_size, end - at)) for at in range(
                offset + step, min(end, offset + step * READ_AHEAD), step
            ) if (mq, at) not in self._started]  # fmt: skip
            # topped up a few at a time: they go out in one write
            if wanted or len(after) >= READ_AHEAD // 2:
                wanted.extend(after)
        if not wanted:
            assert started is not None
            return started
        pendings = self.client.start_pulls(mq, wanted, **self._pull_terms(mq))
        for pending in pendings:
            self._started[(mq, pending.offset)] = _Ahead(self, pending)
        if started is None:
            started = self._started.pop((mq, offset))
        return started

    def _range_done(self, mq: MessageQueue) -> None:
        for key in [k for k in self._started if k[0] == mq]:
            self._started.pop(key).cancel()
        self._step.pop(mq, None)

    def _enough(self, held: list[PullAnswer]) -> bool:
        self._held_bytes = len(held[-1].data) + (self._held_bytes if len(held) > 1 else 0)
        return self._held_bytes >= DECODE_BYTES

    def _decoded(self, mq: MessageQueue, held: list[PullAnswer]) -> pa.RecordBatch:
        selects = self.selector is not None and (
            mq.broker_name in self.in_task or any(answer.sizes is None for answer in held)
        )  # a broker that is not rocketlite's (no sizes) is checked: see the module doc
        if len(held) == 1 and not selects:
            return held[0].records(self.columns)
        data = b"".join(answer.data for answer in held)  # records are self-delimiting
        sizes = [answer.sizes for answer in held if answer.sizes is not None]
        joined = np.concatenate(sizes) if len(sizes) == len(held) else None
        if selects:
            assert self.selector is not None
            return decode_selected(data, joined, self.selector, self.columns)[0]
        return decode_records(data, sizes=joined, columns=self.columns)

    def _call(self, mq: MessageQueue, offset: int, max_messages: int) -> PullAnswer:
        answer = self.client.pull(mq, offset, max_messages=max_messages, **self._pull_terms(mq))
        return self.checked(mq, offset, answer)

    def _pull_terms(self, mq: MessageQueue) -> _PullTerms:
        """What every pull of ``mq`` carries besides its offset and size."""
        expression_type, expression = self.pull_filter(mq)
        return {
            "max_bytes": PULL_MAX_BYTES,
            "group": self.options.group,
            "expression": expression,
            "expression_type": expression_type,
        }

    def checked(self, mq: MessageQueue, offset: int, answer: PullAnswer) -> PullAnswer:
        """``answer`` of the pull of ``mq`` at ``offset`` as the read takes it: a slave's
        answers are read as a master's would be (see below); the queue's step is noted."""
        if answer.broker_id != MASTER_ID:
            answer = _as_master_would(mq, offset, answer)
        if answer.status == PullStatus.FOUND:
            self._step[mq] = answer.next_begin_offset - offset
        else:
            self._step.pop(mq, None)
        return answer

    def _pause(self, error: RocketliteError, pause_s: float) -> None:
        time.sleep(pause_s)

    def _refuses_selector(self, error: RocketliteError) -> bool:
        return refuses_sql92(error)

    def _filter_in_task(self, mq: MessageQueue, error: RocketliteError) -> None:
        super()._filter_in_task(mq, error)
        for key in [k for k in self._started if k[0].broker_name == mq.broker_name]:
            self._started.pop(key).cancel()  # sent with the selector

    def _address(self, mq: MessageQueue) -> str:
        replicas = self.client.replicas_of(mq.broker_name)
        if not replicas:
            return f"broker group {mq.broker_name!r}"
        where = ", ".join(f"id {i} at {a}" for i, a in sorted(replicas.items()))
        return f"broker group {mq.broker_name!r} ({where})"

    def _status(self, mq: MessageQueue, answer: PullAnswer) -> PullStatus:
        return answer.status

    def _records(self, mq: MessageQueue, answer: PullAnswer) -> pa.RecordBatch:
        return answer.records(self.columns)

    def close(self) -> None:
        for pending in self._started.values():
            pending.cancel()
        self._started.clear()
        self.client.close()


class _Ahead:
    """A pull :class:`RemotingReader` started ahead, its answer taken as the read takes it."""

    def __init__(self, reader: RemotingReader, pending: PendingPull) -> None:
        self.reader = reader
        self.pending = pending

    def result(self) -> PullAnswer:
        pending = self.pending
        return self.reader.checked(pending.mq, pending.offset, pending.result())

    def cancel(self) -> None:
        self.pending.cancel()


def _as_master_would(mq: MessageQueue, offset: int, answer: PullAnswer) -> PullAnswer:
    """A slave's answer to the pull of ``mq`` at ``offset`` as the master's would read."""
    if answer.status == PullStatus.NO_MATCHED_MSG and offset < answer.min_offset:
        # a RocketMQ slave answers an offset below its first one so, not with
        # OFFSET_ILLEGAL: retention deleted what the read has not reached
        return replace(answer, status=PullStatus.OFFSET_ILLEGAL)
    if _short_of(offset, answer):
        # A slave behind its master: what it lacks is not lost (the master has it),
        # so this is retried as an unavailable broker, not reported as data loss.
        raise UnavailableError(
            f"the slave (broker id {answer.broker_id}) of broker group "
            f"{mq.broker_name!r} holds {mq.describe()} only up to offset "
            f"{answer.max_offset}, short of offset {offset} this read needs, and the "
            "group's master did not answer"
        )
    return answer


def _short_of(offset: int, answer: PullAnswer) -> bool:
    """True when a pull at ``offset`` found nothing because the answering replica ends
    before it: no new message there, an offset past its end, or (a RocketMQ slave's answer
    to an offset it cannot check) a retry that does not move forward."""
    if answer.status == PullStatus.NO_NEW_MSG:
        return True
    if answer.status == PullStatus.OFFSET_ILLEGAL:
        return offset >= answer.max_offset
    return answer.status == PullStatus.NO_MATCHED_MSG and answer.next_begin_offset <= offset
