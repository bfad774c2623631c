"""The push consumer's pure parts: settings, listener context, delivered messages, and the
de-duplicating listener wrapper (the broker-backed behaviour is in tests/integration)."""

from __future__ import annotations

import copy
import pickle

import pyarrow as pa
import pytest

from rmq_spark.client.dedup import DedupWindow, deduplicating
from rmq_spark.client.push import (
    ConsumeContext,
    ConsumeStatus,
    PushConsumer,
    PushConsumerConfig,
    ReceivedMessage,
)
from rmq_spark.client.push.message import PulledColumns, messages_from_batch, messages_of
from rmq_spark.codec.arrow_decode import decode_records
from rmq_spark.codec.properties import encode_properties
from rmq_spark.codec.record import Record, encode_record
from rmq_spark.errors import InvalidArgumentError
from rmq_spark.structs import MessageQueue

MQ = MessageQueue("orders", "broker-a", 0)
RETRY_MQ = MessageQueue("%RETRY%g1", "broker-a", 0)


# --- settings -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("consume_thread_count", 0),
        ("consume_message_batch_max_size", 0),
        ("queue_lease_ms", -5),
        ("max_reconsume_times", 0),
        ("long_poll_ms", -1),
        ("drain_timeout_ms", "10s"),
        ("persist_interval_ms", True),
    ],
)
def test_bad_setting_is_refused_naming_it(field: str, value: object) -> None:
    with pytest.raises(InvalidArgumentError, match=field):
        PushConsumerConfig(**{field: value})


def test_bad_message_model_and_strategy_are_refused_before_any_connection() -> None:
    with pytest.raises(InvalidArgumentError, match="message_model='CLUSTER'"):
        PushConsumer("g1", "127.0.0.1:1", message_model="CLUSTER")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="avgg"):
        PushConsumer("g1", "127.0.0.1:1", strategy="avgg")


def test_start_without_listener_or_subscription_says_what_is_missing() -> None:
    consumer = PushConsumer("g1", "127.0.0.1:1")
    try:
        consumer.subscribe("orders")
        with pytest.raises(InvalidArgumentError, match="register_listener"):
            consumer.start()
        consumer.register_listener(lambda messages, context: ConsumeStatus.CONSUME_SUCCESS)
        consumer.unsubscribe("orders")
        with pytest.raises(InvalidArgumentError, match="subscribe"):
            consumer.start()
    finally:
        consumer.shutdown()


def test_client_ids_are_unique_per_consumer_and_stable_for_broadcasting() -> None:
    a, b = PushConsumer("g1", "127.0.0.1:1"), PushConsumer("g1", "127.0.0.1:1")
    c = PushConsumer("g1", "127.0.0.1:1", message_model="BROADCASTING")
    d = PushConsumer("g1", "127.0.0.1:1", message_model="BROADCASTING")
    try:
        assert a.client_id != b.client_id
        # the broadcasting offsets file is found by the client id after a restart
        assert c.client_id == d.client_id and c.client_id.endswith("@DEFAULT")
    finally:
        for consumer in (a, b, c, d):
            consumer.shutdown()


# --- listener context ---------------------------------------------------------------------


def test_context_refuses_bad_ack_index_and_delay_level() -> None:
    context = ConsumeContext(MQ)
    context.ack_index = -1
    context.ack_index = 3
    with pytest.raises(InvalidArgumentError, match="ack_index=-2"):
        context.ack_index = -2
    with pytest.raises(InvalidArgumentError, match="delay_level_when_next_consume=19"):
        context.delay_level_when_next_consume = 19
    assert (context.ack_index, context.delay_level_when_next_consume) == (3, 0)
    with pytest.raises(InvalidArgumentError, match="ack_index=-3"):
        ConsumeContext(MQ, ack_index=-3)
    with pytest.raises(InvalidArgumentError, match="delay_level_when_next_consume=False"):
        ConsumeContext(MQ, delay_level_when_next_consume=False)
    assert ConsumeContext(MQ, 2, 5) == ConsumeContext(
        MQ, ack_index=2, delay_level_when_next_consume=5
    )


# --- delivered messages -------------------------------------------------------------------


def _batch(*records: Record):
    return decode_records(b"".join(encode_record(r) for r in records))


