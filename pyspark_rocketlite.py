"""Spark registers the ``rocketlite`` data source from here, with no call needed.

pyspark imports every top-level module named ``pyspark_*`` when a session first looks up a
Python data source, and registers its ``DefaultSource`` under ``DefaultSource.name()``::

    spark.readStream.format("rocketlite").option("endpoints", "127.0.0.1:10911") \\
        .option("topic", "orders").option("group", "etl").load()

The data source itself lives in :mod:`rmq_spark.datasource`.
"""

from rmq_spark.datasource import RocketliteDataSource as DefaultSource
from rmq_spark.datasource import register

__all__ = ["DefaultSource", "register"]
