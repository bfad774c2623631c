"""How messages name a queue."""

from __future__ import annotations

import pytest

from rmq_spark.structs import MessageQueue


@pytest.mark.parametrize(
    ("queue", "text"),
    [
        (MessageQueue("Orders", "broker-a", 3), "topic 'Orders' broker 'broker-a' queue 3"),
        (MessageQueue("%RETRY%g", "b", 0), "topic '%RETRY%g' broker 'b' queue 0"),
        (MessageQueue("it's", "", 12), "topic \"it's\" broker '' queue 12"),
    ],
)
def test_describe(queue: MessageQueue, text: str) -> None:
    assert queue.describe() == text


def test_describe_is_no_field() -> None:
    queue = MessageQueue("T", "b", 1)
    assert tuple(queue) == ("T", "b", 1) and len(queue) == 3
    assert queue._asdict() == {"topic": "T", "broker_name": "b", "queue_id": 1}