def test_messages_carry_the_record_fields() -> None:
    props = encode_properties({"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "AB" * 16, "x": "1"})
    batch = _batch(
        Record(
            "orders",
            0,
            b"hello",
            props,
            queue_offset=7,
            physical_offset=123,
            born_timestamp=1_000,
            store_timestamp=2_000,
            flag=5,
        )
    )
    (m,) = messages_from_batch(batch, MQ)
    assert (m.topic, m.message_queue, m.queue_offset, m.body) == ("orders", MQ, 7, b"hello")
    assert (m.msg_id, m.tags, m.keys, m.flag) == ("AB" * 16, "TagA", "k1 k2", 5)
    assert (m.born_timestamp_ms, m.store_timestamp_ms, m.reconsume_times) == (1_000, 2_000, 0)
    assert m.properties["x"] == "1" and not m.is_retry
    assert m.commit_log_offset == 123 and len(m.offset_msg_id) == 32


def test_a_redelivery_reports_the_original_topic_and_keeps_its_id() -> None:
    props = encode_properties({"UNIQ_KEY": "CD" * 16, "RETRY_TOPIC": "orders"})
    batch = _batch(Record("%RETRY%g1", 0, b"x", props, queue_offset=3, reconsume_times=2))
    (m,) = messages_from_batch(batch, RETRY_MQ)
    assert (m.topic, m.message_queue, m.msg_id, m.reconsume_times) == (
        "orders",
        RETRY_MQ,
        "CD" * 16,
        2,
    )
    assert m.is_retry


def test_a_message_without_uniq_key_is_identified_by_its_offset_id() -> None:
    (m,) = messages_from_batch(_batch(Record("orders", 0, b"x")), MQ)
    assert m.msg_id == m.offset_msg_id


def test_fields_of_pulled_messages_may_be_assigned_one_message_at_a_time() -> None:
    batch = _batch(
        *(Record("orders", 0, b"x", queue_offset=i, reconsume_times=1) for i in range(3))
    )
    first, second, third = messages_from_batch(batch, MQ)
    second.reconsume_times += 1
    second.body = b"changed"
    assert [m.reconsume_times for m in (first, second, third)] == [1, 2, 1]
    assert [m.body for m in (first, second, third)] == [b"x", b"changed", b"x"]
    second.message_queue = RETRY_MQ
    assert (first.message_queue, second.message_queue) == (MQ, RETRY_MQ)
    assert second.queue_offset == 1 and second.reconsume_times == 2


def test_messages_compare_and_print_by_their_fields() -> None:
    (pulled,) = messages_from_batch(_batch(Record("orders", 0, b"x", queue_offset=4)), MQ)
    made = ReceivedMessage(
        pulled.topic,
        MQ,
        4,
        pulled.msg_id,
        pulled.offset_msg_id,
        None,
        None,
        b"x",
        pulled.properties,
        pulled.born_timestamp_ms,
        pulled.store_timestamp_ms,
        pulled.born_host,
        pulled.store_host,
        0,
        pulled.commit_log_offset,
        0,
    )
    assert made == pulled and made != _msg("other", 4)
    assert repr(made) == repr(pulled)
    assert pickle.loads(pickle.dumps(pulled)) == pulled  # e.g. handed to a process pool
    assert copy.deepcopy(pulled) == pulled
    assert repr(made).startswith("ReceivedMessage(topic='orders', message_queue=")
    assert "queue_offset=4" in repr(made) and "properties" not in repr(made)


def test_a_pull_counts_the_offsets_and_body_bytes_of_the_messages_it_keeps() -> None:
    """What the process queue (and its flow control) is given, also after the tag filter
    dropped some rows of the pull."""
    bodies = [b"a", b"bbbb", b"", b"cc", b"ddddd"]
    records = [Record("orders", 0, body, queue_offset=10 + i) for i, body in enumerate(bodies)]
    kept = _batch(*records).filter(pa.array([False, True, True, False, True]))
    columns = PulledColumns(kept, MQ)
    assert columns.offsets().tolist() == [11, 12, 14]
    assert columns.body_sizes().tolist() == [4, 0, 5]
    assert [m.body for m in messages_of(columns)] == [b"bbbb", b"", b"ddddd"]


# --- the de-duplicating wrapper -----------------------------------------------------------


def _msg(msg_id: str, offset: int) -> ReceivedMessage:
    return ReceivedMessage(
        "orders", MQ, offset, msg_id, "0" * 32, None, None, b"", {}, 0, 0, "", "", 0, 0, 0
    )


def test_wrapper_skips_ids_already_consumed_and_marks_what_succeeded() -> None:
    window = DedupWindow(None, capacity=100)
    seen: list[str] = []

    def listener(messages, context):
        seen.extend(m.msg_id for m in messages)
        return ConsumeStatus.CONSUME_SUCCESS

    wrapped = deduplicating(listener, window)
    batch = [_msg("a", 0), _msg("b", 1)]
    assert wrapped(batch, ConsumeContext(MQ)) is ConsumeStatus.CONSUME_SUCCESS
    assert wrapped(batch, ConsumeContext(MQ)) is ConsumeStatus.CONSUME_SUCCESS  # redelivery
    assert seen == ["a", "b"]
    assert "a" in window and "b" in window


def test_wrapper_maps_a_partial_failure_onto_the_whole_batch() -> None:
    window = DedupWindow(None, capacity=100)
    window.mark_consumed("b")  # consumed earlier: skipped

    def listener(messages, context):
        assert [m.msg_id for m in messages] == ["a", "c", "d"]
        context.ack_index = 0  # "a" done, "c" and "d" failed
        context.delay_level_when_next_consume = 2
        return ConsumeStatus.RECONSUME_LATER

    context = ConsumeContext(MQ)
    batch = [_msg("a", 0), _msg("b", 1), _msg("c", 2), _msg("d", 3)]
    assert deduplicating(listener, window)(batch, context) is ConsumeStatus.RECONSUME_LATER
    # everything before "c" (index 2 of the batch) is done; "c" and "d" go to retry
    assert (context.ack_index, context.delay_level_when_next_consume) == (1, 2)
    assert "a" in window and "c" not in window and "d" not in window


def test_wrapper_marks_nothing_when_the_listener_fails_everything() -> None:
    window = DedupWindow(None, capacity=100)
    context = ConsumeContext(MQ)
    status = deduplicating(lambda m, c: ConsumeStatus.RECONSUME_LATER, window)(
        [_msg("a", 0), _msg("b", 1)], context
    )
    assert status is ConsumeStatus.RECONSUME_LATER and context.ack_index == -1
    assert len(window) == 0
