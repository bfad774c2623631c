"""The ``rocketlite`` Python Data Source: the class Spark instantiates for
``spark.read.format("rocketlite")`` and ``spark.readStream.format("rocketlite")``, and for
``df.write`` / ``df.writeStream`` with that format (the sink, :mod:`rmq_spark.sink`).

It is registered without a call because the top-level module ``pyspark_rocketlite`` exports
it as ``DefaultSource`` (pyspark registers every ``pyspark_*`` module's ``DefaultSource`` at
the first data-source lookup); :func:`register` does the same explicitly.

Options are checked when the data source is created, that is at ``load()``: an unknown or
malformed option fails there, naming it. Spark does not say yet whether the query will be a
batch or a streaming one, so options valid in one of the two modes pass; the reader checks
them again for its mode (``maxMessagesPerTrigger`` on ``spark.read`` fails when the query
runs). Options valid for the sink only pass too; a writer checks them with the DataFrame's
schema when the write starts.

A schema given with ``.schema(...)`` reads only those of the source's columns, under those
names and in that order (:class:`~rmq_spark.source.schema.Projection`); it is checked when
the reader is made, as the query starts.
"""

from __future__ import annotations

import sys
from collections.abc import MutableMapping

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from rmq_spark.errors import InvalidArgumentError
from rmq_spark.source.options import BATCH_ONLY, STREAMING_ONLY, SourceOptions
from rmq_spark.source.schema import SPARK_SCHEMA, Projection

__all__ = ["RocketliteDataSource", "register"]

NAME = "rocketlite"


class RocketliteDataSource(DataSource):
    """Reads rocketlite brokers, as a batch or a stream; rows are in :data:`SPARK_SCHEMA`,
    or hold the columns of a schema given with ``.schema(...)`` (some of the source's).

    >>> (spark.readStream.format("rocketlite")                  # doctest: +SKIP
    ...     .option("endpoints", "127.0.0.1:10911").option("topic", "orders")
    ...     .option("group", "etl").load())
    >>> (spark.read.format("rocketlite").schema("queueOffset long, body binary")  # doctest: +SKIP
    ...     .option("endpoints", "127.0.0.1:10911").option("topic", "orders").load())
    """

    def __init__(self, options: MutableMapping[str, str]) -> None:
        super().__init__(options)
        check_options(options)

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        return SPARK_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        from rmq_spark.source.batch_reader import FilteringBatchReader, RocketliteBatchReader

        projection = Projection.parse(schema)
        options = SourceOptions.parse(self.options, streaming=False)
        if options.filter_pushdown and planning_with_filter_pushdown():
            return FilteringBatchReader(options, projection)
        return RocketliteBatchReader(options, projection)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from rmq_spark.source.stream_reader import RocketliteStreamReader

        projection = Projection.parse(schema)
        options = SourceOptions.parse(self.options, streaming=True)
        return RocketliteStreamReader(options, projection)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from rmq_spark.sink.writer import RocketliteBatchWriter

        if overwrite:
            raise InvalidArgumentError(
                "the rocketlite sink only appends: a topic cannot be overwritten. Use "
                ".mode('append')"
            )
        return RocketliteBatchWriter(*_sink_setup(self.options, schema))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from rmq_spark.sink.writer import RocketliteStreamWriter

        if overwrite:
            raise InvalidArgumentError(
                "the rocketlite sink only appends: use outputMode('append') or 'update'"
            )
        return RocketliteStreamWriter(*_sink_setup(self.options, schema))


def _sink_setup(options: MutableMapping[str, str], schema: StructType):
    """The sink's options and column plan, checked on the driver before any task runs."""
    from rmq_spark.sink.options import SinkOptions
    from rmq_spark.sink.rows import plan_columns
    from rmq_spark.sink.send import check_writable_topic

    parsed = SinkOptions.parse(options)
    plan = plan_columns([(f.name, f.dataType.simpleString()) for f in schema.fields], parsed.topic)
    check_writable_topic(parsed)
    return parsed, plan


def check_options(options: MutableMapping[str, str]) -> None:
    """Fail unless ``options`` are valid for a batch or a streaming query.

    An option of one mode only decides the mode (its errors are then that mode's); without
    one, the streaming parse's error is raised when both modes fail.
    """
    from rmq_spark.sink.options import SINK_ONLY, SinkOptions

    keys = {str(key).lower() for key in options}
    if any(name.lower() in keys for name in SINK_ONLY):
        SinkOptions.parse(options)
        return
    try:
        _check_source_options(options, keys)
    except InvalidArgumentError as source_error:
        try:
            SinkOptions.parse(options)  # options only a writer can use
        except InvalidArgumentError as sink_error:
            if str(sink_error) == str(source_error):
                raise source_error from None
            # Spark does not say yet whether this is a read or a write: say both.
            raise InvalidArgumentError(
                f"{source_error}\nAs options of a write: {sink_error}"
            ) from None


def _check_source_options(options: MutableMapping[str, str], keys: set[str]) -> None:
    if any(name.lower() in keys for name in BATCH_ONLY):
        SourceOptions.parse(options, streaming=False)
        return
    try:
        SourceOptions.parse(options, streaming=True)
    except InvalidArgumentError:
        if any(name.lower() in keys for name in STREAMING_ONLY):
            raise
        try:
            SourceOptions.parse(options, streaming=False)
        except InvalidArgumentError:
            pass
        else:
            return
        raise


#: the pyspark worker that plans a Python source's read with filter pushdown
_PUSHDOWN_WORKER = "data_source_pushdown_filters.py"


def planning_with_filter_pushdown() -> bool:
    """Whether Spark asks for this reader to push filters into it.

    A reader that implements ``pushFilters`` makes Spark fail every read of a session that
    has not turned on ``spark.sql.python.filterPushdown.enabled`` (off by default), so the
    source hands out its filtering reader only to the worker that plans with pushdown, and a
    plain reader otherwise (Spark then applies every filter itself, as correct and slower).

    Pushdown is also opt-in per read (option ``filterPushdown``): pyspark 4.3 keeps the
    plan made with pushed filters on the loaded DataFrame's data source, so a later query
    of the same DataFrame without filters reuses it and reads too little. Load a DataFrame
    per filtered query when pushdown is on.
    """
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_filename.endswith(_PUSHDOWN_WORKER):
            return True
        frame = frame.f_back
    return False


def register(spark) -> None:
    """Register the source on ``spark`` (only needed when ``pyspark_rocketlite`` is not
    importable by the session's Python, e.g. the package is on a path added at run time)."""
    spark.dataSource.register(RocketliteDataSource)
