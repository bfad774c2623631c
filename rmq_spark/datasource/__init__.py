"""The ``rocketlite`` Python Data Source: the class Spark instantiates for
``spark.read.format("rocketlite")`` and ``spark.readStream.format("rocketlite")`` (the
readers, :mod:`rmq_spark.source`), and for ``df.write`` / ``df.writeStream`` with that format
(the writers, :mod:`rmq_spark.sink`). It is the one place that knows both: it lies above
them, and the source and the sink do not import each other.

It is registered without a call because the top-level module ``pyspark_rocketlite`` exports
it as ``DefaultSource`` (pyspark registers every ``pyspark_*`` module's ``DefaultSource`` at
the first data-source lookup); :func:`register` does the same explicitly.

Options are checked when the data source is created, that is at ``load()``: an unknown or
malformed option fails there, naming it. Spark does not say yet whether the query will be a
batch or a streaming one, so options valid in one of the two modes pass (but a read's
``load()`` also asks for the schema, which fails for options no read can use); the reader gets
its mode's options and fails with its mode's error (``maxMessagesPerTrigger`` on
``spark.read`` fails when the query runs). Options valid for the sink only pass too; a
writer checks them with the DataFrame's schema when the write starts. The options are parsed
once, for every mode, when the data source is created
(:mod:`~rmq_spark.datasource.load_options`): Spark pickles the data source, parsed options
included, to the Python processes that plan the read or the write.

A schema given with ``.schema(...)`` reads only those of the source's columns, under those
names and in that order (:class:`~rmq_spark.source.schema.Projection`); it is checked when
the reader is made, as the query starts.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import TYPE_CHECKING

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from rmq_spark.datasource.load_options import LoadedOptions, parse_for_load
from rmq_spark.errors import InvalidArgumentError
from rmq_spark.sink.options import SinkOptions
from rmq_spark.source.schema import SPARK_SCHEMA, Projection

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from rmq_spark.sink.rows import ColumnPlan

__all__ = ["RocketliteDataSource", "check_options", "register"]

NAME = "rocketlite"


class RocketliteDataSource(DataSource):
    """Reads rocketlite brokers, as a batch or a stream; rows are in :data:`SPARK_SCHEMA`,
    or hold the columns of a schema given with ``.schema(...)`` (some of the source's).

    >>> (spark.readStream.format("rocketlite")                  # doctest: +SKIP
    ...     .option("endpoints", "127.0.0.1:10911").option("topic", "orders")
    ...     .option("group", "etl").load())
    >>> (spark.read.format("rocketlite").schema("queueOffset long, body binary")  # doctest: +SKIP
    ...     .option("endpoints", "127.0.0.1:10911").option("topic", "orders").load())

    Spark calls ``reader`` for a batch read, ``streamReader`` for a stream (never
    ``simpleStreamReader``, which pyspark asks for only when ``streamReader`` is missing),
    ``writer`` and ``streamWriter`` for writes. A batch read with the option
    ``filterPushdown`` gets a reader that takes filters when Spark pushes them
    (:class:`~rmq_spark.source.batch_reader.FilteringBatchReader`). Pushdown is opt-in per
    read because pyspark 4.3 keeps the plan made with pushed filters on the loaded
    DataFrame's data source: a later query of the same DataFrame without those filters
    reuses it and reads too little. Load a DataFrame per filtered query when it is on.
    """

    def __init__(self, options: MutableMapping[str, str]) -> None:
        super().__init__(options)
        #: every mode's options, parsed once here (on the driver) and pickled with the source
        self.parsed_options: LoadedOptions = check_options(options)
        self._keys = {str(key).lower() for key in options}

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        # Spark asks for it at load() of a read, never of a write: options that only a
        # write could use (none of topic, topics, topicPattern: a sink may take each row's
        # topic from a column) fail here, naming what a read needs, not when the query runs
        self.parsed_options.check_read(self._keys)
        return SPARK_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        from rmq_spark.source.batch_reader import FilteringBatchReader, RocketliteBatchReader

        projection = Projection.parse(schema)
        options = self.parsed_options.source(streaming=False)
        if options.filter_pushdown:
            return FilteringBatchReader(options, projection)
        return RocketliteBatchReader(options, projection)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from rmq_spark.source.stream_reader import RocketliteStreamReader

        projection = Projection.parse(schema)
        return RocketliteStreamReader(self.parsed_options.source(streaming=True), projection)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from rmq_spark.sink.writer import RocketliteBatchWriter

        if overwrite:
            raise InvalidArgumentError(
                "the rocketlite sink only appends: a topic cannot be overwritten. Use "
                ".mode('append')"
            )
        return RocketliteBatchWriter(*_sink_setup(self.parsed_options.writer(), schema))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from rmq_spark.sink.writer import RocketliteStreamWriter

        if overwrite:
            raise InvalidArgumentError(
                "the rocketlite sink only appends: use outputMode('append') or 'update'"
            )
        return RocketliteStreamWriter(*_sink_setup(self.parsed_options.writer(), schema))


def _sink_setup(parsed: SinkOptions, schema: StructType) -> tuple[SinkOptions, ColumnPlan]:
    """The sink's column plan for ``schema``, and its topic checked, on the driver before
    any task runs."""
    from rmq_spark.sink.rows import plan_columns
    from rmq_spark.sink.send import check_writable_topic

    plan = plan_columns([(f.name, f.dataType.simpleString()) for f in schema.fields], parsed.topic)
    check_writable_topic(parsed)
    return parsed, plan


def check_options(options: MutableMapping[str, str]) -> LoadedOptions:
    """``options`` parsed for every mode; raises unless they are valid for a batch read, a
    streaming read or a write (see :func:`~rmq_spark.datasource.load_options.load_error`)."""
    loaded = parse_for_load(options)
    loaded.check({str(key).lower() for key in options})
    return loaded


def register(spark: SparkSession) -> None:
    """Register the source on ``spark`` (only needed when ``pyspark_rocketlite`` is not
    importable by the session's Python, e.g. the package is on a path added at run time)."""
    spark.dataSource.register(RocketliteDataSource)
