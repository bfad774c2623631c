"""RocketMQ's naming rule for topics and consumer groups, and what a message key may be."""

from __future__ import annotations

import re

from rmq_spark.errors import InvalidArgumentError, InvalidNameError, ReservedTopicError, shown

_VALID = re.compile(r"^[%|a-zA-Z0-9_-]+$")

MAX_TOPIC_LENGTH = 127
MAX_GROUP_LENGTH = 255
RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"
SYSTEM_PREFIXES = (RETRY_PREFIX, DLQ_PREFIX)
#: where delayed messages wait (RocketMQ's name): queue ``level - 1`` per delay level, and
#: each entry's tag-code slot holds the message's delivery time, not a tag hash
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
#: where RocketMQ 5 timer (delay) messages wait until their delivery time (RocketMQ's name)
TIMER_TOPIC = "rmq_sys_wheel_timer"
#: transactional messages waiting for their producer's commit or rollback (RocketMQ's name)
TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
#: one record per commit, rollback or check of a half message (RocketMQ's name)
TRANS_OP_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
#: half messages discarded after too many unanswered checks (RocketMQ's name)
TRANS_CHECK_MAX_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
#: rows a Spark sink staged, until its batch ends
SINK_HALF_TOPIC = "RMQ_SYS_SINK_HALF_TOPIC"

#: The topics the broker keeps for itself. It acts on what they hold (delivers delayed and
#: timer messages, commits half messages, applies ops), so a record there must be one the
#: broker wrote: no client may send to them, on any protocol. RocketMQ refuses sends to the
#: same topics (its NOT_ALLOWED_SEND_TOPIC_SET) and reserves the ``rmq_sys_`` prefix for
#: the ones it adds, so every name under that prefix is the broker's too. RocketMQ's trace
#: topic (RMQ_SYS_TRACE_TOPIC) is not among them: clients write their traces there.
BROKER_TOPICS = frozenset(
    {
        SCHEDULE_TOPIC,
        TIMER_TOPIC,
        TRANS_HALF_TOPIC,
        TRANS_OP_TOPIC,
        TRANS_CHECK_MAX_TOPIC,
        SINK_HALF_TOPIC,
    }
)
BROKER_TOPIC_PREFIX = "rmq_sys_"


def _check(kind: str, name: object, max_length: int) -> str:
    if not isinstance(name, str) or not name:
        raise InvalidNameError(f"{kind} name must be a non-empty string, got {name!r}")
    if len(name) > max_length:
        raise InvalidNameError(
            f"{kind} name {name[:40]!r}... is {len(name)} characters long; "
            f"the limit is {max_length}"
        )
    if not _VALID.fullmatch(name):
        raise InvalidNameError(
            f"{kind} name {name!r} has characters outside [%|a-zA-Z0-9_-]; "
            "use letters, digits, '_', '-', '|' or '%'"
        )
    return name


def validate_topic(name: object, *, allow_system: bool = False) -> str:
    """Return ``name`` if it is a valid topic name, else raise InvalidNameError.

    Names starting with ``%RETRY%`` or ``%DLQ%`` are reserved for the broker; pass
    ``allow_system=True`` where the broker itself creates them.
    """
    topic = _check("topic", name, MAX_TOPIC_LENGTH)
    if not allow_system and topic.startswith(SYSTEM_PREFIXES):
        raise InvalidNameError(
            f"topic name {topic!r} uses a reserved prefix ({', '.join(SYSTEM_PREFIXES)}); "
            "pick another name"
        )
    return topic


def is_broker_topic(topic: str) -> bool:
    """True for a topic the broker keeps for itself (see BROKER_TOPICS).

    >>> is_broker_topic("RMQ_SYS_TRANS_HALF_TOPIC"), is_broker_topic("rmq_sys_anything")
    (True, True)
    >>> is_broker_topic("RMQ_SYS_TRACE_TOPIC"), is_broker_topic("orders")
    (False, False)
    """
    return topic in BROKER_TOPICS or topic.startswith(BROKER_TOPIC_PREFIX)


