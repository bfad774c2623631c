"""``properties`` declared as a struct of some properties in a user-given schema: what each
field holds (a number's text read strictly), the Arrow layout Spark expects of it, and the
schemas refused, naming the property."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    BooleanType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from rmq_spark.codec.arrow_decode import decode_records
from rmq_spark.codec.properties import encode_properties
from rmq_spark.codec.record import Record, encode_record
from rmq_spark.errors import InvalidArgumentError
from rmq_spark.source.schema import Projection, property_struct, to_rows

MAP = pa.map_(pa.string(), pa.string())


def struct(*fields: tuple) -> StructType:
    """A StructType of (name, type[, nullable]) fields."""
    return StructType([StructField(*f) for f in fields])


S, L, D = StringType(), LongType(), DoubleType()


@pytest.mark.parametrize(
    ("kind", "texts", "values"),
    [
        ("string", ["eu", "", " x "], ["eu", "", " x "]),
        (
            "bigint",
            ["7", "+7", "-7", "007", str(2**63 - 1), str(2**63), str(-(2**63))],
            [7, 7, -7, 7, 2**63 - 1, None, -(2**63)],
        ),
        ("bigint", ["7.0", " 7", "1e3", "x", "٣", ""], [None] * 6),
        ("int", ["2147483647", "2147483648", "-2147483648", "12"], [2**31 - 1, None, -(2**31), 12]),
        (
            "double",
            ["1.5", "-2", ".5", "5.", "1e3", "+2.5E-1", "NaN", "Infinity", " 1", "0x10"],
            [1.5, -2.0, 0.5, 5.0, 1000.0, 0.25, None, None, None, None],
        ),
    ],
)  # fmt: skip
def test_what_a_field_holds(kind, texts, values):
    props = pa.array([[("k", t)] for t in texts] + [[("other", "1")]], MAP)
    got = property_struct(props, (("k", kind),)).field("k").to_pylist()
    assert got == [*values, None]  # and null where the message lacks the property


def test_a_struct_of_properties_in_the_rows():
    records = b"".join(
        encode_record(
            Record(
                topic="orders",
                queue_id=0,
                queue_offset=i,
                body=b"b",
                properties=encode_properties(p),
            )
        )
        for i, p in enumerate([{"region": "eu", "amount": "12"}, {"amount": "x"}, {}])
    )
    given = struct(
        ("queueOffset", L), ("Properties", struct(("region", S), ("amount", L), ("price", D)))
    )
    projection = Projection.parse(given)
    assert projection.columns == ("queueOffset", "properties")
    assert projection.property_types == {"region": "string", "amount": "bigint", "price": "double"}
    rows = to_rows(decode_records(records), "broker-a", projection)
    assert rows.schema.equals(to_arrow_schema(given, timezone="UTC"))
    assert rows.column("Properties").to_pylist() == [
        {"region": "eu", "amount": 12, "price": None},
        {"region": None, "amount": None, "price": None},
        {"region": None, "amount": None, "price": None},
    ]


@pytest.mark.parametrize(
    ("given", "message"),
    [
        (struct(("properties", struct())), "struct of no field"),
        (
            struct(("properties", struct(("a", BooleanType())))),
            "property 'a' of column 'properties' is boolean",
        ),
        (struct(("properties", struct(("a", S, False)))), "property 'a' .* is NOT NULL"),
        (
            struct(("properties", struct(("a", S), ("A", L)))),
            "property 'A' is in column 'properties' twice",
        ),
        (struct(("tags", struct(("a", S)))), "column 'tags' is struct<a:string>"),
    ],
)
def test_structs_refused(given, message):
    with pytest.raises(InvalidArgumentError, match=message):
        Projection.parse(given)
