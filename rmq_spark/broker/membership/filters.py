"""Subscription filters: how the broker reads a subscription's expression, for every
front-end, and what a consumer group filters each topic by.

:func:`read_filter` is the one decoder of a subscription (the broker core's
``MessagingCore.read_filter`` calls it with the broker's settings): the length check
(``--max-subscription-chars``), the split between tags and SQL92, the tags' hash codes,
and the SQL92 selector, compiled (:func:`~rmq_spark.filter.compile_selector` keeps the
last ones). What cannot be read raises :class:`FilterExpressionError` (too long, tags not
joined by ``||``, a type other than TAG and SQL92), ``SelectorError`` (a SQL92 selector
that does not compile: where and why) or ``FilterNotSupportedError`` (SQL92 on a broker
started with ``--no-property-filter``); each front-end maps them to its codes with the
core's one table.

A member's heartbeat names, per topic, an expression, its type and a version (RocketMQ's
``subVersion``: when the client subscribed, in milliseconds). The group registry keeps
each member's subscriptions read once (:class:`TopicFilter`), and the filter a group
reads a topic with when a pull does not carry its own subscription is the one of its live
members' subscriptions with the newest version (RocketMQ's consumer filter data; the
members of a group are expected to subscribe alike).

>>> f = read_filter("sql92", "region = 'eu'", max_chars=100)
>>> f.kind, f.tag_codes is None, f.selector.names
('SQL92', True, frozenset({'region'}))
>>> read_filter(None, "TagA||TagB", max_chars=100).expression
'TagA || TagB'
>>> [s.expression for s in newest([Subscribed("t", "a", TAG, 2), Subscribed("t", "b", TAG, 3)])]
['b']
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable
from dataclasses import dataclass

from rmq_spark.codec.subscription import parse_subscription
from rmq_spark.errors import (
    FilterNotSupportedError,
    InvalidArgumentError,
    RocketliteError,
    shown,
)
from rmq_spark.filter import SQL92, TAG, Selector, SelectorError, compile_selector, tags_selector

__all__ = [
    "SQL92",
    "TAG",
    "FilterExpressionError",
    "Subscribed",
    "SubscriptionFilter",
    "SubscriptionTooLongError",
    "TopicFilter",
    "check_selectors",
    "labelled",
    "newest",
    "read_filter",
]


class FilterExpressionError(InvalidArgumentError):
    """A subscription expression the broker cannot read: longer than it takes, tags not
    joined by ``||``, or a type other than TAG and SQL92 (a SQL92 selector that does not
    compile is a ``SelectorError``)."""


class SubscriptionTooLongError(FilterExpressionError):
    """A subscription expression longer than ``--max-subscription-chars``: refused before
    it is read, and never kept."""


@dataclass(frozen=True)
class SubscriptionFilter:
    """A subscription's filter, read once: what a read of its topic selects by."""

    #: "TAG" or "SQL92"
    kind: str
    #: a tag expression normalised (``*``, ``TagA || TagB``), or the SQL92 text as given
    expression: str
    #: the hash codes a read narrows the consume queue by (None: every tag)
    tag_codes: list[int] | None = None
    #: what a read picks by the messages' properties: the SQL92 selector, or with
    #: ``exact_tags`` the tags themselves (None: every message)
    selector: Selector | None = None


def read_filter(
    expression_type: str | None,
    expression: str | None,
    *,
    max_chars: int,
    property_filter: bool = True,
    broker: str = "",
    exact_tags: bool = False,
) -> SubscriptionFilter:
    """The filter of a subscription of ``expression_type`` ("TAG", empty or None for tags;
    "SQL92", any case) with text ``expression``.

    A tag filter is its tags' hash codes, which different tags can share: rocketlite's
    and RocketMQ 4's clients check the tags of what comes back, RocketMQ 5's do not, so
    their front-end asks for ``exact_tags`` (a selector of the tags themselves too)."""
    kind = (expression_type or TAG).upper()
    text = expression or ""
    if len(text) > max_chars:
        raise SubscriptionTooLongError(
            f"subscription expression {shown(text)} is {len(text):,} characters long; this "
            f"broker takes at most {max_chars:,} (--max-subscription-chars)"
        )
    if kind == TAG:
        tags = _tags(text)
        if exact_tags and tags.tag_codes is not None:
            return dataclasses.replace(tags, selector=_exact(tags.expression))
        return tags
    if kind != SQL92:
        raise FilterExpressionError(f"expression type {shown(expression_type)} is not TAG or SQL92")
    if not property_filter:
        raise FilterNotSupportedError(
            f"broker {broker!r} does not filter by SQL92 (started with "
            "--no-property-filter); subscribe by tag, or filter on the client"
        )
    return SubscriptionFilter(SQL92, text, None, compile_selector(text))


