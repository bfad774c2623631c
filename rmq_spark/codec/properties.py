"""Message properties: UTF-8 ``name\\x01value\\x02`` repeated (RocketMQ's encoding)."""

from __future__ import annotations

from collections.abc import Mapping

from rmq_spark.errors import InvalidArgumentError, shown

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"
MAX_PROPERTIES_BYTES = 32767

# Well-known property names.
TAGS = "TAGS"
KEYS = "KEYS"
UNIQ_KEY = "UNIQ_KEY"
DELAY = "DELAY"
RETRY_TOPIC = "RETRY_TOPIC"
REAL_TOPIC = "REAL_TOPIC"
REAL_QID = "REAL_QID"
#: RocketMQ 5 timer (delay) messages: the asked delivery time (kept on delivery, so a reader
#: can tell a delay message), and when the timer stored and delivered the message
TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
TIMER_ENQUEUE_MS = "TIMER_ENQUEUE_MS"
TIMER_DEQUEUE_MS = "TIMER_DEQUEUE_MS"
RECONSUME_TIME = "RECONSUME_TIME"
MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
WAIT = "WAIT"

#: names a sender may not put among a message's own properties: they have fields of their
#: own (TAGS, KEYS, UNIQ_KEY) or belong to the broker (delay, retry, redirection)
RESERVED_PROPERTIES = frozenset(
    {
        TAGS,
        KEYS,
        UNIQ_KEY,
        DELAY,
        WAIT,
        RETRY_TOPIC,
        REAL_TOPIC,
        REAL_QID,
        RECONSUME_TIME,
        MAX_RECONSUME_TIMES,
        ORIGIN_MESSAGE_ID,
    }
)


def empty_value_message(properties: Mapping[str, str]) -> str:
    """The error for user properties with an empty value (RocketMQ drops such a property
    when it decodes a message, and its producers refuse it)."""
    names = sorted(name for name, value in properties.items() if value == "")
    return (
        f"property {shown(names[0])} has an empty value; RocketMQ drops properties with "
        "empty values, so give it a value or leave the property out"
    )


def encode_properties(props: Mapping[str, str] | None) -> bytes:
    """Encode a mapping to RocketMQ's property bytes.

    >>> encode_properties({"TAGS": "a", "KEYS": "k1 k2"})
    b'TAGS\\x01a\\x02KEYS\\x01k1 k2\\x02'
    """
    if not props:
        return b""
    parts = []
    for name, value in props.items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise InvalidArgumentError(
                f"property {name!r}={value!r}: names and values must be strings"
            )
        for text in (name, value):
            if NAME_VALUE_SEPARATOR in text or PROPERTY_SEPARATOR in text:
                raise InvalidArgumentError(
                    f"property {name!r}={value!r} contains a \\x01 or \\x02 separator byte; "
                    "remove it"
                )
        if not name:
            raise InvalidArgumentError("property names must not be empty")
        parts.append(f"{name}\x01{value}\x02")
    try:
        data = "".join(parts).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidArgumentError(
            f"properties are not valid Unicode text ({exc.reason} at {exc.start}); "
            "remove lone surrogate characters"
        ) from None
    if len(data) > MAX_PROPERTIES_BYTES:
        raise InvalidArgumentError(
            f"properties take {len(data)} bytes encoded; the limit is {MAX_PROPERTIES_BYTES}"
        )
    return data


def decode_properties(data: bytes | bytearray | memoryview) -> dict[str, str]:
    """Decode RocketMQ's property bytes; tolerant of a missing trailing separator."""
    if not data:
        return {}
    text = bytes(data).decode("utf-8", errors="replace")
    result: dict[str, str] = {}
    for item in text.split(PROPERTY_SEPARATOR):
        if not item:
            continue
        name, sep, value = item.partition(NAME_VALUE_SEPARATOR)
        if sep:
            result[name] = value
    return result
