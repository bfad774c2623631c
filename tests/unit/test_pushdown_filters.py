"""Which filters a batch read takes over from Spark, and what they narrow."""

from __future__ import annotations

import datetime as dt

from pyspark.sql.datasource import (
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    LessThan,
    LessThanOrEqual,
    Not,
    StringStartsWith,
)

from rmq_spark.source.pushdown import push_filters


def test_queue_topic_and_tag_filters_are_taken_and_intersected():
    filters = [
        In(("queueId",), (1, 2, 3)),
        EqualTo(("queueId",), 2),
        In(("topic",), ("a", "b")),
        In(("tags",), ("TagA", "TagB")),
        EqualTo(("tags",), "TagB"),
    ]
    pushed, rest = push_filters(filters)
    assert rest == []
    assert pushed.queue_ids == {2} and pushed.topics == {"a", "b"} and pushed.tags == {"TagB"}
    assert pushed.taken == filters and not pushed.empty


def test_offset_bounds_narrow_the_range():
    pushed, rest = push_filters(
        [GreaterThan(("queueOffset",), 9), LessThanOrEqual(("queueOffset",), 20)]
    )
    assert rest == [] and pushed.offsets == (10, 21)
    pushed, _ = push_filters(
        [GreaterThanOrEqual(("queueOffset",), 5), LessThan(("queueOffset",), 5)]
    )
    assert pushed.empty  # nothing can match: nothing is read
    pushed, _ = push_filters([In(("queueOffset",), (7, 3, 11))])
    assert pushed.offsets == (3, 12)


def test_time_bounds_narrow_but_stay_with_spark():
    noon = dt.datetime(2026, 1, 1, 12, tzinfo=dt.UTC)
    ms = int(noon.timestamp() * 1000)
    filters = [
        GreaterThanOrEqual(("storeTimestamp",), noon),
        LessThan(("storeTimestamp",), noon.replace(hour=13)),
    ]
    pushed, rest = push_filters(filters)
    assert rest == filters  # Spark still checks every row
    assert pushed.store_ms == (ms - 1, ms + 3_600_000 + 1)  # a millisecond wider each way
    naive, _ = push_filters([GreaterThan(("storeTimestamp",), noon.replace(tzinfo=None))])
    assert naive.store_ms[0] == ms  # naive literals are UTC: > noon, less the millisecond


def test_what_has_no_index_or_the_wrong_type_stays_with_spark():
    filters = [
        EqualTo(("keys",), "order-1"),
        EqualTo(("msgId",), "ABC"),
        Not(EqualTo(("queueId",), 1)),
        IsNotNull(("tags",)),
        StringStartsWith(("topic",), "or"),
        EqualTo(("queueId",), "1"),
        EqualTo(("properties", "k"), "v"),
    ]
    pushed, rest = push_filters(filters)
    assert rest == filters and pushed.taken == []
    assert pushed.queue_ids is None and pushed.topics is None


def test_filters_on_a_user_schema_use_its_names():
    # .schema("QueueOffset long, TAGS string, body binary"): Spark names the user's columns
    columns = {"QueueOffset": "queueOffset", "TAGS": "tags", "body": "body"}
    keys = EqualTo(("keys",), "k")  # not in that schema: never sent, and never taken
    filters = [GreaterThanOrEqual(("QueueOffset",), 5), EqualTo(("TAGS",), "TagA"), keys]
    pushed, rest = push_filters(filters, columns)
    assert pushed.offsets == (5, 2**63 - 1) and pushed.tags == {"TagA"}
    assert rest == [keys] and rest[0] is keys  # Spark matches what it keeps by identity
