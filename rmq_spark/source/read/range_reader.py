"""The one interface a Spark task reads through: :class:`RangeReader`, one adapter per path.

A task reaches the records of its queue ranges by one of four paths, each an adapter of
:class:`RangeReader`: pulls over gRPC (:class:`~.pulls.GrpcReader`), pulls over RocketMQ's
remoting protocol (:class:`~.pulls.RemotingReader`, option ``nameServer``), the broker's
files on this host (:class:`~.short_circuit.ShortCircuitReader`, short-circuit reads), or a
store directory (:class:`~.store_files.StoreFileReader`, option ``storePath``). An adapter
yields the records it read as decoded Arrow batches (the columns it was made with, see
:func:`decoded_columns`); the partition reader (:func:`~rmq_spark.source.read.read_partition`)
turns them into rows. Data loss is found by the adapter, which knows what its path says of a
queue that lost records, and reported the same way by all (:func:`report_loss`).
"""

from __future__ import annotations

import logging
from collections.abc import Generator
from typing import Protocol

import pyarrow as pa

from rmq_spark.codec.arrow_decode import RECORD_SCHEMA
from rmq_spark.errors import DataLossError
from rmq_spark.offsets.spark import DataLoss, data_loss_message
from rmq_spark.source.planning import QueueRange
from rmq_spark.source.schema import Projection

log = logging.getLogger("rmq_spark.source")

__all__ = ["PULL_MAX_BYTES", "RangeReader", "decoded_columns", "report_loss"]

#: bytes asked for per pull (or per read of files). With the default pullBatchSize (8192)
#: this caps one pull of large messages at 16 MiB of records, well under the broker's
#: max_pull_bytes (32 MiB) and the 64 MiB gRPC limit, so a task's memory stays modest
#: whatever the message size.
PULL_MAX_BYTES = 16 << 20


class RangeReader(Protocol):
    """One path to the records of queue ranges, opened for one Spark task."""

    def read_range(self, queue_range: QueueRange) -> Generator[pa.RecordBatch, None, None]:
        """The records of ``queue_range`` from its start, in offset order, decoded into
        Arrow (the reader's columns, ``queueOffset`` always among them). A batch may reach
        past the range's end (a tag-filtered pull may), which the caller cuts. Records the
        queue lost are reported with :func:`report_loss` (raising under
        ``failOnDataLoss``) and skipped."""
        ...

    def close(self) -> None:
        """Release what the reader holds (connections, mapped files); called once."""
        ...


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


def report_loss(loss: DataLoss, *, fail_on_data_loss: bool, detail: str = "") -> None:
    """Records a range will not yield: raise :class:`DataLossError` (``failOnDataLoss``) or
    log a warning; ``detail`` is what the broker said."""
    message = data_loss_message([loss], fail_on_data_loss=fail_on_data_loss)
    if detail:
        message += f"\n  (the broker said: {detail})"
    if fail_on_data_loss:
        raise DataLossError(message)
    log.warning("%s", message)
