"""Queue selection of the producer: round robin across brokers and sharding by key."""

from __future__ import annotations

from collections import Counter

import pytest

from rmq_spark.client import RoundRobinSelector, select_by_sharding_key
from rmq_spark.codec.java_hash import java_string_hash
from rmq_spark.errors import InvalidArgumentError
from rmq_spark.structs import MessageQueue

QUEUES = sorted(
    MessageQueue("T", broker, q) for broker in ("broker-a", "broker-b") for q in range(4)
)


def test_round_robin_visits_every_queue_of_every_broker_evenly():
    selector = RoundRobinSelector()
    picks = Counter(selector.select(QUEUES) for _ in range(len(QUEUES) * 3))
    assert set(picks) == set(QUEUES)
    assert set(picks.values()) == {3}


def test_round_robin_counts_per_topic():
    selector = RoundRobinSelector(start=0)
    other = [MessageQueue("U", "broker-a", 0), MessageQueue("U", "broker-a", 1)]
    assert selector.select(QUEUES) == QUEUES[0]
    assert selector.select(other) == other[0]
    assert selector.select(QUEUES) == QUEUES[1]


def test_round_robin_skips_avoided_brokers_unless_nothing_else_is_left():
    selector = RoundRobinSelector(start=0)
    picks = [selector.select(QUEUES, avoid={"broker-a"}) for _ in range(8)]
    assert {mq.broker_name for mq in picks} == {"broker-b"}
    assert len(set(picks)) == 4  # still rotates over broker-b's queues
    assert selector.select(QUEUES, avoid={"broker-a", "broker-b"}) in QUEUES


def test_sharding_key_follows_rocketmq_select_by_hash():
    for key in ["order-1", "order-2", "user-42", "é", "a" * 100]:
        expected = QUEUES[abs(java_string_hash(key)) % len(QUEUES)]
        assert select_by_sharding_key(QUEUES, key) == expected
        assert select_by_sharding_key(list(QUEUES), key) == expected  # stable


def test_sharding_key_handles_the_most_negative_hash():
    key = "polygenelubricants"  # Java hashCode == Integer.MIN_VALUE
    assert java_string_hash(key) == -(2**31)
    assert select_by_sharding_key(QUEUES, key) == QUEUES[(2**31) % len(QUEUES)]


@pytest.mark.parametrize("key", ["", None])
def test_sharding_key_must_be_a_non_empty_string(key):
    with pytest.raises(InvalidArgumentError, match="sharding key"):
        select_by_sharding_key(QUEUES, key)


def test_no_queue_to_pick_from():
    with pytest.raises(InvalidArgumentError, match="no writable queue"):
        RoundRobinSelector().select([])
