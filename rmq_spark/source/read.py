"""The read path of one Spark task: pull queue ranges, yield Arrow batches of rows.

Runs in Spark's Python workers, so it opens its own connections (a gRPC channel cannot be
pickled) and closes them when the task ends. Each
:class:`~rmq_spark.source.planning.QueueRange` is read exactly: pulls start at ``start``,
ask for at most what is left, and rows at or past ``end`` are dropped (a tag-filtered pull
may reach beyond it). Every pull's
records are decoded in one vectorised pass and turned into the source's rows
(:func:`~rmq_spark.source.schema.to_rows`); no Python code runs per message. Only the
columns the rows need are decoded (a ``.schema(...)`` of a few columns skips the rest), with
the queue offsets, and the tags under a tag filter. The next pull is sent before the current
answer is decoded, so the broker reads while the task decodes.

Statuses, as RocketMQ's pull defines them:

- FOUND: rows; the next pull starts at ``next_begin_offset``.
- NO_MATCHED_MSG: the tag filter skipped every entry scanned; ``next_begin_offset`` moved
  past them. A filtered gap is not data loss.
- OFFSET_ILLEGAL below the queue's min: retention deleted the rest of the range before it
  was read; past the max, or NO_NEW_MSG before ``end``: the queue now ends early (it was
  re-created). Both are data loss: ``failOnDataLoss`` fails the task naming the queue and
  offsets, or warns and skips.

A broker that is briefly unavailable (restarting) is retried ``maxRetries`` times with a
doubling backoff from ``retryBackoffMs``; so is a pull that timed out. A retry goes out as
soon as the connection is back (within about a second of the broker listening again), not
at the end of its backoff.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import InputPartition

from rmq_spark.client.connection import NO_RETRY, ClientConfig, Connection, PendingCall
from rmq_spark.client.remoting import PullAnswer, RemotingClient
from rmq_spark.client.short_circuit import ShortCircuit, ShortCircuitUnavailable
from rmq_spark.codec.arrow_decode import RECORD_SCHEMA, decode_records
from rmq_spark.codec.compression import inflate_bodies
from rmq_spark.codec.taghash import tag_hash_codes
from rmq_spark.errors import (
    DataLossError,
    NotFoundError,
    RocketliteError,
)
from rmq_spark.offsets.spark import DataLoss, data_loss_message
from rmq_spark.proto_gen.rocketlite.v1 import admin_pb2, messaging_pb2
from rmq_spark.pull_wire import decode_pull_response
from rmq_spark.retry import backoff_delays
from rmq_spark.source.options import SourceOptions
from rmq_spark.source.planning import PlannedPartition, QueueRange
from rmq_spark.source.schema import ALL_COLUMNS, Projection, to_rows
from rmq_spark.spark_options.connect_options import MAX_RETRY_BACKOFF_MS
from rmq_spark.structs import MessageQueue, PullStatus
from rmq_spark.wire import mq_to_pb, pull_status_from_pb

log = logging.getLogger("rmq_spark.source")

__all__ = ["RocketlitePartition", "decoded_columns", "read_partition"]

#: bytes asked for per pull. With the default pullBatchSize (8192) this caps one pull of
#: large messages at 16 MiB of records, well under the broker's max_pull_bytes (32 MiB) and
#: the 64 MiB gRPC limit, so a task's memory stays modest whatever the message size.
PULL_MAX_BYTES = 16 << 20


@dataclass(frozen=True)
class RocketlitePartition(InputPartition):
    """One Spark task: queue ranges to read in order, and where each broker is."""

    ranges: tuple[QueueRange, ...]
    #: (broker name, endpoint) for every broker of ``ranges``
    endpoints: tuple[tuple[str, str], ...]

    @classmethod
    def of(cls, planned: PlannedPartition, endpoints: dict[str, str]) -> RocketlitePartition:
        brokers = sorted({r.mq.broker_name for r in planned.ranges})
        return cls(planned.ranges, tuple((name, endpoints[name]) for name in brokers))

    @property
    def size(self) -> int:
        return sum(r.size for r in self.ranges)


def read_partition(
    partition: RocketlitePartition,
    options: SourceOptions,
    projection: Projection = ALL_COLUMNS,
) -> Iterator[pa.RecordBatch]:
    """Yield the rows (``projection``'s columns) of every range of ``partition`` as Arrow
    batches, in range order."""
    if options.store_path is not None:
        yield from _read_store(partition, options, projection)
        return
    config = ClientConfig(
        request_timeout_ms=options.pull_timeout_ms,
        retry=NO_RETRY,
        **options.tls_settings(),
        **options.credentials(),
    )
    endpoints = dict(partition.endpoints)
    if options.name_server is not None:
        yield from _read_remoting(partition, options, config, projection)
        return
    connections: dict[str, Connection] = {}
    local: dict[str, ShortCircuit | None] = {}
    try:
        for queue_range in partition.ranges:
            endpoint = endpoints[queue_range.mq.broker_name]
            if endpoint not in connections:
                connections[endpoint] = Connection(endpoint, config)
                local[endpoint] = _short_circuit(connections[endpoint], options)
            conn, sc = connections[endpoint], local[endpoint]
            if sc is not None:
                yield from _LocalRangeReader(conn, queue_range, options, projection, sc).batches()
            else:
                yield from _RangeReader(conn, queue_range, options, projection).batches()
    finally:
        for conn in connections.values():
            conn.close()
        for sc in local.values():
            if sc is not None:
                sc.close()


def _short_circuit(conn: Connection, options: SourceOptions) -> ShortCircuit | None:
    """A short-circuit connection to the broker behind ``conn`` when this task runs on its
    host (its socket is here and answers as that broker), else None: pull."""
    if not options.short_circuit:
        return None
    try:
        info = conn.call(conn.admin.GetBrokerInfo, admin_pb2.GetBrokerInfoRequest())
    except RocketliteError:
        return None  # the pulls will say what is wrong
    path = info.short_circuit_socket
    if not path or not os.path.exists(path):
        return None
    try:
        return ShortCircuit(
            path, info.broker_name, access_key=options.access_key, secret_key=options.secret_key
        )
    except ShortCircuitUnavailable as exc:
        log.info("short-circuit reads of %s are unavailable (%s); pulling", conn.endpoint, exc)
        return None


class _RangeReader:
    """Reads one queue range, see the module doc."""

    def __init__(
        self,
        conn: Connection,
        queue_range: QueueRange,
        options: SourceOptions,
        projection: Projection,
    ) -> None:
        self.conn = conn
        self.range = queue_range
        self.options = options
        self.projection = projection
        tags = options.subscription.tags
        self.tag_values = None if tags is None else pa.array(sorted(tags), pa.string())
        self.decoded = decoded_columns(projection, with_tags=tags is not None)

    @property
    def mq(self) -> MessageQueue:
        return self.range.mq

    def batches(self) -> Iterator[pa.RecordBatch]:
        offset, end = self.range.start, self.range.end
        ahead: PendingCall | None = None  # the pull at ``offset``, already started
        try:
            while offset < end:
                response = self._pull(offset, ahead)
                ahead = None
                if response is None:  # the queue is gone, and failOnDataLoss is false
                    return
                status = _status(self.mq, response)
                following = response.next_begin_offset
                if status in (PullStatus.FOUND, PullStatus.NO_MATCHED_MSG):
                    self._check_progress(offset, following, status)
                    if following < end:  # the broker reads on while this pull is decoded
                        ahead = self._start(following)
                    if status == PullStatus.FOUND:
                        rows = self._rows(response, end)
                        if rows.num_rows:
                            yield rows
                elif status == PullStatus.OFFSET_ILLEGAL and offset < response.min_offset:
                    self._lost(DataLoss(self.mq, "deleted", offset, response.min_offset))
                    following = response.min_offset
                else:  # NO_NEW_MSG or OFFSET_ILLEGAL past the end, before ``end``
                    self._lost(DataLoss(self.mq, "reset", end, response.max_offset))
                    return
                offset = following
        finally:
            if ahead is not None:
                ahead.cancel()

    def _check_progress(self, offset: int, following: int, status: PullStatus) -> None:
        if following <= offset:
            raise RocketliteError(
                f"pull of {self.mq.describe()} at offset {offset} answered {status.name} with "
                f"next offset {following}, which does not move forward; the broker is "
                "inconsistent"
            )

    def _request(self, offset: int) -> messaging_pb2.PullMessagesRequest:
        return messaging_pb2.PullMessagesRequest(
            queue=mq_to_pb(self.mq),
            queue_offset=offset,
            max_messages=min(self.options.pull_batch_size, self.range.end - offset),
            max_bytes=PULL_MAX_BYTES,
            subscription_expression=self.options.subscription.expression,
        )

    def _start(self, offset: int) -> PendingCall:
        return self.conn.start(
            self.conn.messaging.PullMessages,
            self._request(offset),
            timeout_s=self.options.pull_timeout_ms / 1000,
        )

    def _pull(
        self, offset: int, ahead: PendingCall | None
    ) -> messaging_pb2.PullMessagesResponse | None:
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
                return self._call(offset)
            except NotFoundError as exc:
                self._lost(DataLoss(self.mq, "vanished", offset), detail=str(exc))
                return None
            except RocketliteError as exc:
                if not exc.retriable:
                    raise
                if attempt == attempts:
                    raise type(exc)(
                        f"pull of {self.mq.describe()} at offset {offset} from "
                        f"{self._broker_address()} failed {attempts} times; last error: {exc}. "
                        "Is the broker running? Raise maxRetries or retryBackoffMs to wait "
                        "longer for a restarting broker"
                    ) from exc
                backoff_ms = next(delays_ms)
                log.warning(
                    "pull of %s at %d failed (%s); retry %d/%d within %d ms",
                    self.mq.describe(), offset, exc, attempt, attempts - 1, backoff_ms,
                )  # fmt: skip
                self._pause(exc, backoff_ms / 1000)
        raise AssertionError("unreachable")

    # -- how this reader reaches its broker (the remoting reader has its own) ---------------

    def _call(self, offset: int) -> messaging_pb2.PullMessagesResponse:
        """One pull at ``offset``, not retried."""
        timeout_s = self.options.pull_timeout_ms / 1000
        request = self._request(offset)
        return self.conn.call(
            self.conn.messaging.PullMessages, request, timeout_s=timeout_s, retry=NO_RETRY
        )

    def _pause(self, error: RocketliteError, pause_s: float) -> None:
        """Wait before a retry (the connection's wait ends early when it is back)."""
        self.conn.pause_before_retry(error, pause_s)

    def _broker_address(self) -> str:
        return self.conn.endpoint

    def _rows(self, response: messaging_pb2.PullMessagesResponse, end: int) -> pa.RecordBatch:
        records = decode_pull_response(self.mq, response, self.decoded)  # checks the index
        return self._to_rows(records, end)

    def _to_rows(self, records: pa.RecordBatch, end: int) -> pa.RecordBatch:
        offsets = records.column("queueOffset").to_numpy(zero_copy_only=False)
        inside = int(np.searchsorted(offsets, end))  # a filtered pull may pass the end
        if inside < records.num_rows:
            records = records.slice(0, inside)
        if self.tag_values is not None and records.num_rows:
            # The broker filtered on tag hash codes; different tags can share one.
            keep = pc.fill_null(pc.is_in(records.column("tags"), value_set=self.tag_values), False)
            records = records.filter(keep)
        if "body" in self.decoded:  # only the bodies of the rows kept
            records = inflate_bodies(records)
        return to_rows(records, self.mq.broker_name, self.projection)

    def _lost(self, loss: DataLoss, detail: str = "") -> None:
        fail = self.options.fail_on_data_loss
        message = data_loss_message([loss], fail_on_data_loss=fail)
        if detail:
            message += f"\n  (the broker said: {detail})"
        if fail:
            raise DataLossError(message)
        log.warning("%s", message)


def _read_remoting(
    partition: RocketlitePartition,
    options: SourceOptions,
    config: ClientConfig,
    projection: Projection,
) -> Iterator[pa.RecordBatch]:
    """:func:`read_partition` over RocketMQ's remoting protocol (option nameServer): the
    brokers' addresses come with the partition, so no name server is asked."""
    client = RemotingClient(options.name_server or "", config)
    ahead = ThreadPoolExecutor(1, thread_name_prefix="rmq-read-ahead")
    try:
        for name, address in partition.endpoints:
            client.learn_broker(name, address)
        for queue_range in partition.ranges:
            reader = _RemotingRangeReader(client, queue_range, options, projection, ahead)
            yield from reader.batches()
    finally:
        ahead.shutdown(wait=False, cancel_futures=True)
        client.close()


class _RemotingRangeReader(_RangeReader):
    """A range read with RocketMQ's PULL_MESSAGE: one pull at a time, its answer's body the
    stored records back to back (decoded by walking their sizes)."""

    def __init__(
        self,
        client: RemotingClient,
        queue_range: QueueRange,
        options: SourceOptions,
        projection: Projection,
        ahead: ThreadPoolExecutor,
    ):
        super().__init__(None, queue_range, options, projection)  # type: ignore[arg-type]
        self.client = client
        self._ahead = ahead

    def _start(self, offset: int):
        # the broker reads the next records while this thread decodes the last ones
        return self._ahead.submit(self._call, offset)

    def _call(self, offset: int) -> PullAnswer:  # type: ignore[override]
        return self.client.pull(
            self.mq,
            offset,
            max_messages=min(self.options.pull_batch_size, self.range.end - offset),
            max_bytes=PULL_MAX_BYTES,
            group=self.options.group,
            expression=self.options.subscription.expression,
        )

    def _pause(self, error: RocketliteError, pause_s: float) -> None:
        time.sleep(pause_s)

    def _broker_address(self) -> str:
        return self.client.broker_address(self.mq.broker_name) or self.mq.broker_name

    def _rows(self, response, end: int) -> pa.RecordBatch:
        return self._to_rows(response.records(self.decoded), end)


class _LocalRangeReader(_RangeReader):
    """A range read from the broker's files on this host (short-circuit reads: the broker
    checked the rights and passed the files); on :class:`ShortCircuitUnavailable` the rest
    of the range is pulled. Data loss is what a pull would report: a start below the queue's
    min (deleted), a queue that ends before the range does (reset)."""

    def __init__(
        self,
        conn: Connection,
        queue_range: QueueRange,
        options: SourceOptions,
        projection: Projection,
        sc: ShortCircuit,
    ) -> None:
        super().__init__(conn, queue_range, options, projection)
        self.sc = sc
        tags = options.subscription.tags
        self.tag_codes = None if tags is None else tag_hash_codes(sorted(tags))

    def batches(self) -> Iterator[pa.RecordBatch]:
        mq, offset, end = self.mq, self.range.start, self.range.end
        try:
            while offset < end:
                with self.sc.open_range(mq, offset, end) as local:
                    if offset < local.min_offset:
                        self._lost(DataLoss(mq, "deleted", offset, local.min_offset))
                        offset = local.min_offset
                        continue
                    if local.end <= offset:  # the queue ends before the range does
                        self._lost(DataLoss(mq, "reset", end, local.max_offset))
                        return
                    while offset < local.end:
                        data, sizes, offset = local.read(offset, PULL_MAX_BYTES, self.tag_codes)
                        if len(sizes):
                            records = decode_records(data, sizes=sizes, columns=self.decoded)
                            rows = self._to_rows(records, end)
                            if rows.num_rows:
                                yield rows
        except ShortCircuitUnavailable as exc:
            log.info("short-circuit read of %s stopped at %d (%s); pulling the rest",
                     mq.describe(), offset, exc)  # fmt: skip
            rest = replace(self.range, start=offset)
            yield from _RangeReader(self.conn, rest, self.options, self.projection).batches()


def _read_store(
    partition: RocketlitePartition, options: SourceOptions, projection: Projection
) -> Iterator[pa.RecordBatch]:
    """:func:`read_partition` from a store directory (option storePath), opened read-only
    where the task runs: the executor must see the directory at the same path."""
    from rmq_spark.source.store_access import open_store_view

    view = open_store_view(options)
    try:
        for queue_range in partition.ranges:
            yield from _StoreRangeReader(view, queue_range, options, projection).batches()
    finally:
        view.close()


class _StoreRangeReader(_RangeReader):
    """A range read from the store's files: the consume queue says where the records are,
    the commit log's mapped segments hold them; the same checks and rows as a pull's."""

    def __init__(
        self, view, queue_range: QueueRange, options: SourceOptions, projection: Projection
    ) -> None:
        super().__init__(None, queue_range, options, projection)  # type: ignore[arg-type]
        self.view = view

    def batches(self) -> Iterator[pa.RecordBatch]:
        mq, offset, end = self.mq, self.range.start, self.range.end
        low, high = self.view.queue_range(mq.topic, mq.queue_id)
        if offset < low:
            self._lost(DataLoss(mq, "deleted", offset, low))
            offset = low
        if high < end:
            self._lost(DataLoss(mq, "reset", end, high))
            end = high
        while offset < end:
            found = self.view.read_records(mq.topic, mq.queue_id, offset, end, PULL_MAX_BYTES)
            records = decode_records(found.buffer, sizes=found.sizes, columns=self.decoded)
            stamped = records.column("queueOffset").to_numpy()
            expected = np.arange(offset, offset + found.count)
            if not np.array_equal(stamped, expected):
                at = int(np.flatnonzero(stamped != expected)[0])
                raise RocketliteError(
                    f"the record at offset {offset + at} of {mq.describe()} in store directory "
                    f"{self.options.store_path} says it is at offset {int(stamped[at])}; the "
                    "store's consume queue and commit log disagree"
                )
            rows = self._to_rows(records, end)
            if rows.num_rows:
                yield rows
            offset += found.count


def decoded_columns(projection: Projection, *, with_tags: bool) -> tuple[str, ...]:
    """The decoder's columns a range read needs: the rows', the queue offsets (where a range
    ends), the tags ``with_tags`` (the reader checks the broker's tag filter), the sysflags
    with the bodies (they say which bodies are compressed)."""
    wanted = set(projection.record_columns()) | {"queueOffset"}
    if with_tags:
        wanted.add("tags")
    if "body" in wanted:
        wanted.add("sysFlag")
    return tuple(name for name in RECORD_SCHEMA.names if name in wanted)


def _status(mq: MessageQueue, response) -> PullStatus:
    if isinstance(response, PullAnswer):
        return response.status
    try:
        return pull_status_from_pb(response.status)
    except KeyError:
        raise RocketliteError(
            f"pull of {mq.describe()} got status {response.status}, which this client does not "
            "know; is the broker newer than the client?"
        ) from None
