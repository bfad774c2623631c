"""The ``rocketlite`` Spark source (Python Data Source API, pyspark >= 4.2): the readers.

Usage needs no registration call (``pyspark_rocketlite`` exports the data source,
:class:`rmq_spark.datasource.RocketliteDataSource`, as ``DefaultSource``; it hands out these
readers and the sink's writers)::

    spark.readStream.format("rocketlite").option("endpoints", "127.0.0.1:10911") \\
        .option("topic", "orders").option("group", "etl").load()

Modules, from the outside in:

- :mod:`~rmq_spark.source.stream_reader` / :mod:`~rmq_spark.source.batch_reader`: offsets,
  triggers, commits to the group; the fixed ranges of a batch query.
- :mod:`~rmq_spark.source.read`: one Spark task's read, yielding Arrow batches, through one
  :class:`~rmq_spark.source.read.range_reader.RangeReader` per path (gRPC or remoting pulls,
  short-circuit reads of a broker's files, a store directory).
- :mod:`~rmq_spark.source.discovery`: what the brokers hold now (topics, queues, ranges).
- :mod:`~rmq_spark.source.lag`: how far a query is behind, from its progress events
  (``LagListener``).
- Pure parts: :mod:`~rmq_spark.source.options` (options parsed once, with
  :mod:`~rmq_spark.source.position_options`, :mod:`~rmq_spark.source.trigger_options` and
  :mod:`~rmq_spark.source.partition_options` for its groups of options),
  :mod:`~rmq_spark.source.positions` (start, end, data loss),
  :mod:`~rmq_spark.source.limits` (how much each trigger reads),
  :mod:`~rmq_spark.source.pushdown` (filters a batch read takes over from Spark),
  :mod:`~rmq_spark.source.planning` (queue ranges to Spark partitions) and
  :mod:`~rmq_spark.source.schema` (the rows). Offsets are in :mod:`rmq_spark.offsets.spark`.
"""
