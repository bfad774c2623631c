"""CONSUMER_SEND_MSG_BACK: a consumer gives back a message it failed to consume.

RocketMQ's rule (facts sheet, section 9): the broker writes a copy of the stored record to
the group's retry topic ``%RETRY%{group}`` (one queue) with reconsume count + 1, delayed by
level ``3 + reconsumeTimes`` unless the consumer asked for a level; once the record's
reconsume count has reached ``max_reconsume_times`` (or the consumer says so) the copy goes
to the dead-letter topic ``%DLQ%{group}`` instead, undelayed, and is not redelivered.

The copy keeps the body, flag, born host and time, tags and every property, so it keeps its
``UNIQ_KEY`` (the message id a consumer sees stays the same across retries). Two properties
are set only the first time: ``RETRY_TOPIC`` (the topic the consumer subscribed to, where the
message returns) and ``ORIGIN_MESSAGE_ID`` (the offset message id of the first stored copy).

:func:`plan_send_back` is the rule as a pure function, :func:`check_send_back_source` what a
consumer may give back; :func:`write_send_back` writes the copy through the broker's write
path (delayed copies via the scheduler). The broker core
(:meth:`rmq_spark.broker.core.messaging.MessagingCore.send_back`) is what front-ends call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rmq_spark.codec.properties import (
    DELAY,
    ORIGIN_MESSAGE_ID,
    RETRY_TOPIC,
    TAGS,
    decode_properties,
    encode_properties,
)
from rmq_spark.codec.record import Record
from rmq_spark.errors import InvalidArgumentError, PermissionDeniedError
from rmq_spark.names import (
    DLQ_PREFIX,
    RETRY_PREFIX,
    dlq_topic,
    is_broker_topic,
    retry_topic,
)

if TYPE_CHECKING:
    from rmq_spark.broker.delivery.schedule import DelayScheduler
    from rmq_spark.broker.write_path import WritePath
    from rmq_spark.store import AppendResult

#: RocketMQ's first retry level: 3 = 10 s with the default levels
FIRST_RETRY_LEVEL = 3
RETRY_QUEUE_NUMS = 1
DLQ_QUEUE_NUMS = 1


@dataclass(frozen=True)
class SendBackPlan:
    """Where and how the copy of a given-back record is written."""

    topic: str
    dead_lettered: bool
    #: requested level (before the scheduler lowers it to its highest); 0 for the DLQ
    delay_level: int
    reconsume_times: int
    properties: dict[str, str]


def plan_send_back(
    record: Record,
    *,
    group: str,
    record_msg_id: str,
    original_topic: str = "",
    delay_level: int = 0,
    max_reconsume_times: int = 16,
    dead_letter_now: bool = False,
    consumer_reconsume_times: int = 0,
) -> SendBackPlan:
    """Apply RocketMQ's send-back rule to ``record`` (whose offset message id is
    ``record_msg_id``). ``consumer_reconsume_times`` is the count the consumer reports
    (its local retries included); the higher of it and the record's count is used.

    >>> plan = plan_send_back(Record("TopicA", 0, b"x"), group="G", record_msg_id="ID")
    >>> plan.topic, plan.delay_level, plan.reconsume_times, plan.properties["RETRY_TOPIC"]
    ('%RETRY%G', 3, 1, 'TopicA')
    """
    if delay_level < 0:
        raise InvalidArgumentError(f"delay_level {delay_level} must be >= 0 (0 = the broker picks)")
    if max_reconsume_times < 1:
        raise InvalidArgumentError(f"max_reconsume_times {max_reconsume_times} must be >= 1")
    props = decode_properties(record.properties)
    props.pop(DELAY, None)  # the scheduler sets it for a delayed copy
    if not props.get(RETRY_TOPIC):
        props[RETRY_TOPIC] = original_topic or record.topic
    if not props.get(ORIGIN_MESSAGE_ID):
        props[ORIGIN_MESSAGE_ID] = record_msg_id
    if consumer_reconsume_times < 0:
        raise InvalidArgumentError(
            f"reconsume_times {consumer_reconsume_times} must be >= 0 (0 = the record's count)"
        )
    failed_before = max(record.reconsume_times, consumer_reconsume_times)
    reconsume_times = failed_before + 1
    if dead_letter_now or failed_before >= max_reconsume_times:
        return SendBackPlan(dlq_topic(group), True, 0, reconsume_times, props)
    level = delay_level or FIRST_RETRY_LEVEL + failed_before
    return SendBackPlan(retry_topic(group), False, level, reconsume_times, props)


def check_send_back_source(record_topic: str, group: str, original_topic: str) -> None:
    """Refuse a send-back whose stored record is not one ``group`` may give back.

    The access check authorizes ``group`` and a subscription to ``original_topic``; the
    record at the position the consumer names is what gets copied into the group's retry
    or dead-letter topic, where the group reads it. So the record's topic must be the
    group's own retry topic, or ``original_topic`` itself (when one is named), and never a
    topic the broker keeps for itself or a dead-letter queue (a copy would hand their
    records to a consumer). PermissionDeniedError for those; InvalidArgumentError when the
    record belongs to another topic than the one named.

    >>> check_send_back_source("%RETRY%G", "G", "")
    >>> check_send_back_source("TopicA", "G", "TopicA")
    >>> check_send_back_source("Secret", "G", "")
    Traceback (most recent call last):
    ...
    rmq_spark.errors.InvalidArgumentError: the message at that position belongs to topic \
