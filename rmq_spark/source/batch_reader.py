"""The batch reader: ``spark.read.format("rocketlite")`` reads a fixed range of every queue.

``partitions()`` runs once, when Spark plans the query: it probes every broker, fixes the
start (``startingOffsets``, ``startingTimestamp``, ``group``...) and the end (``latest`` is
resolved here, once, so the result does not change while tasks run) and plans the ranges.
Every broker must answer: a batch read that silently skipped one would be wrong.
``read()`` yields the columns of the reader's projection (all of them by default).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from dataclasses import replace

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, Filter, InputPartition

from rmq_spark.client.offsets import QueueOffsets
from rmq_spark.codec.subscription import parse_subscription
from rmq_spark.errors import DataLossError, NotFoundError
from rmq_spark.offsets.spark import Offsets, data_loss_message
from rmq_spark.source.access import BrokerAccess, filter_in_task, open_access
from rmq_spark.source.discovery import resolve_start
from rmq_spark.source.key_lookup import narrowed, offsets_by_key, spans
from rmq_spark.source.options import SourceOptions
from rmq_spark.source.planning import plan_for_options
from rmq_spark.source.positions import batch_ranges, ending_offsets
from rmq_spark.source.pushdown import Pushed, push_filters
from rmq_spark.source.read import RocketlitePartition, read_partition
from rmq_spark.source.schema import ALL_COLUMNS, Projection
from rmq_spark.source.sql_pushdown import and_selectors, translate
from rmq_spark.structs import MessageQueue

log = logging.getLogger("rmq_spark.source")

__all__ = ["FilteringBatchReader", "RocketliteBatchReader"]


class RocketliteBatchReader(DataSourceReader):
    """Reads ``[start, end)`` of every queue the options select; see the module doc."""

    def __init__(self, options: SourceOptions, projection: Projection = ALL_COLUMNS) -> None:
        self.options = options
        self.projection = projection

    # Without filters taken over from Spark nothing is narrowed; see FilteringBatchReader.
    def _selected(
        self, queues: dict[MessageQueue, QueueOffsets]
    ) -> dict[MessageQueue, QueueOffsets]:
        return queues

    def _narrowed(
        self, access: BrokerAccess, start: Offsets, end: Offsets
    ) -> tuple[Offsets, Offsets]:
        return start, end

    def partitions(self) -> list[InputPartition]:
        access = open_access(self.options)
        try:
            return self._plan(access)
        finally:
            access.close()

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, RocketlitePartition):  # Spark's stand-in for "nothing"
            return iter(())
        return read_partition(partition, self.options, self.projection)

    def _plan(self, access: BrokerAccess) -> list[InputPartition]:
        options = self.options
        snapshot = access.snapshot(options)
        snapshot.require_complete("plan the batch read")
        queues = snapshot.queues
        if not queues:
            if options.topics:
                raise NotFoundError(
                    f"topics {', '.join(options.topics)} have no readable queue on "
                    f"{access.where}; check the names (option topic/topics) "
                    "and that the topic is readable (perm 4 or 6)"
                )
            log.warning("topicPattern %r matches no topic; nothing to read", options.topic_pattern)
            return []
        queues = self._selected(queues)
        if not queues:  # the query's filters leave no queue to read
            return []
        start = resolve_start(access, options, queues)
        ending = options.ending
        assert ending is not None
        at_time = {}
        if ending.kind == "timestamp":
            assert ending.timestamp_ms is not None
            at_time = access.offsets_at({mq: ending.timestamp_ms for mq in queues})
        end = ending_offsets(ending, queues, at_time)
        start, end = self._narrowed(access, start, end)
        ranges, losses = batch_ranges(start, end, queues)
        found = None
        if options.message_key is not None:
            found = offsets_by_key(access, {mq.topic for mq in queues}, options.message_key)
            ranges = spans(ranges, found)
        if losses:
            message = data_loss_message(losses, fail_on_data_loss=options.fail_on_data_loss)
            if options.fail_on_data_loss:
                raise DataLossError(message)
            log.warning("%s", message)
        planned = plan_for_options(ranges, options)
        if found is not None:
            planned = narrowed(planned, found)
        endpoints, replicas = snapshot.endpoints, snapshot.replicas
        maxima = {mq: offsets.max_offset for mq, offsets in queues.items()}
        in_task = filter_in_task(access, options, maxima, {})
        return [RocketlitePartition.of(p, endpoints, replicas, in_task) for p in planned]


class FilteringBatchReader(RocketliteBatchReader):
    """A batch reader that takes over the filters the brokers answer cheaply
    (:mod:`~rmq_spark.source.pushdown`): fewer queues, narrower ranges, the broker's tag
    filter; and filters on properties (the fields of a ``properties`` struct, ``tags``) as a
    SQL92 selector the brokers apply (:mod:`~rmq_spark.source.sql_pushdown`), ANDed with
    the option ``sqlFilter``. The source hands it out for reads with the option
    ``filterPushdown``. Spark pushes filters when the session turned on
    ``spark.sql.python.filterPushdown.enabled``;
    without it, pyspark refuses the read with ``DATA_SOURCE_PUSHDOWN_DISABLED``, naming
    that setting (a read that asked for pushdown does not quietly pull everything)."""

    def __init__(self, options: SourceOptions, projection: Projection = ALL_COLUMNS) -> None:
        super().__init__(options, projection)
        self.pushed = Pushed()

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        """Take the filters the brokers answer; return those Spark must still apply."""
        # Filters name the read's columns, which a projection may have spelled differently.
        columns = self.projection.column_by_name
        self.pushed, rest = push_filters(filters, columns)
        tags = self.pushed.tags
        if tags is not None:
            wanted = self.options.subscription.tags
            tags = tags if wanted is None else tags & wanted
            if tags:  # the empty case reads nothing at all (see _plan)
                expression = " || ".join(sorted(tags))
                self.options = replace(self.options, subscription=parse_subscription(expression))
            self.pushed.tags = frozenset(tags)
        # Filters on properties (a properties struct's fields, tags) as a SQL92 selector
        translated = translate(rest, columns, self.projection.property_types)
        if translated.selector is not None:
            selector = and_selectors(self.options.sql_filter, translated.selector)
            self.options = replace(self.options, sql_filter=selector)
            self.pushed.taken += translated.exact
            log.info("the brokers select by %r (filters of Spark's)", translated.selector)
        if self.pushed.taken or self.pushed.narrows_time:
            log.info("filters taken over from Spark: %s", self.pushed.taken)
        return translated.rest

    def partitions(self) -> list[InputPartition]:
        if self.pushed.empty:
            return []
        return super().partitions()

    def _selected(
        self, queues: dict[MessageQueue, QueueOffsets]
    ) -> dict[MessageQueue, QueueOffsets]:
        topics, ids = self.pushed.topics, self.pushed.queue_ids
        return {
            mq: offsets
            for mq, offsets in queues.items()
            if (topics is None or mq.topic in topics) and (ids is None or mq.queue_id in ids)
        }

    def _narrowed(
        self, access: BrokerAccess, start: Offsets, end: Offsets
    ) -> tuple[Offsets, Offsets]:
        low, high = self.pushed.offsets
        start = {mq: max(offset, low) for mq, offset in start.items()}
        end = {mq: min(offset, high) for mq, offset in end.items()}
        if self.pushed.narrows_time:
            first_ms, end_ms = self.pushed.store_ms
            if first_ms > 0:
                found = access.offsets_at({mq: first_ms for mq in start})
                start = {mq: max(offset, found[mq]) for mq, offset in start.items()}
            if end_ms < 2**63 - 1:
                found = access.offsets_at({mq: end_ms for mq in end})
                end = {mq: min(offset, found[mq]) for mq, offset in end.items()}
        return start, end
