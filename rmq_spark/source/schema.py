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

That schema may also declare ``properties`` as a struct of the properties a query uses,
each a string, int, bigint or double (``properties struct<region string, amount bigint>``):
each field holds that property's value (null where a message lacks it; for a number, null
where its text is not a plain decimal number of the type's range). Spark pushes filters on
a struct's fields to a source where it pushes none on a map's keys, so with filter pushdown
``properties.region = 'eu'`` reaches the brokers (:mod:`rmq_spark.source.sql_pushdown`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import (
    BinaryType,
    DataType,
    DoubleType,
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
#: the types a property may be read as, in a ``properties`` struct: Spark's and Arrow's
PROPERTY_TYPES: dict[str, tuple[DataType, pa.DataType]] = {
    "string": (_STRING, pa.string()),
    "int": (_INT, pa.int32()),
    "bigint": (_LONG, pa.int64()),
    "double": (DoubleType(), pa.float64()),
}
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
    #: ``properties`` declared as a struct: (property, type name) of each of its fields, in
    #: order (a type of :data:`PROPERTY_TYPES`); None for the map
    property_fields: tuple[tuple[str, str], ...] | None = None

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
        property_fields = None
        for field in schema.fields:
            column = _source_column(field)
            if column.name == "properties" and isinstance(field.dataType, StructType):
                property_fields = _property_fields(field)
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
            property_fields=property_fields,
        )

    @property
    def property_types(self) -> dict[str, str]:
        """Property -> type name of a ``properties`` struct; empty for the map."""
        return dict(self.property_fields or ())

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
    if column.name == "properties" and isinstance(field.dataType, StructType):
        return column  # a struct of some properties: checked by _property_fields
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


def _property_fields(field: StructField) -> tuple[tuple[str, str], ...]:
    """The (property, type name) fields of a ``properties`` struct, checked."""
    assert isinstance(field.dataType, StructType)
    kinds = ", ".join(PROPERTY_TYPES)
    example = f"e.g. '{field.name} struct<region string, amount bigint>'"
    if not field.dataType.fields:
        raise InvalidArgumentError(
            f"column {field.name!r} is a struct of no field in the schema given with "
            f".schema(...); name the properties to read, {example}"
        )
    fields: list[tuple[str, str]] = []
    seen: set[str] = set()
    for item in field.dataType.fields:
        kind = next(
            (name for name, (spark, _) in PROPERTY_TYPES.items() if item.dataType == spark), None
        )
        if kind is None:
            raise InvalidArgumentError(
                f"property {item.name!r} of column {field.name!r} is "
                f"{item.dataType.simpleString()} in the schema given with .schema(...); a "
                f"property is read as one of {kinds} ({example})"
            )
        if not item.nullable:
            raise InvalidArgumentError(
                f"property {item.name!r} of column {field.name!r} is NOT NULL in the schema "
                "given with .schema(...), but it is null for messages without it; drop NOT NULL"
            )
        if item.name.lower() in seen:
            raise InvalidArgumentError(
                f"property {item.name!r} is in column {field.name!r} twice (Spark compares "
                "field names case-insensitively); list each property once"
            )
        seen.add(item.name.lower())
        fields.append((item.name, kind))
    return tuple(fields)


@functools.lru_cache(maxsize=64)
def _arrow_schema(projection: Projection) -> pa.Schema:
    if projection == ALL_COLUMNS:
        return ARROW_SCHEMA
    return pa.schema(
        pa.field(name, _arrow_type(projection, column), nullable)
        for column, name, nullable in zip(
            projection.columns, projection.names, projection.nullable, strict=True
        )
    )


def _arrow_type(projection: Projection, column: str) -> pa.DataType:
    if column == "properties" and projection.property_fields is not None:
        return _struct_type(projection.property_fields)
    return ARROW_SCHEMA.field(column).type


def _struct_type(fields: tuple[tuple[str, str], ...]) -> pa.StructType:
    return pa.struct([pa.field(name, PROPERTY_TYPES[kind][1]) for name, kind in fields])


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
        elif name == "properties" and projection.property_fields is not None:
            columns.append(property_struct(records.column(name), projection.property_fields))
        else:
            columns.append(records.column(name))
    return pa.RecordBatch.from_arrays(columns, schema=projection.arrow_schema)


_TIMESTAMPS = frozenset({"bornTimestamp", "storeTimestamp"})


def property_struct(
    properties: pa.Array | pa.ChunkedArray, fields: tuple[tuple[str, str], ...]
) -> pa.StructArray:
    """The ``fields`` (property, type name) of a ``map<string, string>`` column of
    properties, as a struct (null where a message lacks the property or, for a number,
    where its text is not one).

    >>> props = pa.array([[("n", "7"), ("r", "eu")], [("n", "x")]], pa.map_(pa.utf8(), pa.utf8()))
    >>> property_struct(props, (("r", "string"), ("n", "bigint"))).to_pylist()
    [{'r': 'eu', 'n': 7}, {'r': None, 'n': None}]
    """
    if isinstance(properties, pa.ChunkedArray):
        properties = properties.combine_chunks()
    arrays = [
        _typed(pc.map_lookup(properties, pa.scalar(name), "last"), kind) for name, kind in fields
    ]
    return pa.StructArray.from_arrays(arrays, fields=list(_struct_type(fields)))


_WHOLE_TEXT = r"^-?[0-9]{1,18}$"  # in int64 whatever the digits (longer: _long_values)
_LONG_TEXT = r"^-?[0-9]{19}$"
_DOUBLE_TEXT = r"^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?$"
_INT_RANGE = (-(2**31), 2**31 - 1)


def _typed(values: pa.Array, kind: str) -> pa.Array:
    """Property texts read as ``kind``: a plain decimal number (an optional sign and digits;
    for a double also a fraction and an exponent) of the type's range, else null."""
    if kind == "string":
        return values.cast(pa.string())
    if kind == "double":
        plain = pc.match_substring_regex(values, _DOUBLE_TEXT)
        return pc.if_else(plain, values, pa.scalar(None, pa.string())).cast(pa.float64())
    text = pc.replace_substring_regex(values, r"^\+", "")
    whole = pc.if_else(pc.match_substring_regex(text, _WHOLE_TEXT), text, None).cast(pa.int64())
    if pc.any(pc.match_substring_regex(text, _LONG_TEXT)).as_py():
        whole = pa.array(_long_values(text.to_pylist()), pa.int64())
    if kind == "bigint":
        return whole
    low, high = _INT_RANGE
    within = pc.and_(pc.greater_equal(whole, low), pc.less_equal(whole, high))
    return pc.if_else(within, whole, None).cast(pa.int32())


def _long_values(texts: list[str | None]) -> list[int | None]:
    """Texts of up to 19 digits read as longs in Python (the rare values Arrow's cast
    could overflow on)."""
    out: list[int | None] = []
    for text in texts:
        ok = text is not None and text.lstrip("-").isascii() and text.lstrip("-").isdigit()
        value = int(text) if ok and text is not None and len(text.lstrip("-")) <= 19 else None
        out.append(value if value is not None and -(2**63) <= value < 2**63 else None)
    return out