@dataclass(frozen=True)
class Subscribed:
    """One subscription a member's heartbeat carries, as its front-end read it."""

    topic: str
    #: the expression as sent
    expression: str
    #: "TAG", "SQL92" or another type a client named
    kind: str = TAG
    #: the client's subVersion; None when its protocol carries none (rocketlite.v1): the
    #: registry then counts the subscription from the heartbeat that first brought it
    version: int | None = None


@dataclass(frozen=True)
class TopicFilter:
    """A member's subscription to one topic, read once (again only when its text or type
    changes): what its group filters the topic by while it is the newest."""

    topic: str
    #: "TAG", "SQL92", or the type a client named that cannot be used
    kind: str
    #: normalised when it was read (see :class:`SubscriptionFilter`), else as sent
    expression: str
    #: when the client subscribed (ms; RocketMQ's subVersion)
    version: int
    tag_codes: list[int] | None = None
    #: the compiled SQL92 selector (None for tags, or when it cannot be used)
    selector: Selector | None = None
    #: why an expression that is not a tag expression cannot be used (a SelectorError, a
    #: FilterNotSupportedError, a FilterExpressionError naming its type); pulls relying
    #: on it are answered with it
    error: RocketliteError | None = None


def newest(subscriptions: Iterable[Subscribed]) -> list[Subscribed]:
    """One subscription per topic, in the order the topics came: the newest version's
    (the first of equal ones, as RocketMQ keeps the older of equal versions)."""
    kept: dict[str, Subscribed] = {}
    for sub in subscriptions:
        old = kept.get(sub.topic)
        if old is None or (sub.version or 0) > (old.version or 0):
            kept[sub.topic] = sub
    return list(kept.values())


def check_selectors(subscriptions: Iterable[Subscribed], limit: int, what: str) -> None:
    """``what`` (a heartbeat, a client's settings) carries at most ``limit`` different
    expressions that are not tag expressions: each is compiled, and one compile of a long
    SQL92 selector takes milliseconds of a worker's time."""
    texts = {(sub.kind.upper(), sub.expression) for sub in subscriptions if not _is_tag(sub)}
    if len(texts) > limit:
        raise InvalidArgumentError(
            f"{len(texts):,} different SQL92 selectors in {what}; this broker compiles at "
            f"most {limit:,} of one request (--max-heartbeat-selectors): subscribe with "
            "fewer selectors"
        )


def labelled(error: RocketliteError, label: str) -> RocketliteError:
    """``error`` with ``label`` before its message, of the same kind for every protocol's
    codes (a SelectorError becomes a FilterExpressionError, which is answered alike)."""
    if isinstance(error, SelectorError):
        return FilterExpressionError(f"{label}: {error}")
    try:
        return type(error)(f"{label}: {error}")
    except TypeError:  # a class built from more than a message
        return FilterExpressionError(f"{label}: {error}")


@functools.lru_cache(maxsize=1024)
def _tags(text: str) -> SubscriptionFilter:
    """A tag expression read (the last ones are kept: the members of a group, and the
    topics of one member, mostly subscribe with the same few)."""
    try:
        parsed = parse_subscription(text)
    except InvalidArgumentError as exc:
        raise FilterExpressionError(str(exc)) from None
    return SubscriptionFilter(TAG, parsed.expression, parsed.tag_codes)


@functools.lru_cache(maxsize=1024)
def _exact(expression: str) -> Selector:
    """The selector of a tag expression's tags themselves."""
    tags = parse_subscription(expression).tags
    assert tags is not None
    return tags_selector(tags)


def _is_tag(sub: Subscribed) -> bool:
    return (sub.kind or TAG).upper() == TAG
