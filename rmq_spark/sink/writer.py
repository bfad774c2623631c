"""The pyspark writers of the ``rocketlite`` sink: ``df.write`` and ``df.writeStream``.

Each task runs :func:`write_task` over its partition's Arrow batches and returns a
:class:`~rmq_spark.sink.send.SinkCommit`; the driver's ``commit`` ends the batch on every
broker (:mod:`rmq_spark.sink.commit`), ``abort`` rolls the batch back. Through
``nameServer`` the tasks send RocketMQ half messages and the commit ends them once, from a
record in the query's checkpoint (:mod:`rmq_spark.sink.half_commit`). Without exactly once
(``exactlyOnce=false``) the tasks' sends are visible at once and commit and abort have
nothing to do: rows of a retried task or a replayed batch are written again (at least once,
as Spark's Kafka sink).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Iterator
from typing import cast

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from rmq_spark.errors import InvalidArgumentError
from rmq_spark.sink.commit import abort_batch, end_batch
from rmq_spark.sink.half_commit import (
    abort_remoting_batch,
    end_remoting_batch,
    ensure_responder,
)
from rmq_spark.sink.half_record import SinkState, state_path
from rmq_spark.sink.options import SinkOptions
from rmq_spark.sink.rows import ColumnPlan
from rmq_spark.sink.send import SinkCommit, TaskWriter, new_transaction_id

log = logging.getLogger("rmq_spark.sink")

__all__ = ["RocketliteBatchWriter", "RocketliteStreamWriter", "write_task"]

#: the local property Spark sets to the micro-batch id while it runs one
_BATCH_ID_PROPERTY = "streaming.sql.batchId"


def write_task(
    options: SinkOptions, plan: ColumnPlan, sink_id: str, batches: Iterable[pa.RecordBatch]
) -> SinkCommit:
    from pyspark import TaskContext

    context = TaskContext.get()
    partition = context.partitionId() if context else 0
    attempt = context.attemptNumber() if context else 0
    batch = context.getLocalProperty(_BATCH_ID_PROPERTY) if context else None
    txn = new_transaction_id(sink_id, batch, partition, attempt)
    writer = TaskWriter(options, plan, sink_id, txn, partition, batch)
    try:
        for record_batch in batches:
            writer.write(record_batch)
        return writer.finish()
    finally:
        writer.close()


class RocketliteBatchWriter(DataSourceArrowWriter):
    """``df.write.format("rocketlite")``: one job is one batch of a sink of its own."""

    def __init__(self, options: SinkOptions, plan: ColumnPlan) -> None:
        self.options = options
        self.plan = plan
        self.sink_id = f"job-{uuid.uuid4().hex}"

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommit:
        return write_task(self.options, self.plan, self.sink_id, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        if not self.options.exactly_once:
            return
        if self.options.name_server is not None:
            end_remoting_batch(
                self.options, self.sink_id, 0, _ours(messages), None, ordered=_ordered(self.plan)
            )
            return
        end_batch(self.options, self.sink_id, 0, _ours(messages))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        if not self.options.exactly_once:
            return
        if self.options.name_server is not None:
            abort_remoting_batch(self.options, self.sink_id, _ours(messages))
            return
        abort_batch(self.options, self.sink_id, 0)


class RocketliteStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("rocketlite")``: every micro-batch ends on the brokers once,
    under the query's sink id (stable across restarts from its checkpoint)."""

    def __init__(self, options: SinkOptions, plan: ColumnPlan) -> None:
        self.options = options
        self.plan = plan
        self.sink_id = options.stream_sink_id() if options.exactly_once else "at-least-once"
        self._state_path = None
        if options.exactly_once and options.name_server is not None:
            if options.checkpoint_location is None:
                raise InvalidArgumentError(
                    "exactly-once writes through nameServer record each micro-batch in the "
                    "query's checkpoint: set .option('checkpointLocation', ...) on "
                    "writeStream, or exactlyOnce=false for at-least-once writes"
                )
            self._state_path = state_path(options.checkpoint_location)
            ensure_responder(options, self.sink_id, SinkState(self._state_path))

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommit:
        return write_task(self.options, self.plan, self.sink_id, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        if self._state_path is not None:
            state = SinkState(self._state_path)
            ended = end_remoting_batch(
                self.options, self.sink_id, batchId, _ours(messages), state,
                ordered=_ordered(self.plan),
            )  # fmt: skip
            if ended.replayed:
                log.warning(
                    "batch %d of sink %s was recorded by an earlier run of the query; the "
                    "replay's %d rows were rolled back",
                    batchId,
                    self.sink_id,
                    ended.rolled_back,
                )
            return
        if self.options.exactly_once:
            end = end_batch(self.options, self.sink_id, batchId, _ours(messages))
            if end.replayed:
                log.warning(
                    "batch %d of sink %s was committed by an earlier run of the query; the "
                    "replay's rows were rolled back",
                    batchId,
                    self.sink_id,
                )

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        if self._state_path is not None:
            state = SinkState(self._state_path)
            abort_remoting_batch(self.options, self.sink_id, _ours(messages), state, batchId)
            return
        if self.options.exactly_once:
            abort_batch(self.options, self.sink_id, batchId)


def _ordered(plan: ColumnPlan) -> bool:
    """Rows of one queue keep their order when the write names their queue (a shardingKey
    or queueId column): their half messages are then committed one after the other."""
    return plan.has("shardingKey") or plan.has("queueId")


def _ours(messages: list[WriterCommitMessage | None]) -> list[SinkCommit | None]:
    """The commit messages Spark hands back: what :meth:`write` returned in each task (None
    for a task that did not finish)."""
    return cast(list[SinkCommit | None], messages)
