"""Which stored records a consumer group may give back (check_send_back_source)."""

from __future__ import annotations

import pytest

from rmq_spark.broker.delivery.retry import check_send_back_source
from rmq_spark.errors import InvalidArgumentError, PermissionDeniedError

ALLOWED = [
    # (record topic, group, original_topic)
    ("TopicA", "G", "TopicA"),
    ("%RETRY%G", "G", "TopicA"),
    ("%RETRY%G", "G", ""),
    ("%RETRY%G", "G", "%RETRY%G"),
    ("RMQ_SYS_TRACE_TOPIC", "G", "RMQ_SYS_TRACE_TOPIC"),  # a client topic despite its name
]

REFUSED = [
    # (record topic, group, original_topic, error, topic the message names)
    ("Secret", "G", "", InvalidArgumentError, "Secret"),
    ("Secret", "G", "TopicA", InvalidArgumentError, "Secret"),
    ("TopicA", "G", "%RETRY%G", InvalidArgumentError, "TopicA"),
    ("RMQ_SYS_TRANS_HALF_TOPIC", "G", "", PermissionDeniedError, "RMQ_SYS_TRANS_HALF_TOPIC"),
    (
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "G",
        "RMQ_SYS_TRANS_HALF_TOPIC",
        PermissionDeniedError,
        "RMQ_SYS_TRANS_HALF_TOPIC",
    ),
    ("RMQ_SYS_TRANS_OP_HALF_TOPIC", "G", "TopicA", PermissionDeniedError, "RMQ_SYS_TRANS_OP"),
    ("SCHEDULE_TOPIC_XXXX", "G", "", PermissionDeniedError, "SCHEDULE_TOPIC_XXXX"),
    ("rmq_sys_wheel_timer", "G", "", PermissionDeniedError, "rmq_sys_wheel_timer"),
    ("RMQ_SYS_SINK_HALF_TOPIC", "G", "", PermissionDeniedError, "RMQ_SYS_SINK_HALF_TOPIC"),
    ("TRANS_CHECK_MAX_TIME_TOPIC", "G", "", PermissionDeniedError, "TRANS_CHECK_MAX_TIME"),
    ("rmq_sys_other", "G", "rmq_sys_other", PermissionDeniedError, "rmq_sys_other"),
    ("%DLQ%G", "G", "", PermissionDeniedError, "%DLQ%G"),
    ("%DLQ%G", "G", "%DLQ%G", PermissionDeniedError, "%DLQ%G"),
    ("%DLQ%H", "G", "%DLQ%H", PermissionDeniedError, "%DLQ%H"),
    ("%RETRY%H", "G", "", PermissionDeniedError, "%RETRY%H"),
    ("%RETRY%H", "G", "%RETRY%H", PermissionDeniedError, "%RETRY%H"),
    # a checked original_topic of the broker's own does not open its records either
    ("%RETRY%G", "G", "RMQ_SYS_TRANS_HALF_TOPIC", PermissionDeniedError, "RMQ_SYS_TRANS_HALF"),
]


@pytest.mark.parametrize(("record_topic", "group", "original_topic"), ALLOWED)
def test_a_record_of_the_group_or_its_named_topic_may_be_given_back(
    record_topic: str, group: str, original_topic: str
) -> None:
    check_send_back_source(record_topic, group, original_topic)


@pytest.mark.parametrize(("record_topic", "group", "original_topic", "error", "named"), REFUSED)
def test_a_record_of_another_or_a_broker_topic_is_refused(
    record_topic: str,
    group: str,
    original_topic: str,
    error: type[Exception],
    named: str,
) -> None:
    with pytest.raises(error) as raised:
        check_send_back_source(record_topic, group, original_topic)
    assert named in str(raised.value)
    if error is InvalidArgumentError:
        assert not isinstance(raised.value, PermissionDeniedError)
