"""The ``rocketlite`` Spark source (Python Data Source API).

The pure parts live here today: :mod:`~rmq_spark.source.options` (options parsed once),
:mod:`~rmq_spark.source.limits` (how much each trigger reads) and
:mod:`~rmq_spark.source.planning` (queue ranges to Spark partitions). Offsets are in
:mod:`rmq_spark.offsets.spark`. The reader that talks to brokers builds on them.
"""