'Secret', not to the group's retry topic '%RETRY%G' (no original_topic was named); send \
back a message this group received, naming the topic it subscribed to
    """
    own_retry = retry_topic(group)
    for topic in dict.fromkeys((record_topic, original_topic)):
        if not topic or topic == own_retry:
            continue
        if is_broker_topic(topic):
            raise PermissionDeniedError(
                f"topic {topic!r} is the broker's own; its messages cannot be sent back"
            )
        if topic.startswith(DLQ_PREFIX):
            raise PermissionDeniedError(
                f"topic {topic!r} is a dead-letter queue; its messages cannot be sent back"
            )
        if topic.startswith(RETRY_PREFIX):
            raise PermissionDeniedError(
                f"topic {topic!r} is another group's retry topic; group {group!r} may send "
                f"back messages of {own_retry!r} only"
            )
    if record_topic == own_retry or (original_topic and record_topic == original_topic):
        return
    if original_topic:
        raise InvalidArgumentError(
            f"the message at that position belongs to topic {record_topic!r}, not to "
            f"original_topic {original_topic!r} or {own_retry!r}; send back "
            "a message this group received from that topic"
        )
    raise InvalidArgumentError(
        f"the message at that position belongs to topic {record_topic!r}, not to the "
        f"group's retry topic {own_retry!r} (no original_topic was named); send back a "
        "message this group received, naming the topic it subscribed to"
    )


def write_send_back(
    writes: WritePath, delays: DelayScheduler, record: Record, plan: SendBackPlan
) -> tuple[AppendResult, int]:
    """Write the copy ``plan`` describes: at once to ``%DLQ%``, or through the delay
    scheduler to ``%RETRY%``; returns the append result and the delay level used."""
    queues = DLQ_QUEUE_NUMS if plan.dead_lettered else RETRY_QUEUE_NUMS
    writes.store.topics.ensure_system_topic(plan.topic, queues)
    level = 0 if plan.dead_lettered else delays.clamp_level(plan.delay_level)
    fields: dict[str, Any] = {
        "born_host": record.born_host,
        "born_timestamps": [record.born_timestamp],
        "flags": [record.flag],
        "reconsume_times": [plan.reconsume_times],
        "sysflag": record.sysflag,
    }
    args = ([record.body], [encode_properties(plan.properties)], [plan.properties.get(TAGS)])
    if plan.dead_lettered:
        return writes.put_own(plan.topic, 0, *args, **fields), level
    return delays.submit(plan.topic, 0, *args, level, **fields), level
