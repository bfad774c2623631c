"""The sink's rows without Spark or a broker: the schema check, the send columns it builds
from Arrow batches, and each row's queue."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from rmq_spark.codec.java_hash import java_string_hash
from rmq_spark.codec.properties import decode_properties
from rmq_spark.errors import InvalidArgumentError
from rmq_spark.sink.options import SinkOptions
from rmq_spark.sink.rows import RowError, encode_rows, plan_columns, queue_indexes


@pytest.mark.parametrize(
    "fields, topic, message",
    [
        ([("value", "string")], "T", "needs a column 'body'.*value"),
        ([("body", "int")], "T", "column 'body' has type int"),
        ([("body", "string"), ("price", "int")], "T", "column 'price' is not one"),
        ([("body", "string"), ("keys", "array<int>")], "T", "column 'keys' has type"),
        ([("body", "string")], None, "no target topic"),
        ([("body", "string"), ("deliveryTimestamp", "bigint")], "T", "use.*delayLevel|delayLevel"),
    ],
)
def test_bad_schemas_are_refused_naming_the_column(fields, topic, message):
    with pytest.raises(InvalidArgumentError, match=message):
        plan_columns(fields, topic)


def test_the_sources_schema_is_accepted_and_its_own_columns_ignored():
    source = [
        ("topic", "string"), ("brokerName", "string"), ("queueId", "int"),
        ("queueOffset", "bigint"), ("msgId", "string"), ("tags", "string"),
        ("keys", "string"), ("body", "binary"), ("properties", "map<string,string>"),
        ("bornTimestamp", "timestamp"), ("storeTimestamp", "timestamp"),
        ("bornHost", "string"), ("storeHost", "string"), ("reconsumeTimes", "int"),
    ]  # fmt: skip
    plan = plan_columns(source, None)
    assert plan.columns == ("topic", "queueId", "tags", "keys", "body", "properties")


def _encode(columns: dict, fields: list[tuple[str, str]]):
    batch = pa.RecordBatch.from_pydict(columns)
    plan = plan_columns(fields, "T")
    return batch, plan, encode_rows(batch, plan, np.arange(batch.num_rows), 3)


def test_rows_become_the_columns_the_broker_stores():
    _, _, enc = _encode(
        {
            "body": [b"a", b"bcd"],
            "tags": ["t1", None],
            "keys": [["k1", "k2"], None],
            "properties": pa.array(
                [[("x", "1"), ("UNIQ_KEY", "mine")], None], pa.map_(pa.string(), pa.string())
            ),
        },
        [
            ("body", "binary"),
            ("tags", "string"),
            ("keys", "array<string>"),
            ("properties", "map<string,string>"),
        ],
    )
    assert enc.bodies == b"abcd" and list(enc.body_sizes) == [1, 3]
    ends = np.cumsum(enc.properties_sizes)
    first = decode_properties(enc.properties[: ends[0]])
    second = decode_properties(enc.properties[ends[0] : ends[1]])
    assert first["TAGS"] == "t1" and first["KEYS"] == "k1 k2" and first["x"] == "1"
    assert first["UNIQ_KEY"] != "mine" and len(first["UNIQ_KEY"]) == 32  # the sink's own id
    assert set(second) == {"UNIQ_KEY"}
    assert enc.tags == ["t1", ""] and list(enc.tag_indexes) == [0, 1]


@pytest.mark.parametrize(
    "columns, fields, message",
    [
        ({"body": ["a", None]}, [("body", "string")], "row 1 of Spark partition 3 has a null body"),
        (
            {"body": ["a", "b"], "tags": ["ok", "bad\x01"]},
            [("body", "string"), ("tags", "string")],
            "row 1 of Spark partition 3: tags contains the byte",
        ),
        (
            {
                "body": ["a"],
                "properties": pa.array([[("", "v")]], pa.map_(pa.string(), pa.string())),
            },
            [("body", "string"), ("properties", "map<string,string>")],
            "row 0 of Spark partition 3 has a property with an empty name",
        ),
    ],
)
def test_bad_rows_are_refused_naming_the_row(columns, fields, message):
    with pytest.raises(RowError, match=message):
        _encode(columns, fields)


def test_queues_by_queue_id_then_sharding_key_then_round_robin():
    batch = pa.RecordBatch.from_pydict(
        {
            "body": ["a"] * 6,
            "queueId": [2, None, None, None, None, None],
            "shardingKey": [None, "order-1", "order-1", None, None, None],
        }
    )
    plan = plan_columns([("body", "string"), ("queueId", "int"), ("shardingKey", "string")], "T")
    picked = queue_indexes(batch, plan, 4, 1, 2, np.arange(6), 0)
    hashed = abs(java_string_hash("order-1")) % 4
    # rows 3..5 go round robin, 2 consecutive rows a queue, from queue 1 (the rotation)
    assert list(picked) == [2, hashed, hashed, 2, 3, 3]
    with pytest.raises(RowError, match="row 0 of Spark partition 0 has queueId 9"):
        bad = pa.RecordBatch.from_pydict({"body": ["a"], "queueId": [9]})
        only_ids = plan_columns([("body", "string"), ("queueId", "int")], "T")
        queue_indexes(bad, only_ids, 4, 0, 2, np.arange(1), 0)


@pytest.mark.parametrize(
    "options, message",
    [
        ({"topic": "T"}, "option endpoints is required"),
        ({"endpoints": "127.0.0.1:1", "sendBatchSize": "0"}, "option sendBatchSize=.*1..65536"),
        ({"endpoints": "127.0.0.1:1", "exactlyOnce": "maybe"}, "expected true or false"),
        (
            {"nameServer": "127.0.0.1:9876", "checkpointLocation": "hdfs://nn/ck"},
            "option checkpointLocation='hdfs://nn/ck' is invalid: .* a local path",
        ),
        ({"endpoints": "127.0.0.1:1", "sinkId": "a b"}, "option sinkId='a b' is invalid"),
        ({"endpoints": "127.0.0.1:1", "sendBatchSzie": "5"}, "did you mean sendBatchSize"),
    ],
)
def test_bad_options_are_refused_naming_them(options, message):
    with pytest.raises(InvalidArgumentError, match=message):
        SinkOptions.parse(options)


def test_a_streams_sink_id_is_its_checkpoints():
    a = SinkOptions.parse({"endpoints": "127.0.0.1:1", "checkpointLocation": "/tmp/ck"})
    b = SinkOptions.parse({"endpoints": "127.0.0.1:1", "checkpointlocation": "/tmp/ck/"})
    c = SinkOptions.parse({"endpoints": "127.0.0.1:1", "checkpointLocation": "/tmp/other"})
    assert a.stream_sink_id() == b.stream_sink_id() != c.stream_sink_id()
    named = SinkOptions.parse({"endpoints": "127.0.0.1:1", "sinkId": "etl-orders"})
    assert named.stream_sink_id() == "etl-orders"
    # exactly once is the default through a name server too; at least once is a choice
    assert SinkOptions.parse({"nameServer": "127.0.0.1:9876"}).exactly_once is True
    chosen = SinkOptions.parse({"nameServer": "127.0.0.1:9876", "exactlyOnce": "false"})
    assert chosen.exactly_once is False