def check_sendable(topic: str) -> str:
    """``topic`` if a client may send to it; ReservedTopicError naming it for the
    broker's own topics and dead-letter queues (a retry topic is its group's: the caller
    checks the group)."""
    if is_broker_topic(topic):
        raise ReservedTopicError(
            f"topic {topic!r} is the broker's own (it holds records the broker acts on); "
            "send to a topic of yours"
        )
    if topic.startswith(DLQ_PREFIX):
        raise ReservedTopicError(
            f"topic {topic!r} is a dead-letter queue, the broker's own: only the broker "
            "writes there; send to a topic of yours"
        )
    return topic


def check_manageable(topic: str) -> str:
    """``topic`` if tools may create, change or delete it; InvalidArgumentError naming it
    for the broker's own topics (their records are state the broker acts on), whoever
    asks, as RocketMQ refuses them too."""
    if is_broker_topic(topic):
        raise InvalidArgumentError(
            f"topic {topic!r} is the broker's own: it cannot be created, changed or deleted"
        )
    return topic


def validate_group(name: object) -> str:
    """Return ``name`` if it is a valid consumer/producer group name."""
    return _check("group", name, MAX_GROUP_LENGTH)


_SINK_ID = re.compile(r"[A-Za-z0-9_.:-]{1,127}")


def validate_sink_id(text: object, what: str = "sink id") -> str:
    """A Spark sink's id or one of its transaction ids: 1..127 of ``[A-Za-z0-9_.:-]``."""
    if not isinstance(text, str) or _SINK_ID.fullmatch(text) is None:
        raise InvalidArgumentError(
            f"{what} {text!r} is not valid: use 1..127 characters of letters, digits and _.:-"
        )
    return text


def validate_message_key(key: object) -> str:
    """A key to look messages up by: one of a message's KEYS, or its UNIQ_KEY. KEYS are
    stored space separated, so a key is one word."""
    if not isinstance(key, str) or not key:
        raise InvalidArgumentError(
            f"message key must be a non-empty string (one of a message's KEYS, or its "
            f"UNIQ_KEY), got {key!r}"
        )
    if " " in key:
        raise InvalidArgumentError(
            f"message key {shown(key)} holds a space: KEYS are stored space separated, so "
            "no stored key has one; look up one key at a time"
        )
    return key


def retry_topic(group: str) -> str:
    return RETRY_PREFIX + group


def dlq_topic(group: str) -> str:
    return DLQ_PREFIX + group


#: what RocketMQ 5 producers may send to a topic (its ``message.type`` attribute); MIXED
#: takes every type
MESSAGE_TYPES = ("NORMAL", "FIFO", "DELAY", "TRANSACTION", "MIXED")


def check_message_type(value: object, where: str = "") -> str:
    if value not in MESSAGE_TYPES:
        raise InvalidArgumentError(
            f"message type {value!r}{where} is not one of {', '.join(MESSAGE_TYPES)}"
        )
    return value


def validate_key_query(
    topic: str, key: str, max_count: int, begin_ms: int | None, end_ms: int | None
) -> None:
    """Check a look-up of messages by key (what ``Admin.query_messages`` and
    ``RemotingClient.query_messages`` take); InvalidArgumentError names the bad value."""
    validate_topic(topic, allow_system=True)
    validate_message_key(key)
    if isinstance(max_count, bool) or not isinstance(max_count, int) or max_count < 1:
        raise InvalidArgumentError(f"max_count={max_count!r} must be a whole number >= 1")
    for name, value in (("begin_ms", begin_ms), ("end_ms", end_ms)):
        if value is not None and (not isinstance(value, int) or value < 0):
            raise InvalidArgumentError(f"{name}={value!r} must be epoch milliseconds >= 0")
