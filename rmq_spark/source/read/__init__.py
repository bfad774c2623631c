"""The read path of one Spark task: read queue ranges, yield Arrow batches of rows.

Runs in Spark's Python workers, so it opens its own connections (a gRPC channel cannot be
pickled) and closes them when the task ends. :func:`read_partition` reads every range
of a :class:`RocketlitePartition` through one
:class:`~rmq_spark.source.read.range_reader.RangeReader`, the adapter of the task's path:

- :class:`~.pulls.GrpcReader`: pulls from rocketlite brokers over gRPC (option
  ``endpoints``), or :class:`~.short_circuit.ShortCircuitReader` for a broker on this host
  (its files, read directly after the broker checked the rights; the default);
- :class:`~.pulls.RemotingReader`: pulls over RocketMQ's remoting protocol (``nameServer``);
- :class:`~.store_files.StoreFileReader`: a store directory, no broker (``storePath``).

Each :class:`~rmq_spark.source.planning.QueueRange` is read exactly: the adapter starts at
``start`` and reads towards ``end``, and rows at or past ``end`` are dropped here (a
tag-filtered pull may reach beyond it). The records an adapter yields were decoded in one
vectorised pass and are turned into the source's rows
(:func:`~rmq_spark.source.schema.to_rows`); no Python code runs per message. Only the
columns the rows need are decoded (a ``.schema(...)`` of a few columns skips the rest), with
the queue offsets, and the tags under a tag filter, whose tags are checked here (a broker
filters on tag hash codes, which different tags may share). A SQL92 selector (option
``sqlFilter``) is applied by each adapter: by the broker a pull goes to, or by the task
where it reads files or the broker does not filter by SQL92; the rows are those it picks.
"""

from __future__ import annotations

from collections.abc import Collection, Generator, Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import InputPartition

from rmq_spark.client.connection import NO_RETRY, ClientConfig, Connection
from rmq_spark.client.remoting import RemotingClient
from rmq_spark.codec.compression import inflate_bodies
from rmq_spark.source.options import SourceOptions
from rmq_spark.source.planning import PlannedPartition, QueueRange
from rmq_spark.source.read.pulls import GrpcReader, RemotingReader
from rmq_spark.source.read.range_reader import RangeReader, decoded_columns
from rmq_spark.source.read.short_circuit import ShortCircuitReader, open_short_circuit
from rmq_spark.source.schema import ALL_COLUMNS, Projection, to_rows

__all__ = ["RangeReader", "RocketlitePartition", "decoded_columns", "read_partition"]


@dataclass(frozen=True)
class RocketlitePartition(InputPartition):
    """One Spark task: queue ranges to read in order, and where each broker is."""

    ranges: tuple[QueueRange, ...]
    #: (broker name, endpoint) for every broker of ``ranges``
    endpoints: tuple[tuple[str, str], ...]
    #: (broker name, broker id, address) of every replica of those brokers, where a name
    #: server's route named them (option nameServer)
    replicas: tuple[tuple[str, int, str], ...] = ()
    #: broker names whose brokers do not apply the read's SQL92 selector (option
    #: sqlFilter): they are pulled with the tag filter, and the task applies the selector
    filter_in_task: tuple[str, ...] = ()

    @classmethod
    def of(
        cls,
        planned: PlannedPartition,
        endpoints: dict[str, str],
        replicas: dict[str, dict[int, str]] | None = None,
        filter_in_task: Collection[str] = (),
    ) -> RocketlitePartition:
        brokers = sorted({r.mq.broker_name for r in planned.ranges})
        known = replicas or {}
        return cls(
            planned.ranges,
            tuple((name, endpoints[name]) for name in brokers),
            tuple(
                (name, broker_id, address)
                for name in brokers
                for broker_id, address in sorted((known.get(name) or {}).items())
            ),
            tuple(name for name in brokers if name in filter_in_task),
        )

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
    columns = decoded_columns(projection, with_tags=options.subscription.tags is not None)
    rows = _Rows(options, projection, columns)
    reader = open_reader(partition, options, columns)
    try:
        for queue_range in partition.ranges:
            batches = reader.read_range(queue_range)
            try:
                for records in batches:
                    batch = rows.of(records, queue_range)
                    if batch.num_rows:
                        yield batch
            finally:
                batches.close()  # at once when the task stops early: a pull ahead is cancelled
    finally:
        reader.close()


