"""The streaming reader's calls as Spark makes them, against real brokers, without a query:
what each call returns when brokers change under it."""

from __future__ import annotations

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from rmq_spark.errors import UnavailableError
from rmq_spark.source.options import SourceOptions
from rmq_spark.source.stream_reader import RocketliteStreamReader
from tests.support.spark_helpers import create_topic, produce


def reader_for(endpoints: str, topic: str, **options: str) -> RocketliteStreamReader:
    settings = {"endpoints": endpoints, "topic": topic, "maxRetries": "1", "retryBackoffMs": "50"}
    return RocketliteStreamReader(SourceOptions.parse({**settings, **options}, streaming=True))


@pytest.fixture
def two_brokers(broker_factory):
    brokers = [broker_factory("broker-p"), broker_factory("broker-q")]
    return brokers, ",".join(b.endpoint for b in brokers)


def test_initial_offset_is_fixed_once_and_partitions_are_empty_without_news(broker, topic):
    create_topic(broker.endpoint, topic, queues=2)
    produce(broker.endpoint, topic, 3)
    reader = reader_for(broker.endpoint, topic)  # startingOffsets latest
    first = reader.initialOffset()
    produce(broker.endpoint, topic, 2, prefix="later")
    assert reader.initialOffset() == first == {topic: {"broker-a": {"0": 3, "1": 3}}}
    assert reader.partitions(first, first) == []
    end = reader.latestOffset(first, ReadAllAvailable())
    assert end == {topic: {"broker-a": {"0": 5, "1": 5}}}
    assert reader.reportLatestOffset() == end
    assert [p.size for p in reader.partitions(first, end)] == [2, 2]
    reader.stop()


def test_a_silent_broker_keeps_its_offsets_while_the_other_goes_on(two_brokers, topic):
    (p, q), endpoints = two_brokers
    create_topic(endpoints, topic, queues=1)
    reader = reader_for(endpoints, topic, startingOffsets="earliest")
    start = reader.initialOffset()
    for b in (p, q):
        produce(endpoints, topic, {0: 4}, broker=b.name)
    q.stop()
    end = reader.latestOffset(start, ReadMaxRows(100))
    assert end == {topic: {"broker-p": {"0": 4}, "broker-q": {"0": 0}}}
    reader.stop()


def test_available_now_fails_rather_than_stop_short_of_a_silent_broker(two_brokers, topic):
    (p, q), endpoints = two_brokers
    create_topic(endpoints, topic, queues=1)
    for b in (p, q):
        produce(endpoints, topic, {0: 4}, broker=b.name)
    reader = reader_for(endpoints, topic, startingOffsets="earliest")
    reader.prepareForTriggerAvailableNow()
    start = reader.initialOffset()
    produce(endpoints, topic, {0: 9}, broker="broker-p", prefix="late")  # after the start
    end = reader.latestOffset(start, ReadAllAvailable())
    assert end == {topic: {"broker-p": {"0": 4}, "broker-q": {"0": 4}}}  # not the late ones
    assert reader.latestOffset(end, ReadAllAvailable()) == end  # done: the query ends
    q.stop()
    with pytest.raises(UnavailableError, match="broker-q did not answer"):
        reader.latestOffset(start, ReadAllAvailable())
    reader.stop()
