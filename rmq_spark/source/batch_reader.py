"""The batch reader: ``spark.read.format("rocketlite")`` reads a fixed range of every queue.

``partitions()`` runs once, when Spark plans the query: it probes every broker, fixes the
start (``startingOffsets``, ``startingTimestamp``, ``group``...) and the end (``latest`` is
resolved here, once, so the result does not change while tasks run) and plans the ranges.
Every broker must answer: a batch read that silently skipped one would be wrong.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from rmq_spark.client.cluster import Cluster
from rmq_spark.errors import DataLossError, NotFoundError
from rmq_spark.offsets.spark import data_loss_message
from rmq_spark.source.discovery import client_config, offsets_at, resolve_start, take_snapshot
from rmq_spark.source.options import SourceOptions
from rmq_spark.source.planning import plan_for_options
from rmq_spark.source.positions import batch_ranges, ending_offsets
from rmq_spark.source.read import RocketlitePartition, read_partition

log = logging.getLogger("rmq_spark.source")

__all__ = ["RocketliteBatchReader"]


class RocketliteBatchReader(DataSourceReader):
    """Reads ``[start, end)`` of every queue the options select; see the module doc."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> list[InputPartition]:
        cluster = Cluster(self.options.endpoints, client_config(self.options))
        try:
            return self._plan(cluster)
        finally:
            cluster.close()

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, RocketlitePartition):  # Spark's stand-in for "nothing"
            return iter(())
        return read_partition(partition, self.options)

    def _plan(self, cluster: Cluster) -> list[InputPartition]:
        options = self.options
        snapshot = take_snapshot(cluster, options)
        snapshot.require_complete("plan the batch read")
        queues = snapshot.queues
        if not queues:
            if options.topics:
                raise NotFoundError(
                    f"topics {', '.join(options.topics)} have no readable queue on "
                    f"{', '.join(options.endpoints)}; check the names (option topic/topics) "
                    "and that the topic is readable (perm 4 or 6)"
                )
            log.warning("topicPattern %r matches no topic; nothing to read", options.topic_pattern)
            return []
        start = resolve_start(cluster, options, queues)
        ending = options.ending
        assert ending is not None
        at_time = {}
        if ending.kind == "timestamp":
            assert ending.timestamp_ms is not None
            at_time = offsets_at(cluster, {mq: ending.timestamp_ms for mq in queues})
        end = ending_offsets(ending, queues, at_time)
        ranges, losses = batch_ranges(start, end, queues)
        if losses:
            message = data_loss_message(losses, fail_on_data_loss=options.fail_on_data_loss)
            if options.fail_on_data_loss:
                raise DataLossError(message)
            log.warning("%s", message)
        planned = plan_for_options(ranges, options)
        endpoints = snapshot.endpoints
        return [RocketlitePartition.of(p, endpoints) for p in planned]
