"""The Spark source's offset documents and data-loss checks (pure, no Spark session)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rmq_spark.errors import InvalidArgumentError, InvalidNameError, NotFoundError
from rmq_spark.offsets.spark import (
    EARLIEST,
    LATEST,
    DataLoss,
    advance,
    compare,
    data_loss_message,
    deleted_before_read,
    from_json_dict,
    merge,
    parse_offsets_json,
    parse_timestamps_json,
    resolve_special,
    to_json_dict,
)
from rmq_spark.structs import MessageQueue


def mq(queue_id: int, topic: str = "orders", broker: str = "broker-a") -> MessageQueue:
    return MessageQueue(topic, broker, queue_id)


def test_to_json_is_nested_and_sorted_with_queue_ids_in_numeric_order() -> None:
    offsets = {mq(10): 5, mq(2): 7, mq(0, broker="broker-b"): 1, mq(1, topic="audit"): 9}
    # Spark compares offsets as JSON text, so the order must not depend on insertion order.
    assert json.dumps(to_json_dict(offsets)) == (
        '{"audit": {"broker-a": {"1": 9}}, '
        '"orders": {"broker-a": {"2": 7, "10": 5}, "broker-b": {"0": 1}}}'
    )
    assert json.dumps(to_json_dict(dict(reversed(offsets.items())))) == json.dumps(
        to_json_dict(offsets)
    )


@pytest.mark.parametrize(
    ("offsets", "message"),
    [
        ({mq(0): -1}, "queue 0: offset -1 is not an integer in 0.."),
        ({mq(0): True}, "offset True is not"),
        ({mq(-1): 0}, "queue -1 is not a valid queue"),
        ({mq(0, broker=""): 0}, "is not a valid queue"),
        ({mq(0, topic="a b"): 0}, "topic name 'a b'"),
    ],
)
def test_to_json_refuses_what_could_not_be_read_back(offsets: dict, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        to_json_dict(offsets)


def test_empty_offsets_are_an_empty_document() -> None:
    assert to_json_dict({}) == {}
    assert from_json_dict({}) == {}


def test_from_json_reads_a_spark_checkpoint_document() -> None:
    doc = json.loads('{"orders": {"broker-a": {"0": 42, "1": 0}}, "%RETRY%g": {"b": {"0": 3}}}')
    assert from_json_dict(doc) == {mq(0): 42, mq(1): 0, MessageQueue("%RETRY%g", "b", 0): 3}


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ([1], "expected a JSON object"),
        ({"orders": 5}, "topic 'orders' must map broker names"),
        ({"orders": {"": {"0": 1}}}, "empty broker name"),
        ({"orders": {"broker-a": [1]}}, "topic 'orders' broker 'broker-a' must map queue ids"),
        (
            {"orders": {"broker-a": {"x": 1}}},
            "startingOffsets: topic 'orders' broker 'broker-a' queue 'x' is not a queue id",
        ),
        ({"orders": {"broker-a": {"01": 1}}}, "queue '01' is not a queue id"),
        ({"orders": {"broker-a": {"2147483648": 1}}}, "is not a queue id"),
        ({"orders": {"broker-a": {"0": -1}}}, "queue 0: offset -1 is not an integer in 0.."),
        ({"orders": {"broker-a": {"0": True}}}, "offset True is not"),
        ({"orders": {"broker-a": {"0": 1.5}}}, "offset 1.5 is not"),
    ],
)
def test_from_json_names_the_bad_part(doc: object, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message.replace("(", r"\(")) as info:
        from_json_dict(doc, "startingOffsets")
    assert str(info.value).startswith("startingOffsets")


def test_from_json_rejects_bad_topic_names() -> None:
    with pytest.raises(InvalidNameError, match="offset: topic name 'a b'"):
        from_json_dict({"a b": {"broker-a": {"0": 1}}})


offsets_strategy = st.dictionaries(
    st.builds(
        MessageQueue,
        st.sampled_from(["orders", "audit", "%DLQ%g", "t-1"]),
        st.sampled_from(["broker-a", "broker-b", "room1@broker-c"]),
        st.integers(0, 2**31 - 1),
    ),
    st.integers(0, 2**63 - 1),
)


@given(offsets_strategy)
def test_json_round_trip_through_text(offsets: dict[MessageQueue, int]) -> None:
    text = json.dumps(to_json_dict(offsets))
    assert from_json_dict(json.loads(text)) == offsets
    # Re-encoding what Spark hands back gives the identical text.
    assert json.dumps(to_json_dict(from_json_dict(json.loads(text)))) == text


def test_parse_user_offsets_keeps_special_values() -> None:
    text = '{"orders": {"broker-a": {"0": 5, "1": -2, "2": -1}}}'
    assert parse_offsets_json(text, "startingOffsets") == {mq(0): 5, mq(1): EARLIEST, mq(2): LATEST}


@pytest.mark.parametrize(
    ("text", "kwargs", "message"),
    [
        ("{not json", {}, "startingOffsets is not valid JSON"),
        ('{"orders": {"broker-a": {"0": -3}}}', {}, "offset -3 is not an integer in 0.*-2.*-1"),
        ('{"orders": {"broker-a": {"0": -1}}}', {"allow_latest": False}, "-1 \\(latest\\)"),
        ('{"orders": {"broker-a": {"0": -2}}}', {"allow_earliest": False}, "-2 \\(earliest\\)"),
        ('{"orders": {"broker-a": {"0": 1, "0": 2}}}', {}, "key '0' appears twice"),
        ("[]", {}, "expected a JSON object"),
    ],
)
def test_parse_user_offsets_errors(text: str, kwargs: dict, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        parse_offsets_json(text, "startingOffsets", **kwargs)


def test_parse_timestamps() -> None:
    text = '{"orders": {"broker-a": {"0": 1700000000000}}}'
    assert parse_timestamps_json(text, "startingOffsetsByTimestamp") == {mq(0): 1700000000000}
    with pytest.raises(InvalidArgumentError, match="queue 0: timestamp -2 is not milliseconds"):
        parse_timestamps_json('{"orders": {"broker-a": {"0": -2}}}', "startingOffsetsByTimestamp")


def test_resolve_special_values() -> None:
    requested = {mq(0): EARLIEST, mq(1): LATEST, mq(2): 7}
    earliest = {mq(0): 3, mq(1): 4, mq(2): 0}
    latest = {mq(0): 30, mq(1): 40, mq(2): 50}
    assert resolve_special(requested, earliest, latest) == {mq(0): 3, mq(1): 40, mq(2): 7}
    with pytest.raises(NotFoundError, match=r"startingOffsets: topic 'orders' .* queue 9 does not"):
        resolve_special({mq(9): LATEST}, earliest, latest, "startingOffsets")


def test_merge_later_mapping_wins() -> None:
    assert merge({mq(0): 1, mq(1): 2}, {mq(1): 5, mq(2): 0}) == {mq(0): 1, mq(1): 5, mq(2): 0}


def test_advance_moves_forward_and_adds_new_queues() -> None:
    assert advance({mq(0): 1, mq(1): 2}, {mq(0): 4, mq(2): 9}) == {mq(0): 4, mq(1): 2, mq(2): 9}
    with pytest.raises(InvalidArgumentError, match=r"cannot move topic 'orders' .*queue 1 back"):
        advance({mq(0): 1, mq(1): 8}, {mq(1): 2})


def test_compare_reports_queues_that_went_backwards_or_vanished() -> None:
    start = {mq(0): 10, mq(1): 10, mq(2): 10, mq(3): 10}
    latest = {mq(0): 12, mq(1): 10, mq(3): 4}
    assert compare(start, latest) == [
        DataLoss(mq(2), "vanished", 10),
        DataLoss(mq(3), "reset", 10, 4),
    ]


def test_deleted_before_read() -> None:
    start = {mq(0): 10, mq(1): 10}
    assert deleted_before_read(start, {mq(0): 25, mq(1): 10}) == [
        DataLoss(mq(0), "deleted", 10, 25)
    ]


def test_data_loss_messages_name_the_queue_and_offsets() -> None:
    losses = [
        DataLoss(mq(0), "deleted", 10, 25),
        DataLoss(mq(1), "reset", 10, 4),
        DataLoss(mq(2), "vanished", 10),
    ]
    text = data_loss_message(losses, fail_on_data_loss=True)
    assert "set the source option failOnDataLoss to 'false'" in text
    assert (
        "topic 'orders' broker 'broker-a' queue 0: messages 10..24 were deleted before they "
        "were read (15 messages" in text
    )
    assert "queue 1: the queue now ends at offset 4, before the next offset to read 10" in text
    assert "queue 2: the queue no longer exists" in text
    assert "continuing because failOnDataLoss is 'false'" in data_loss_message(
        losses, fail_on_data_loss=False
    )


def test_data_loss_message_summarises_many_queues() -> None:
    losses = [DataLoss(mq(i), "vanished", 0) for i in range(25)]
    text = data_loss_message(losses, fail_on_data_loss=True)
    assert "queue 9:" in text and "queue 10:" not in text
    assert "... and 15 more queues" in text
