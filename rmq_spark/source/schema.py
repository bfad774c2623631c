"""The rows of the ``rocketlite`` source: one per message, as Spark and as Arrow sees them.

The decoder (:mod:`rmq_spark.codec.arrow_decode`) yields :data:`RECORD_SCHEMA` batches for one
queue. :func:`to_rows` turns one into the source's row layout without a per-message loop:
it adds the broker name, makes the two epoch-millisecond columns Arrow timestamps, and drops
the store-internal columns (``commitLogOffset``, ``sysFlag``, ``flag``).

Spark checks the Arrow schema of every batch a Python source yields against the one it
derives from :data:`SPARK_SCHEMA` (``to_arrow_schema(..., timezone="UTC")``): timestamps are
``timestamp[us, tz=UTC]`` and every field is nullable. :data:`ARROW_SCHEMA` is exactly that.

A read may yield fewer columns: the schema given with ``.schema(...)`` names some of the
source's columns, in any order (:class:`Projection`); the rows then hold those only, under
the names given, and the decoder makes only what they need.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from rmq_spark.codec.arrow_decode import PROPERTIES_TYPE
from rmq_spark.errors import InvalidArgumentError

__all__ = ["ALL_COLUMNS", "ARROW_SCHEMA", "SPARK_SCHEMA", "Projection", "to_rows"]

_STRING, _INT, _LONG, _TS = StringType(), IntegerType(), LongType(), TimestampType()

SPARK_SCHEMA = StructType(
    [
        StructField("topic", _STRING),
        StructField("brokerName", _STRING),
        StructField("queueId", _INT),
        StructField("queueOffset", _LONG),
        StructField("msgId", _STRING),
        StructField("tags", _STRING),
        StructField("keys", _STRING),
        StructField("body", BinaryType()),
        StructField("properties", MapType(_STRING, _STRING)),
        StructField("bornTimestamp", _TS),
        StructField("storeTimestamp", _TS),
        StructField("bornHost", _STRING),
        StructField("storeHost", _STRING),
        StructField("reconsumeTimes", _INT),
    ]
)

_TIMESTAMP = pa.timestamp("us", tz="UTC")
_MILLIS = pa.timestamp("ms", tz="UTC")

ARROW_SCHEMA = pa.schema(
    [
        ("topic", pa.string()),
        ("brokerName", pa.string()),
        ("queueId", pa.int32()),
        ("queueOffset", pa.int64()),
        ("msgId", pa.string()),
        ("tags", pa.string()),
        ("keys", pa.string()),
        ("body", pa.binary()),
        ("properties", PROPERTIES_TYPE),
        ("bornTimestamp", _TIMESTAMP),
        ("storeTimestamp", _TIMESTAMP),
        ("bornHost", pa.string()),
        ("storeHost", pa.string()),
        ("reconsumeTimes", pa.int32()),
    ]
)

#: columns that are null for messages without one
_MAY_BE_NULL = frozenset({"tags", "keys"})
#: the source's columns by lower-case name: Spark compares names case-insensitively
_BY_LOWER_NAME = {f.name.lower(): f for f in SPARK_SCHEMA.fields}
_COLUMNS_TEXT = ", ".join(f"{f.name} {f.dataType.simpleString()}" for f in SPARK_SCHEMA.fields)


@dataclass(frozen=True)
class Projection:
    """The columns a read yields, in order: source columns (of :data:`SPARK_SCHEMA`), each
    under the name the user gave it. :data:`ALL_COLUMNS` when no schema is given."""

    #: the source's column names
    columns: tuple[str, ...]
    #: the names of the rows' columns, as the user spelled them
    names: tuple[str, ...]
    #: whether each column is declared nullable (NOT NULL is taken where no row is null)
    nullable: tuple[bool, ...]

    @classmethod
    def parse(cls, schema: StructType) -> Projection:
        """The projection a user-given schema asks for, checked: each field must be a column
        of the source (names compare case-insensitively, as Spark's do by default), of the
        source's type, named once.

        >>> from pyspark.sql.types import LongType, StructField, StructType
        >>> Projection.parse(StructType([StructField("QueueOffset", LongType())])).columns
        ('queueOffset',)
        """
        if not schema.fields:
            raise InvalidArgumentError(
                "the schema given to the rocketlite source with .schema(...) has no column; "
                "name the columns to read, e.g. .schema('queueOffset long, body binary'), or "
                "drop .schema(...) to read them all"
            )
        seen: dict[str, str] = {}
        for field in schema.fields:
            column = _source_column(field)
            if column.name in seen:
                spelled = (
                    ""
                    if seen[column.name] == field.name
                    else f" (as {seen[column.name]!r} and {field.name!r}: Spark compares column "
                    "names case-insensitively)"
                )
                raise InvalidArgumentError(
                    f"column {column.name!r} is in the schema given with .schema(...) twice"
                    f"{spelled}; list each column once"
                )
            seen[column.name] = field.name
        return cls(
            columns=tuple(seen),
            names=tuple(seen.values()),
            nullable=tuple(f.nullable for f in schema.fields),
        )

    @property
    def arrow_schema(self) -> pa.Schema:
        """The Arrow schema of the rows, as Spark derives it from the user's schema."""
        return _arrow_schema(self)

    @property
    def column_by_name(self) -> dict[str, str]:
        """The source column each of the rows' names stands for."""
        return dict(zip(self.names, self.columns, strict=True))

    def record_columns(self) -> frozenset[str]:
        """The decoder's columns (:data:`~rmq_spark.codec.arrow_decode.RECORD_SCHEMA`) the
        rows are made of: the source's own, but brokerName (the reader knows it)."""
        return frozenset(self.columns) - {"brokerName"}


def _source_column(field: StructField) -> StructField:
    """The source's column ``field`` of a user-given schema names; raise unless it is one."""
    column = _BY_LOWER_NAME.get(field.name.lower())
    if column is None:
        raise InvalidArgumentError(
            f"the rocketlite source has no column {field.name!r} (in the schema given with "
            f".schema(...)); its columns are {_COLUMNS_TEXT}; fix the name or remove the column"
        )
    wanted = column.dataType.simpleString()
    if field.dataType != column.dataType:
        raise InvalidArgumentError(
            f"column {field.name!r} is {field.dataType.simpleString()} in the schema given with "
            f".schema(...), but the source's {column.name} is {wanted}; declare it as "
            f"'{field.name} {wanted}' and cast it after loading"
        )
    if not field.nullable and column.name in _MAY_BE_NULL:
        raise InvalidArgumentError(
            f"column {field.name!r} is NOT NULL in the schema given with .schema(...), but the "
            f"source's {column.name} is null for messages without one; drop NOT NULL"
        )
    return column


@functools.lru_cache(maxsize=64)
def _arrow_schema(projection: Projection) -> pa.Schema:
    if projection == ALL_COLUMNS:
        return ARROW_SCHEMA
    return pa.schema(
        pa.field(name, ARROW_SCHEMA.field(column).type, nullable)
        for column, name, nullable in zip(
            projection.columns, projection.names, projection.nullable, strict=True
        )
    )


#: every column of the source, as named in :data:`SPARK_SCHEMA`
ALL_COLUMNS = Projection(
    columns=tuple(SPARK_SCHEMA.names),
    names=tuple(SPARK_SCHEMA.names),
    nullable=(True,) * len(SPARK_SCHEMA.names),
)


def to_rows(
    records: pa.RecordBatch, broker_name: str, projection: Projection = ALL_COLUMNS
) -> pa.RecordBatch:
    """The source's rows (``projection``'s columns) for decoded records of one broker (a
    ``RECORD_SCHEMA`` batch, or one holding at least the projection's record columns).

    >>> from rmq_spark.codec.record import Record, encode_record
    >>> from rmq_spark.codec.arrow_decode import decode_records
    >>> records = decode_records(encode_record(Record(topic="T", queue_id=0, body=b"x")))
    >>> rows = to_rows(records, "broker-a")
    >>> rows.column("brokerName").to_pylist(), rows.schema.field("bornTimestamp").type
    (['broker-a'], TimestampType(timestamp[us, tz=UTC]))
    """
    columns = []
    for name in projection.columns:
        if name == "brokerName":
            columns.append(pa.repeat(pa.scalar(broker_name, pa.string()), records.num_rows))
        elif name in _TIMESTAMPS:  # epoch ms: reinterpret as ms timestamps, widen to Spark's us
            columns.append(records.column(name).cast(_MILLIS).cast(_TIMESTAMP))
        else:
            columns.append(records.column(name))
    return pa.RecordBatch.from_arrays(columns, schema=projection.arrow_schema)


_TIMESTAMPS = frozenset({"bornTimestamp", "storeTimestamp"})
