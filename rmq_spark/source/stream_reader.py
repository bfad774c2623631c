"""The streaming reader: offsets per trigger, admission control, commits to the broker.

Spark keeps one reader per query in a long-lived Python process on the driver and calls, in
order: ``prepareForTriggerAvailableNow`` (AvailableNow only), ``initialOffset`` (new queries
only, possibly twice), then per trigger ``latestOffset(start, limit)``,
``reportLatestOffset``, ``partitions(start, end)`` and, once a batch is done and the next one
planned, ``commit(end)``. Each trigger probes the brokers once (see
:mod:`~rmq_spark.source.discovery`): new topics and queues join at offset 0, data loss is
found before anything is planned, and a broker that does not answer keeps its queues where
they were (the query goes on without them until it is back; under Trigger.AvailableNow the
query fails instead, rather than end short of the offsets it started with).

Group offsets: ``commit(end)`` writes the exclusive end offsets to the broker for ``group``.
Spark never commits the last batch of a run (it signals a batch's end only when planning the
next one), so ``latestOffset(start)`` commits ``start`` as well: Spark asks for it only once
the batch ending there has completed. Commits are best effort (a failure is a warning); the
checkpoint is what a restarted query resumes from.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, SupportsTriggerAvailableNow

from rmq_spark import clock
from rmq_spark.client.offsets import query_range_sizes
from rmq_spark.errors import DataLossError, RocketliteError, UnavailableError
from rmq_spark.offsets.spark import (
    DataLoss,
    Offsets,
    OffsetsJson,
    data_loss_message,
    from_json_dict,
    to_json_dict,
)
from rmq_spark.source.access import BrokerAccess, GrpcAccess, filter_in_task, open_access
from rmq_spark.source.discovery import Snapshot, describe_queues, resolve_start
from rmq_spark.source.limits import (
    TriggerLimits,
    backlogs,
    byte_budgets,
    limit_offsets,
    should_delay,
)
from rmq_spark.source.options import SourceOptions
from rmq_spark.source.planning import plan_for_options
from rmq_spark.source.positions import ranges_from, reconcile
from rmq_spark.source.read import RocketlitePartition, read_partition
from rmq_spark.source.schema import ALL_COLUMNS, Projection
from rmq_spark.structs import MessageQueue

log = logging.getLogger("rmq_spark.source")

__all__ = ["RocketliteStreamReader"]


class RocketliteStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("rocketlite")``: see the module doc."""

    def __init__(self, options: SourceOptions, projection: Projection = ALL_COLUMNS) -> None:
        self.options = options
        #: the columns the tasks yield (a schema given with .schema(...))
        self.projection = projection
        self.limits = TriggerLimits.from_options(options)
        self._access: BrokerAccess | None = None
        self._initial: OffsetsJson | None = None
        #: Trigger.AvailableNow: the latest offsets when the query started
        self._target: Offsets | None = None
        self._latest: Offsets | None = None
        #: the highest end each queue had at an earlier trigger: one that ends lower now
        #: was re-created, and must not be read as the continuation of the old one
        self._seen_max: Offsets = {}
        self._endpoints: dict[str, str] = {}
        #: broker name -> broker id -> address (nameServer: every replica of a group)
        self._replicas: dict[str, dict[int, str]] = {}
        self._silent_groups: set[str] = set()
        self._last_trigger_ms: int | None = None
        self._committed: OffsetsJson | None = None
        #: broker group -> why it does not apply the sqlFilter selector (None: it does),
        #: asked once per group
        self._sql92_refusals: dict[str, str | None] = {}

    def __getstate__(self) -> dict[str, Any]:
        # Spark pickles the reader for its tasks; connections stay on the driver.
        return {**self.__dict__, "_access": None}

    # --- offsets -------------------------------------------------------------------------

    def initialOffset(self) -> OffsetsJson:
        """Where a query without a checkpoint starts; fixed once (Spark may ask twice)."""
        if self._initial is None:
            snapshot = self._snapshot()
            snapshot.require_complete("fix the query's starting offsets")
            queues = snapshot.queues
            if not queues:
                log.warning(
                    "no readable queue matches %s on %s yet; the query starts empty and "
                    "reads new topics from their first message",
                    self._target_text(),
                    self._client().where,
                )
            self._initial = to_json_dict(resolve_start(self._client(), self.options, queues))
        return self._initial

    def prepareForTriggerAvailableNow(self) -> None:
        snapshot = self._snapshot()
        snapshot.require_complete("fix the offsets a Trigger.AvailableNow query reads up to")
        self._target = {mq: answer.max_offset for mq, answer in snapshot.queues.items()}
        self._seen_max.update(self._target)

    def latestOffset(self, start: OffsetsJson, limit: ReadLimit) -> OffsetsJson:
        """The end of the next batch under ``limit``; ``start`` itself when nothing is new."""
        self._commit(start)  # everything before ``start`` has been processed
        limits = self.limits.for_read_limit(limit)
        snapshot = self._snapshot()
        if not snapshot.brokers and self._target is None:
            log.warning(
                "no broker answered (%s); no new data this trigger", snapshot.describe_failures()
            )
            return start
        state = reconcile(
            self._subscribed(start),
            snapshot.queues,
            snapshot.answered,
            self._seen_max,
            snapshot.from_slave,
        )
        if state.losses:
            self._data_loss(state.losses)
        self._warn_silent(state.silent, snapshot)
        silent = set(state.silent)
        self._seen_max.update(
            (mq, v)
            for mq, v in state.latest.items()
            if mq not in silent and not snapshot.from_slave(mq.broker_name)
        )
        self._check_target_reachable(state.start, state.silent, snapshot)
        self._latest = dict(state.latest)
        latest = self._available_now_cap(state.start, state.latest)
        waiting = backlogs(state.start, latest)
        now_ms = clock.now_ms()
        if should_delay(
            sum(waiting.values()),
            limits,
            last_trigger_ms=self._last_trigger_ms,
            now_ms=now_ms,
            available_now=self._target is not None,
        ):
            return start
        end = limit_offsets(state.start, latest, limits)
        if limits.max_bytes is not None:
            end = self._within_bytes(state.start, end, limits.max_bytes)
        for loss in state.losses:
            if loss.kind == "shrunk":
                # This batch reads nothing of it; the next one starts at its first message
                # (a range starting at the old offset would continue the old queue).
                end[loss.mq] = state.start[loss.mq]
        if waiting:
            self._last_trigger_ms = now_ms
        return to_json_dict(end)

    def getDefaultReadLimit(self) -> ReadLimit:
        return self.limits.default_read_limit()

    def reportLatestOffset(self) -> OffsetsJson | None:
        return None if self._latest is None else to_json_dict(self._latest)

    # --- planning and reading ------------------------------------------------------------

    def partitions(self, start: OffsetsJson, end: OffsetsJson) -> Sequence[InputPartition]:
        """One task per queue with new data (or the planning the options ask for)."""
        if start == end:
            return []
        ranges = ranges_from(
            from_json_dict(start, "start offset"), from_json_dict(end, "end offset")
        )
        planned = plan_for_options(ranges, self.options)
        endpoints = self._endpoints_of({mq.broker_name for mq in ranges})
        # where a selector is probed: each queue's end as of the last trigger (nothing past
        # it to scan), else the range's end
        probe_at = {mq: (self._latest or {}).get(mq, r[1]) for mq, r in ranges.items()}
        in_task = filter_in_task(self._client(), self.options, probe_at, self._sql92_refusals)
        return [RocketlitePartition.of(p, endpoints, self._replicas, in_task) for p in planned]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, RocketlitePartition), partition
        return read_partition(partition, self.options, self.projection)

    def commit(self, end: OffsetsJson) -> None:
        self._commit(end)

    def stop(self) -> None:
        if self._access is not None:
            self._access.close()
            self._access = None

    # --- internals -----------------------------------------------------------------------

    def _client(self) -> BrokerAccess:
        if self._access is None:
            self._access = open_access(self.options)
        return self._access

    def _snapshot(self) -> Snapshot:
        snapshot = self._client().snapshot(self.options)
        self._endpoints.update(snapshot.endpoints)
        self._replicas.update(snapshot.replicas)
        return snapshot

    def _within_bytes(self, start: Offsets, end: Offsets, max_bytes: int) -> Offsets:
        """``end`` narrowed so the batch holds at most ``max_bytes`` of records (see
        :mod:`~rmq_spark.source.limits`): one size query, and one more when over."""
        ranges = {mq: (start[mq], end[mq]) for mq in end if end[mq] > start[mq]}
        if not ranges:
            return end
        access = self._client()
        assert isinstance(access, GrpcAccess)  # maxBytesPerTrigger is refused otherwise
        sizes = query_range_sizes(access.cluster, ranges)
        budgets = byte_budgets({mq: size.size_bytes for mq, size in sizes.items()}, max_bytes)
        if budgets is None:
            return end
        fitted = query_range_sizes(access.cluster, ranges, budgets)
        narrowed = dict(end)
        for mq, size in fitted.items():
            assert size.budget_end_offset is not None
            narrowed[mq] = min(end[mq], max(start[mq] + 1, size.budget_end_offset))
        return narrowed

    def _endpoints_of(self, brokers: set[str]) -> dict[str, str]:
        # After a restart Spark may re-plan the last batch before any trigger probed.
        for name in sorted(brokers - self._endpoints.keys()):
            self._endpoints[name] = self._client().endpoint_of(name)
        return self._endpoints

    def _subscribed(self, start: OffsetsJson) -> Offsets:
        """``start`` without topics the options no longer read (changed since the checkpoint
        was written): those are dropped, not reported as lost."""
        offsets = from_json_dict(start, "start offset")
        dropped = sorted({mq.topic for mq in offsets if not self.options.subscribes(mq.topic)})
        if dropped:
            log.warning(
                "topics %s are in the checkpoint but no longer read by this query (%s); "
                "their offsets are dropped",
                ", ".join(dropped),
                self._target_text(),
            )
        return {mq: offset for mq, offset in offsets.items() if mq.topic not in dropped}

    def _available_now_cap(self, start: Offsets, latest: Offsets) -> Offsets:
        """Under Trigger.AvailableNow, nothing past the offsets seen when it started; queues
        that appeared since are not read at all."""
        if self._target is None:
            return latest
        target = self._target
        return {mq: min(value, target.get(mq, start[mq])) for mq, value in latest.items()}

    def _check_target_reachable(
        self, start: Offsets, silent: list[MessageQueue], snapshot: Snapshot
    ) -> None:
        """Under Trigger.AvailableNow a silent broker would end the query short of the
        offsets it promised to reach: fail instead (after the client's retries)."""
        if self._target is None:
            return
        behind = [mq for mq in silent if start[mq] < self._target.get(mq, 0)]
        if not snapshot.brokers or behind:
            brokers = sorted({mq.broker_name for mq in behind}) or ["every broker"]
            raise UnavailableError(
                f"Trigger.AvailableNow cannot read up to the offsets it started with: "
                f"{', '.join(brokers)} did not answer ({snapshot.describe_failures()}); "
                "restart the query once the brokers are back (it resumes from its checkpoint)"
            )

    def _warn_silent(self, silent: list[MessageQueue], snapshot: Snapshot) -> None:
        """Say, each time it changes, which brokers the query goes on without: their
        queues keep their offsets and are read again once a replica answers."""
        groups = {mq.broker_name for mq in silent}
        if groups == self._silent_groups:
            return
        self._silent_groups = groups
        if groups:
            log.warning(
                "the query goes on without broker %s (queues kept at their offsets: %s); "
                "not in the route, not answering, or read from a slave that is behind%s",
                ", ".join(sorted(groups)),
                describe_queues(silent),
                f" ({snapshot.describe_failures()})" if snapshot.failures else "",
            )
        else:
            log.warning("every broker the query reads answers again")

    def _data_loss(self, losses: list[DataLoss]) -> None:
        fail = self.options.fail_on_data_loss
        message = data_loss_message(losses, fail_on_data_loss=fail)
        if fail:
            raise DataLossError(message)
        log.warning("%s", message)

    def _commit(self, offsets_json: OffsetsJson) -> None:
        """Write ``offsets_json`` as the group's offsets on every broker (best effort)."""
        if not self.options.commit_offsets or offsets_json == self._committed:
            return
        assert self.options.group is not None
        by_broker: dict[str, dict[MessageQueue, int]] = {}
        for mq, offset in from_json_dict(offsets_json, "committed offset").items():
            by_broker.setdefault(mq.broker_name, {})[mq] = offset
        complete = True
        for broker, offsets in sorted(by_broker.items()):
            try:
                self._client().commit(self.options.group, offsets)
            except RocketliteError as exc:
                complete = False
                log.warning(
                    "could not commit the offsets of group %r on broker %s (the checkpoint "
                    "still has them; retried at the next batch): %s",
                    self.options.group,
                    broker,
                    exc,
                )
        if complete:
            self._committed = offsets_json

    def _target_text(self) -> str:
        if self.options.topic_pattern is not None:
            return f"topicPattern {self.options.topic_pattern!r}"
        return f"topics {', '.join(self.options.topics)}"
