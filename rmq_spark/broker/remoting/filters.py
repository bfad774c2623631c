"""What a consumer group filters a topic by over remoting, and the answers about it. Pure.

RocketMQ's push consumer pulls without its subscription (no PULL_SUBSCRIPTION flag): the
broker filters by what the group's heartbeats carried. Each subscription of a heartbeat
names its expression type (``TAG`` or ``SQL92``) and a version (``subVersion``: when the
client subscribed, in milliseconds). As with RocketMQ's consumer filter data, the newest
version a group gave for a topic is the group's (:func:`updated`), so the members of a group
are expected to subscribe alike; a SQL92 expression is compiled once, when a newer version
brings a new text, and an expression that cannot be compiled is kept with the reason, which
the group's pulls then answer with (:func:`heartbeat_selector`).

Compile failures become RocketMQ's answers in one place (:func:`refusal`): a malformed
expression SUBSCRIPTION_PARSE_FAILED (23) naming the column and why, SQL92 on a broker
started with ``--no-property-filter`` SYSTEM_ERROR (1) with RocketMQ's remark.

>>> sub = Subscribed("orders", "region = 'eu'", "SQL92", 5)
>>> updated(None, sub, lambda kind, text: None).version
5
>>> updated(GroupFilter("SQL92", "region = 'eu'", 7), sub, lambda kind, text: None) is None
True
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from rmq_spark.broker.remoting.answers import Refusal
from rmq_spark.errors import FilterNotSupportedError, RocketliteError
from rmq_spark.filter import Selector
from rmq_spark.wire.remoting.codes import FILTER_NOT_SUPPORTED, ResponseCode

#: the expression type of tag subscriptions (RocketMQ's ExpressionType.TAG)
TAG = "TAG"

#: compiles an expression of a type: None for tags, a Selector for SQL92; raises the
#: rocketlite error that says why it cannot (MessagingCore.selector)
Compile = Callable[[str, str], Selector | None]


@dataclass(frozen=True)
class Subscribed:
    """One subscription a heartbeat carries."""

    topic: str
    #: a tag expression normalised (``*``, ``a || b``), or the SQL92 text as sent
    expression: str
    #: "TAG", "SQL92" or another type a client named (refused when pulled with)
    kind: str
    #: the client's subVersion (0 when it sent none)
    version: int


@dataclass(frozen=True)
class GroupFilter:
    """The filter a group's heartbeats gave for one topic: the newest version's."""

    kind: str
    expression: str
    version: int
    #: the compiled SQL92 selector (None for tags, or when it failed)
    selector: Selector | None = None
    #: why a non-tag expression cannot be used (a SelectorError, FilterNotSupportedError)
    error: RocketliteError | None = None


def updated(old: GroupFilter | None, sub: Subscribed, compile: Compile) -> GroupFilter | None:
    """The group's filter once a heartbeat carried ``sub``; None when nothing changes.

    An older or equal version changes nothing (another member subscribed later); a newer
    one with the same expression only moves the version; a newer expression is compiled
    with ``compile`` and kept with the error it raised, if any."""
    if old is not None and sub.version <= old.version:
        return None
    if old is not None and (old.kind, old.expression) == (sub.kind, sub.expression):
        return dataclasses.replace(old, version=sub.version)
    if sub.kind == TAG:
        return GroupFilter(TAG, sub.expression, sub.version)
    try:
        selector = compile(sub.kind, sub.expression)
    except RocketliteError as exc:
        return GroupFilter(sub.kind, sub.expression, sub.version, error=exc)
    return GroupFilter(sub.kind, sub.expression, sub.version, selector)


def heartbeat_selector(
    found: GroupFilter, pull_version: int, group: str, topic: str
) -> Selector | None:
    """The selector a pull without its subscription reads with (None: the group filters
    by tag), given the group's filter and the version the pull names; otherwise the
    :class:`Refusal` RocketMQ answers: SYSTEM_ERROR (1) when the broker does not filter by
    that type, FILTER_DATA_NOT_EXIST (27) when the expression could not be compiled,
    FILTER_DATA_NOT_LATEST (28) when the pull names a newer subscription than the heartbeats
    gave (the client subscribed again and has not heartbeated since)."""
    if found.kind == TAG:
        return None
    where = f"the {found.kind} filter of group {group!r} on topic {topic!r}"
    if isinstance(found.error, FilterNotSupportedError):
        raise refusal(found.kind, found.error)
    if found.error is not None or found.selector is None:
        raise Refusal(
            ResponseCode.FILTER_DATA_NOT_EXIST,
            f"{where} does not exist: its heartbeat's expression could not be compiled "
            f"({found.error}); subscribe with a valid expression",
        )
    if found.version < pull_version:
        raise Refusal(
            ResponseCode.FILTER_DATA_NOT_LATEST,
            f"{where} is version {found.version}, older than the pull's subscription "
            f"(version {pull_version}); the next heartbeat brings it",
        )
    return found.selector


def refusal(kind: str, error: RocketliteError) -> Refusal:
    """RocketMQ's answer when an expression of ``kind`` cannot be compiled: SYSTEM_ERROR (1)
    with RocketMQ's remark when the broker does not filter by it, else
    SUBSCRIPTION_PARSE_FAILED (23) saying where and why."""
    if isinstance(error, FilterNotSupportedError):
        return Refusal(ResponseCode.SYSTEM_ERROR, f"{FILTER_NOT_SUPPORTED}{kind}: {error}")
    return Refusal(ResponseCode.SUBSCRIPTION_PARSE_FAILED, str(error))
