"""The rows of the ``rocketlite`` source: one per message, as Spark and as Arrow sees them.

The decoder (:mod:`rmq_spark.codec.arrow_decode`) yields :data:`RECORD_SCHEMA` batches for one
queue. :func:`to_rows` turns one into the source's row layout without a per-message loop:
it adds the broker name, makes the two epoch-millisecond columns Arrow timestamps, and drops
the store-internal columns (``commitLogOffset``, ``sysFlag``, ``flag``).

Spark checks the Arrow schema of every batch a Python source yields against the one it
derives from :data:`SPARK_SCHEMA` (``to_arrow_schema(..., timezone="UTC")``): timestamps are
``timestamp[us, tz=UTC]`` and every field is nullable. :data:`ARROW_SCHEMA` is exactly that.
"""

from __future__ import annotations

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

__all__ = ["ARROW_SCHEMA", "SPARK_SCHEMA", "to_rows"]

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

#: columns taken from the decoder's batch unchanged (all but brokerName and the timestamps)
_COPIED = frozenset(ARROW_SCHEMA.names) - {"brokerName", "bornTimestamp", "storeTimestamp"}


def to_rows(records: pa.RecordBatch, broker_name: str) -> pa.RecordBatch:
    """The source's rows for decoded records of one broker (``RECORD_SCHEMA`` batch).

    >>> from rmq_spark.codec.record import Record, encode_record
    >>> from rmq_spark.codec.arrow_decode import decode_records
    >>> records = decode_records(encode_record(Record(topic="T", queue_id=0, body=b"x")))
    >>> rows = to_rows(records, "broker-a")
    >>> rows.column("brokerName").to_pylist(), rows.schema.field("bornTimestamp").type
    (['broker-a'], TimestampType(timestamp[us, tz=UTC]))
    """
    columns = []
    for name in ARROW_SCHEMA.names:
        if name in _COPIED:
            columns.append(records.column(name))
        elif name == "brokerName":
            columns.append(pa.repeat(pa.scalar(broker_name, pa.string()), records.num_rows))
        else:  # epoch milliseconds: reinterpret as ms timestamps, then widen to Spark's us
            columns.append(records.column(name).cast(_MILLIS).cast(_TIMESTAMP))
    return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)
