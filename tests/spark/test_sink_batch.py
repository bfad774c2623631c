"""The ``rocketlite`` sink with ``df.write``: rows written to a real broker and read back as
a consumer sees them; bad input refused with errors naming the column or the row."""

from __future__ import annotations

import pytest

from rmq_spark.client import Admin
from tests.support.sink_helpers import bodies, read_all
from tests.support.spark_helpers import create_topic


def write(df, endpoints: str, topic: str | None = None, **options):
    writer = df.write.format("rocketlite").option("endpoints", endpoints).mode("append")
    if topic is not None:
        writer = writer.option("topic", topic)
    for key, value in options.items():
        writer = writer.option(key, str(value))
    writer.save()


def test_batch_write_round_trip(spark, broker, topic):
    create_topic(broker.endpoint, topic, queues=4)
    rows = [
        (
            f"body-{i}".encode(),
            f"tag{i % 3}",
            [f"k{i}", f"order-{i % 5}"],
            {"n": str(i), "kind": "test"},
            f"order-{i % 5}",
        )
        for i in range(500)
    ]
    df = spark.createDataFrame(
        rows,
        "body binary, tags string, keys array<string>, properties map<string,string>, "
        "shardingKey string",
    ).repartition(3)
    write(df, broker.endpoint, topic)

    found = read_all(broker.endpoint, topic)
    messages = [m for queue in found.values() for m in queue]
    assert sorted(m["body"] for m in messages) == sorted(r[0] for r in rows)
    by_body = {m["body"]: m for m in messages}
    for body, tag, keys, props, _ in rows:
        message = by_body[body]
        assert message["tags"] == tag
        assert message["keys"] == keys
        assert {k: message["properties"][k] for k in props} == props
    # one sharding key, one queue
    queues_of_key: dict[str, set] = {}
    for mq, queue in found.items():
        for message in queue:
            queues_of_key.setdefault(message["keys"][1], set()).add(mq)
    assert len(queues_of_key) == 5
    assert all(len(queues) == 1 for queues in queues_of_key.values()), queues_of_key


def test_order_per_sharding_key_is_kept(spark, broker, topic):
    create_topic(broker.endpoint, topic, queues=4)
    # one partition: the rows' order is the order the sink receives them in
    df = (
        spark.range(2000)
        .selectExpr(
            "CAST(id AS STRING) AS body", "CONCAT('key-', CAST(id % 7 AS STRING)) AS shardingKey"
        )
        .coalesce(1)
    )
    write(df, broker.endpoint, topic, sendBatchSize=100)
    found = read_all(broker.endpoint, topic)
    per_key: dict[str, list[int]] = {}
    for queue in found.values():
        for message in queue:
            number = int(message["body"])
            per_key.setdefault(f"key-{number % 7}", []).append(number)
    assert sum(len(v) for v in per_key.values()) == 2000
    for numbers in per_key.values():
        assert numbers == sorted(numbers)


def test_source_rows_written_back_as_they_are(spark, broker, topic):
    source = topic + "-in"
    create_topic(broker.endpoint, source, queues=2)
    create_topic(broker.endpoint, topic, queues=2)
    seed = spark.createDataFrame(
        [(f"m{i}", "TagA", f"key{i}") for i in range(50)], "body string, tags string, keys string"
    )
    write(seed, broker.endpoint, source)
    read = (
        spark.read.format("rocketlite")
        .option("endpoints", broker.endpoint)
        .option("topic", source)
        .load()
    )
    write(read.drop("topic"), broker.endpoint, topic)
    copied = [m for q in read_all(broker.endpoint, topic).values() for m in q]
    assert sorted(m["body"] for m in copied) == sorted(f"m{i}".encode() for i in range(50))
    assert {m["tags"] for m in copied} == {"TagA"}
    assert sorted(m["keys"][0] for m in copied) == sorted(f"key{i}" for i in range(50))


