"""Checks of request fields shared by the three front-ends.

Each check raises an :mod:`rmq_spark.errors` class naming the field and the bad value; each
front-end's boundary turns it into its protocol's code (:mod:`rmq_spark.broker.core.errors`). Batch
requests check every item before acting and wrap each check in :func:`item` so the message
says which item was bad (``queries[3]: topic 'x' does not exist ...``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from rmq_spark.errors import (
    InvalidArgumentError,
    InvalidNameError,
    NotFoundError,
    RocketliteError,
    shown,
)
from rmq_spark.names import SCHEDULE_TOPIC, SYSTEM_PREFIXES, validate_topic

if TYPE_CHECKING:
    from rmq_spark.broker.core.broker import Broker


@contextmanager
def item(label: str) -> Iterator[None]:
    """Prefix the message of an error raised inside with ``label`` (same error class)."""
    try:
        yield
    except RocketliteError as exc:
        raise type(exc)(f"{label}: {exc}") from None


def non_negative(value: int, field: str) -> int:
    if value < 0:
        raise InvalidArgumentError(f"{field}={value} is negative; it must be >= 0")
    return value


def bounded(value: int, field: str, default: int, cap: int) -> int:
    """A size or count from a request: 0 means ``default``, larger than ``cap`` is lowered."""
    non_negative(value, field)
    return min(value or default, cap)


def at_most(count: int, field: str, limit: int, flag: str) -> None:
    """A list of a request is no longer than the broker's limit for it."""
    if count > limit:
        raise InvalidArgumentError(
            f"{field} has {count:,} items; this broker takes at most {limit:,} per request "
            f"({flag}): split the request"
        )


def is_system_topic(name: str) -> bool:
    """``%RETRY%``/``%DLQ%`` topics and the delay scheduler's topic: the broker's own."""
    return name.startswith(SYSTEM_PREFIXES) or name == SCHEDULE_TOPIC


def sendable_topic(name: str) -> str:
    """A topic producers may send to: a valid name that is not one of the broker's own."""
    topic = validate_topic(name)
    if topic == SCHEDULE_TOPIC:
        raise InvalidNameError(
            f"topic {topic!r} holds the broker's delayed messages; send with delay_level to "
            "another topic instead"
        )
    return topic


def check_broker_name(broker: Broker, name: str) -> None:
    """An empty name means this broker; any other name must be this broker's."""
    if name and name != broker.name:
        raise NotFoundError(
            f"the queue belongs to broker {shown(name)} but this is broker {broker.name!r}; "
            f"send the request to {name!r}'s endpoint (refresh the topic route)"
        )
