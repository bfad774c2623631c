"""Reading some of the source's columns (``.schema(...)``): the rows hold those columns, under
the names given and in that order, with the values the full read has, on every path (gRPC
pulls, short-circuit reads, remoting pulls, a store directory), as a batch and with
Trigger.AvailableNow, under a tag filter and filter pushdown. A bad schema fails naming the
column and what to write instead."""

from __future__ import annotations

import zlib

import pytest
from pyspark.sql import functions as F

from rmq_spark.client import Admin, Producer
from rmq_spark.client.remoting import RemotingClient
from rmq_spark.structs import MessageQueue
from tests.support.broker_harness import start_broker
from tests.support.spark_helpers import messages_pulled, pushdown

TOPIC = "Projected"
TAGS = ["TagA", "TagB", "TagC", None]
#: a body RocketMQ's Java producer would compress (zlib, SYSFLAG 0x301)
TEXT = b"a body the producer compressed " * 200

SCHEMAS = {
    "offsets and bodies": "queueOffset long, body binary",
    "where each message is": "topic string, queueId int, queueOffset long",
    "every other column, mixed up": (
        "storeTimestamp timestamp, msgId string, brokerName string, "
        "properties map<string,string>, queueOffset long, bornHost string, storeHost string, "
        "reconsumeTimes int, keys string, tags string, bornTimestamp timestamp"
    ),
}
PATHS = ["gRPC", "short-circuit", "remoting", "storePath"]


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """A broker with a remoting port, and a topic of 3 queues holding tags, keys,
    properties and compressed bodies."""
    root = tmp_path_factory.mktemp("projection")
    broker = start_broker(root, "broker-a", "--remoting-port", "0")
    with Admin(broker.endpoint) as admin:
        admin.create_topic(TOPIC, queues=3)
    with Producer(broker.endpoint) as producer:
        for i in range(90):
            producer.send(
                TOPIC,
                f"message-{i}".encode(),
                tags=TAGS[i % 4],
                keys=[f"k{i}"],
                properties={"n": str(i)},
                queue=i % 3,
            )
    with RemotingClient(broker.remoting_address) as client:
        for queue_id in range(3):
            mq = MessageQueue(TOPIC, "broker-a", queue_id)
            client.send(mq, [zlib.compress(TEXT)], [{"TAGS": "TagA"}], sys_flag=0x301)
    yield broker
    broker.clean_up()


def load(spark, source, path: str, schema: str | None = None, **options: str):
    """A batch read of the topic through ``path``, with ``.schema(schema)`` if given."""
    reader = spark.read.format("rocketlite")
    if schema is not None:
        reader = reader.schema(schema)
    where = {
        "gRPC": {"endpoints": source.endpoint, "shortCircuit": "false"},
        "short-circuit": {"endpoints": source.endpoint},
        "remoting": {"nameServer": source.remoting_address},
        "storePath": {"storePath": str(source.store_dir), "allowLiveStore": "true"},
    }[path]
    for key, value in {**where, "topic": TOPIC, **options}.items():
        reader = reader.option(key, value)
    return reader.load()


def table(rows) -> list[tuple]:
    """Rows as sorted tuples (maps as sorted items), comparable across reads."""
    return sorted(
        tuple(sorted(v.items()) if isinstance(v, dict) else v for v in row) for row in rows
    )


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("schema", SCHEMAS.values(), ids=SCHEMAS.keys())
def test_a_projection_reads_the_full_reads_columns(spark, source, path, schema):
    projected = load(spark, source, path, schema)
    names = [part.split()[0] for part in schema.split(", ")]
    assert projected.columns == names
    full = load(spark, source, path).select(*names)
    assert projected.schema == full.schema  # the user's types are the source's
    rows = projected.collect()
    assert len(rows) == 93
    assert table(rows) == table(full.collect())
    if "body" in names:
        assert [r.body for r in rows].count(TEXT) == 3  # compressed bodies come inflated


@pytest.mark.parametrize("path", PATHS)
def test_a_tag_filter_needs_no_tags_column(spark, source, path):
    schema = "queueId int, queueOffset long, body binary"
    got = load(spark, source, path, schema, subExpression="TagA || TagC").collect()
    full = load(spark, source, path).where(F.col("tags").isin("TagA", "TagC"))
    assert table(got) == table(full.select("queueId", "queueOffset", "body").collect())
    assert len(got) == 45 + 3


def test_streaming_available_now_reads_the_projection(spark, source, tmp_path):
    schema = "body binary, queueId int, queueOffset long"
    df = (
        spark.readStream.format("rocketlite")
        .schema(schema)
        .option("endpoints", source.endpoint)
        .option("topic", TOPIC)
        .option("startingOffsets", "earliest")
        .option("maxMessagesPerTrigger", "40")
        .load()
    )
    assert df.columns == ["body", "queueId", "queueOffset"]
    query = (
        df.writeStream.format("memory")
        .queryName("projected_stream")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(120), "the AvailableNow query did not finish"
        assert query.exception() is None
        got = spark.table("projected_stream").collect()
    finally:
        if query.isActive:
            query.stop()
    full = load(spark, source, "gRPC").select("body", "queueId", "queueOffset")
    assert table(got) == table(full.collect())
    assert len([p for p in query.recentProgress if p["numInputRows"]]) >= 3  # several batches


def test_names_compare_case_insensitively_and_keep_the_users_spelling(spark, source):
    projected = load(spark, source, "gRPC", "QUEUEOFFSET long, Body binary, QueueId int")
    assert projected.columns == ["QUEUEOFFSET", "Body", "QueueId"]
    got = projected.select("queueId", "queueoffset", "body").collect()  # Spark's resolution
    full = load(spark, source, "gRPC").select("queueId", "queueOffset", "body")
    assert table(got) == table(full.collect())


def test_filter_pushdown_works_with_a_projection(spark, source):
    schema = "QueueId int, queueOffset long, TAGS string, body binary"
    full = load(spark, source, "gRPC").select("queueId", "queueOffset", "tags", "body")
    expected = table(full.where("queueId = 1 AND queueOffset >= 10 AND tags = 'TagB'").collect())
    with pushdown(spark):
        df = load(spark, source, "gRPC", schema, filterPushdown="true")
        before = messages_pulled(source.endpoint)
        got = df.where("QueueId = 1 AND queueOffset >= 10 AND TAGS = 'TagB'").collect()
        read = messages_pulled(source.endpoint) - before
    assert table(got) == expected and len(expected) == 5
    assert read <= 21  # one queue, from offset 10, the broker's tag filter: not 93


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        (
            "queueOffset long, offset long",
            r"no column 'offset'.*its columns are topic string, brokerName string",
        ),
        (
            "queueOffset int",
            r"column 'queueOffset' is int .* the source's queueOffset is bigint; declare it as "
            r"'queueOffset bigint'",
        ),
        ("body binary, BODY binary", r"column 'body' is in the schema given with .* twice"),
    ],
    ids=["unknown", "type", "twice"],
)
def test_a_bad_schema_fails_naming_the_column(spark, source, schema, message, tmp_path):
    with pytest.raises(Exception, match=message):
        load(spark, source, "gRPC", schema).collect()
    df = (
        spark.readStream.format("rocketlite")
        .schema(schema)
        .option("endpoints", source.endpoint)
        .option("topic", TOPIC)
        .load()
    )
    with pytest.raises(Exception, match=message):
        query = (
            df.writeStream.format("noop")
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        try:
            query.awaitTermination(60)
        finally:
            query.stop()
