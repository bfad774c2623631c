"""Messages sent by the official RocketMQ 5 producer, read by the Spark source: services that
already speak RocketMQ 5 feed Spark with nothing but their endpoint changed."""

from __future__ import annotations

from rocketmq import ClientConfiguration, Credentials, Message, Producer

from tests.support.spark_helpers import create_topic


def test_spark_reads_official_producer_messages_with_tags_keys_properties_and_ids(
    spark, broker, topic
):
    create_topic(broker.endpoint, topic, queues=2)
    producer = Producer(ClientConfiguration(broker.endpoint, Credentials()), (topic,))
    producer.startup()
    try:
        receipts = {}
        for i in range(6):
            message = Message()
            message.topic = topic
            message.body = f"event-{i}".encode()
            message.tag = "Created" if i % 2 else "Updated"
            message.keys = f"order-{i}"
            message.add_property("tenant", f"t{i % 3}")
            receipts[f"event-{i}"] = producer.send(message)
    finally:
        producer.shutdown()

    rows = (
        spark.read.format("rocketlite")
        .option("endpoints", broker.endpoint)
        .option("topic", topic)
        .load()
        .collect()
    )
    assert len(rows) == 6
    for row in rows:
        body = row.body.decode()
        i = int(body.split("-")[1])
        receipt = receipts[body]
        assert row.tags == ("Created" if i % 2 else "Updated")
        assert row.keys == f"order-{i}"
        assert row.properties["tenant"] == f"t{i % 3}"
        assert row.properties["UNIQ_KEY"] == receipt.message_id
        assert row.queueOffset == receipt.offset
    assert sorted(r.queueId for r in rows) == [0, 0, 0, 1, 1, 1]
