"""The source's row layout, its partitions as Spark pickles them, and option checks at
``load()``. No Spark session: pyspark's pure helpers only."""

from __future__ import annotations

import pickle

import pyarrow as pa
import pytest
from pyspark.sql.datasource import InputPartition
from pyspark.sql.pandas.types import to_arrow_schema

from rmq_spark.codec.arrow_decode import decode_records
from rmq_spark.codec.record import Record, encode_record
from rmq_spark.errors import InvalidArgumentError
from rmq_spark.source.datasource import RocketliteDataSource, check_options
from rmq_spark.source.planning import PlannedPartition, QueueRange
from rmq_spark.source.read import RocketlitePartition
from rmq_spark.source.schema import ARROW_SCHEMA, SPARK_SCHEMA, to_rows
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


def test_data_source_refuses_a_user_schema():
    source = RocketliteDataSource(dict(BASE))
    assert source.schema() is SPARK_SCHEMA
    with pytest.raises(InvalidArgumentError, match="fixed schema"):
        source.reader(SPARK_SCHEMA[:3])