def open_reader(
    partition: RocketlitePartition, options: SourceOptions, columns: tuple[str, ...]
) -> RangeReader:
    """The range reader of the path ``options`` choose, decoding ``columns``."""
    if options.store_path is not None:
        from rmq_spark.source.read.store_files import StoreFileReader  # the store, only here

        return StoreFileReader(options, columns)
    config = ClientConfig(
        request_timeout_ms=options.pull_timeout_ms,
        retry=NO_RETRY,
        **options.tls_settings(),
        **options.credentials(),
    )
    if options.name_server is not None:
        client = RemotingClient(options.name_server, config)
        return RemotingReader(
            client,
            partition.endpoints,
            options,
            columns,
            partition.replicas,
            filter_in_task=partition.filter_in_task,
        )
    return _EachBroker(partition, options, config, columns)


class _EachBroker:
    """The ranges of rocketlite brokers reached over gRPC: each broker's are read by its own
    reader, made at its first range: short-circuit reads where this task runs on its host,
    else pulls."""

    def __init__(
        self,
        partition: RocketlitePartition,
        options: SourceOptions,
        config: ClientConfig,
        columns: tuple[str, ...],
    ) -> None:
        self._endpoints = dict(partition.endpoints)
        self._in_task = partition.filter_in_task
        self._options = options
        self._config = config
        self._columns = columns
        self._readers: dict[str, GrpcReader | ShortCircuitReader] = {}  # by endpoint

    def read_range(self, queue_range: QueueRange) -> Generator[pa.RecordBatch, None, None]:
        return self._reader(self._endpoints[queue_range.mq.broker_name]).read_range(queue_range)

    def _reader(self, endpoint: str) -> GrpcReader | ShortCircuitReader:
        reader = self._readers.get(endpoint)
        if reader is None:
            options, columns = self._options, self._columns
            conn = Connection(endpoint, self._config)
            reader = self._readers[endpoint] = GrpcReader(conn, options, columns, self._in_task)
            sc = open_short_circuit(conn, options)
            if sc is not None:
                reader = self._readers[endpoint] = ShortCircuitReader(sc, reader, options, columns)
        return reader

    def close(self) -> None:
        for reader in self._readers.values():
            reader.close()


class _Rows:
    """Records of a range as the source's rows (``projection``'s columns): cut at the
    range's end, checked against the tag filter, bodies inflated."""

    def __init__(
        self, options: SourceOptions, projection: Projection, columns: tuple[str, ...]
    ) -> None:
        tags = options.subscription.tags
        self._tag_values = None if tags is None else pa.array(sorted(tags), pa.string())
        self._bodies = "body" in columns
        self._projection = projection

    def of(self, records: pa.RecordBatch, queue_range: QueueRange) -> pa.RecordBatch:
        offsets = records.column("queueOffset").to_numpy(zero_copy_only=False)
        inside = int(np.searchsorted(offsets, queue_range.end))  # a pull may pass the end
        if inside < records.num_rows:
            records = records.slice(0, inside)
        if self._tag_values is not None and records.num_rows:
            # The broker filtered on tag hash codes; different tags can share one.
            keep = pc.fill_null(pc.is_in(records.column("tags"), value_set=self._tag_values), False)
            records = records.filter(keep)
        if self._bodies:  # only the bodies of the rows kept
            records = inflate_bodies(records)
        return to_rows(records, queue_range.mq.broker_name, self._projection)