def test_topic_column_routes_each_row(spark, broker, topic):
    other = topic + "-other"
    create_topic(broker.endpoint, topic, queues=2)
    create_topic(broker.endpoint, other, queues=2)
    df = spark.createDataFrame(
        [(f"r{i}", topic if i % 2 else other) for i in range(40)], "body string, topic string"
    )
    write(df, broker.endpoint)
    odd = bodies(broker.endpoint, topic)
    even = bodies(broker.endpoint, other)
    assert odd == sorted(f"r{i}".encode() for i in range(40) if i % 2)
    assert even == sorted(f"r{i}".encode() for i in range(40) if not i % 2)


# -- bad input -------------------------------------------------------------------------------


def _fails(df, endpoints, topic, match, **options):
    with pytest.raises(Exception, match=match):
        write(df, endpoints, topic, **options)


def test_missing_body_is_refused_naming_the_columns(spark, broker, topic):
    create_topic(broker.endpoint, topic)
    df = spark.createDataFrame([("x",)], "value string")
    _fails(df, broker.endpoint, topic, "needs a column 'body'.*value")


def test_unknown_column_is_refused_naming_it(spark, broker, topic):
    create_topic(broker.endpoint, topic)
    df = spark.createDataFrame([("x", 1)], "body string, price int")
    _fails(df, broker.endpoint, topic, "column 'price' is not one the rocketlite sink writes")


def test_wrong_type_is_refused_naming_the_column(spark, broker, topic):
    create_topic(broker.endpoint, topic)
    df = spark.createDataFrame([("x", 3)], "body string, tags int")
    _fails(df, broker.endpoint, topic, "column 'tags' has type int")


def test_overwrite_is_refused(spark, broker, topic):
    create_topic(broker.endpoint, topic)
    df = spark.createDataFrame([("x",)], "body string")
    with pytest.raises(Exception, match="only appends"):
        df.write.format("rocketlite").option("endpoints", broker.endpoint).option(
            "topic", topic
        ).mode("overwrite").save()


def test_null_body_fails_naming_the_row_and_nothing_is_visible(spark, broker, topic):
    create_topic(broker.endpoint, topic, queues=2)
    rows = [(f"ok-{i}",) for i in range(300)] + [(None,)]
    df = spark.createDataFrame(rows, "body string").coalesce(1)
    _fails(df, broker.endpoint, topic, r"row 300 of Spark partition 0 has a null body")
    assert bodies(broker.endpoint, topic) == []


def test_missing_topic_is_refused_at_start(spark, broker):
    # the shared broker does not create topics on first use (its default)
    df = spark.createDataFrame([("x",)], "body string")
    _fails(df, broker.endpoint, "no-such-topic", "topic 'no-such-topic' does not exist")


def test_body_over_the_limit_fails_and_nothing_is_visible(spark, broker, topic):
    create_topic(broker.endpoint, topic, queues=1)
    with Admin(broker.endpoint) as admin:
        (info,) = admin.broker_info().values()
    limit = info.limits["max_message_bytes"]
    df = spark.createDataFrame(
        [(b"small",)] * 10 + [(b"x" * (limit + 1),)], "body binary"
    ).coalesce(1)
    _fails(df, broker.endpoint, topic, rf"row 10 of Spark partition 0 has a body of {limit + 1}")
    assert bodies(broker.endpoint, topic) == []


def test_unknown_option_is_refused(spark, broker, topic):
    create_topic(broker.endpoint, topic)
    df = spark.createDataFrame([("x",)], "body string")
    _fails(
        df,
        broker.endpoint,
        topic,
        "(?s)unknown option 'sendbatchsizes'.*did you mean sendBatchSize",
        sendBatchSizes=5,
    )


def test_a_missing_topic_is_made_by_a_broker_that_creates_topics(spark, broker_factory):
    auto = broker_factory("broker-auto", "--auto-create-topics")
    df = spark.createDataFrame([(f"n{i}",) for i in range(30)], "body string")
    write(df, auto.endpoint, "made-on-first-write")
    assert bodies(auto.endpoint, "made-on-first-write") == sorted(
        f"n{i}".encode() for i in range(30)
    )


def test_a_topic_columns_missing_topic_is_made_too(spark, broker_factory):
    auto = broker_factory("broker-auto-rows", "--auto-create-topics")
    df = spark.createDataFrame([("x", "per-row-new")], "body string, topic string")
    write(df, auto.endpoint)
    assert bodies(auto.endpoint, "per-row-new") == [b"x"]
