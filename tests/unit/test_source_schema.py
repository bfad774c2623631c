"""The source's row layout (all columns, or those of a user-given schema), its partitions as
Spark pickles them, and option checks at ``load()``. No Spark session: pyspark's pure
helpers only."""

from __future__ import annotations

import pickle

import pyarrow as pa
import pytest
from pyspark.sql.datasource import InputPartition
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from rmq_spark.codec.arrow_decode import decode_records
from rmq_spark.codec.record import Record, encode_record
from rmq_spark.datasource import RocketliteDataSource, check_options
from rmq_spark.errors import InvalidArgumentError
from rmq_spark.source.planning import PlannedPartition, QueueRange
from rmq_spark.source.read import RocketlitePartition, decoded_columns
from rmq_spark.source.schema import ALL_COLUMNS, ARROW_SCHEMA, SPARK_SCHEMA, Projection, to_rows
from rmq_spark.structs import MessageQueue

BASE = {"endpoints": "127.0.0.1:10911", "topic": "orders"}


def test_arrow_schema_is_the_one_spark_expects():
    # Spark compares every yielded batch's schema with this, nullability included.
    assert to_arrow_schema(SPARK_SCHEMA, timezone="UTC").equals(ARROW_SCHEMA)


def test_rows_add_the_broker_and_make_timestamps():
    records = b"".join(
        encode_record(
            Record(
                topic="orders",
                queue_id=2,
                queue_offset=40 + i,
                body=b"body%d" % i,
                born_timestamp=1_700_000_000_123 + i,
                store_timestamp=1_700_000_000_456 + i,
                properties=b"TAGS\x01TagA\x02KEYS\x01k1\x02",
            )
        )
        for i in range(3)
    )
    rows = to_rows(decode_records(records), "broker-a")
    assert rows.schema.equals(ARROW_SCHEMA)
    assert rows.column("brokerName").to_pylist() == ["broker-a"] * 3
    assert rows.column("queueOffset").to_pylist() == [40, 41, 42]
    micros = rows.column("storeTimestamp").cast(pa.int64()).to_pylist()
    assert micros == [(1_700_000_000_456 + i) * 1000 for i in range(3)]
    assert rows.column("tags").to_pylist() == ["TagA"] * 3


def test_rows_of_nothing_have_the_schema():
    empty = to_rows(decode_records(b""), "broker-a")
    assert empty.num_rows == 0 and empty.schema.equals(ARROW_SCHEMA)


def test_partitions_pickle_as_spark_ships_them():
    mq = MessageQueue("orders", "broker-a", 1)
    planned = PlannedPartition((QueueRange(mq, 3, 9),))
    partition = RocketlitePartition.of(planned, {"broker-a": "127.0.0.1:1", "broker-b": "x:2"})
    assert isinstance(partition, InputPartition)
    assert partition.endpoints == (("broker-a", "127.0.0.1:1"),)
    assert pickle.loads(pickle.dumps(partition)) == partition
    assert partition.size == 6


def test_options_are_checked_at_load_for_either_mode():
    check_options({**BASE, "maxMessagesPerTrigger": "10"})  # streaming only: fine
    check_options({**BASE, "endingOffsets": "latest"})  # batch only: fine
    check_options({**BASE, "startingOffsets": "latest"})  # streaming default
    with pytest.raises(
        InvalidArgumentError, match=r"unknown option 'subscribe'.*did you mean topics"
    ):
        check_options({**BASE, "subscribe": "orders"})
    with pytest.raises(InvalidArgumentError, match="option maxMessagesPerTrigger='0'"):
        check_options({**BASE, "maxMessagesPerTrigger": "0"})
    only_streaming = "option maxBytesPerTrigger only applies to streaming"
    with pytest.raises(InvalidArgumentError, match=only_streaming):
        check_options({**BASE, "endingOffsets": "latest", "maxBytesPerTrigger": "1m"})


def spark_schema(*fields: tuple[str, object] | tuple[str, object, bool]) -> StructType:
    return StructType([StructField(*field) for field in fields])


THREE = spark_schema(("topic", StringType()), ("queueOffset", LongType()), ("body", BinaryType()))


def some_records() -> pa.RecordBatch:
    return decode_records(
        b"".join(
            encode_record(
                Record(
                    topic="orders",
                    queue_id=1,
                    queue_offset=7 + i,
                    body=b"b%d" % i,
                    properties=b"TAGS\x01TagA\x02",
                    store_timestamp=1_700_000_000_000 + i,
                )
            )
            for i in range(3)
        )
    )


def test_a_user_schema_projects_the_rows_spark_expects():
    schema = spark_schema(
        ("storeTimestamp", TimestampType()),
        ("brokerName", StringType()),
        ("QUEUEOFFSET", LongType()),  # Spark compares names case-insensitively
        ("tags", StringType()),
    )
    projection = Projection.parse(schema)
    assert projection.columns == ("storeTimestamp", "brokerName", "queueOffset", "tags")
    rows = to_rows(some_records(), "broker-a", projection)
    assert rows.schema.equals(to_arrow_schema(schema, timezone="UTC"))  # what Spark checks
    full = to_rows(some_records(), "broker-a")
    assert rows.rename_columns(list(projection.columns)).equals(full.select(projection.columns))
    assert rows.column("QUEUEOFFSET").to_pylist() == [7, 8, 9]


def test_not_null_is_kept_where_no_row_is_null():
    schema = spark_schema(("queueOffset", LongType(), False), ("body", BinaryType()))
    rows = to_rows(some_records(), "broker-a", Projection.parse(schema))
    assert rows.schema.equals(to_arrow_schema(schema, timezone="UTC"))


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        (
            spark_schema(("queueOffset", LongType()), ("offset", LongType())),
            r"no column 'offset'.*its columns are topic string, brokerName string, queueId int, "
            r"queueOffset bigint, .*reconsumeTimes int; fix the name",
        ),
        (
            spark_schema(("queueOffset", IntegerType())),
            r"column 'queueOffset' is int .* the source's queueOffset is bigint; declare it as "
            r"'queueOffset bigint' and cast it after loading",
        ),
        (
            spark_schema(("storeTimestamp", TimestampNTZType())),
            "the source's storeTimestamp is timestamp",
        ),
        (
            spark_schema(("topic", StringType()), ("TOPIC", StringType())),
            r"column 'topic' is in the schema given with .schema\(...\) twice \(as 'topic' and "
            r"'TOPIC': Spark compares column names case-insensitively\); list each column once",
        ),
        (
            spark_schema(("body", BinaryType()), ("body", BinaryType())),
            r"column 'body' is in the schema given with .schema\(...\) twice; list each",
        ),
        (
            spark_schema(("tags", StringType(), False)),
            "column 'tags' is NOT NULL .* null for messages without one; drop NOT NULL",
        ),
        (StructType([]), r"has no column; name the columns to read"),
    ],
    ids=["unknown", "type", "timestamp_ntz", "twice in two spellings", "twice", "not null", "none"],
)
def test_a_bad_user_schema_is_refused_saying_what_to_do(schema, message):
    source = RocketliteDataSource(dict(BASE))
    with pytest.raises(InvalidArgumentError, match=message):
        source.reader(schema)
    with pytest.raises(InvalidArgumentError, match=message):
        source.streamReader(schema)


def test_readers_get_the_projection_and_decode_what_it_needs():
    source = RocketliteDataSource(dict(BASE))
    assert source.schema() is SPARK_SCHEMA
    assert source.reader(SPARK_SCHEMA).projection == ALL_COLUMNS
    assert source.streamReader(THREE).projection == Projection.parse(THREE)
    reader = source.reader(THREE)
    assert reader.projection.names == ("topic", "queueOffset", "body")
    assert pickle.loads(pickle.dumps(reader)).projection == reader.projection
    # the bodies with their sysflags (compressed ones are inflated); tags for a tag filter
    assert decoded_columns(reader.projection, with_tags=False) == (
        "topic", "queueOffset", "body", "sysFlag",
    )  # fmt: skip
    brokers = Projection.parse(spark_schema(("brokerName", StringType())))
    assert decoded_columns(brokers, with_tags=True) == ("queueOffset", "tags")
