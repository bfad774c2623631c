"""What a consumer group filters a topic by, decided in the broker core for every front-end
(``broker/membership/filters.py`` and the group registry): the one decoder of a
subscription, the newest subscription of the live members, each text read once, and
nothing kept once a member or the whole group is gone."""

from __future__ import annotations

import doctest
import functools
import re

import pytest

from rmq_spark.broker.membership import filters
from rmq_spark.broker.membership.filters import (
    FilterExpressionError,
    Subscribed,
    SubscriptionTooLongError,
    check_selectors,
    newest,
    read_filter,
)
from rmq_spark.broker.membership.groups import ConsumerRegistry
from rmq_spark.codec.taghash import tag_hash_code
from rmq_spark.errors import FilterNotSupportedError, InvalidArgumentError
from rmq_spark.filter import SQL92, TAG, SelectorError
from tests.support.membership_fakes import FakeClock

read = functools.partial(read_filter, max_chars=64)


# -- the one decoder ----------------------------------------------------------------------


def test_tags_are_hash_codes_normalised_and_exact_only_when_asked():
    tags = read("", "TagA ||TagB")
    assert (tags.kind, tags.expression, tags.selector) == (TAG, "TagA || TagB", None)
    assert tags.tag_codes == sorted({tag_hash_code("TagA"), tag_hash_code("TagB")})
    exact = read("tag", "Aa", exact_tags=True)  # 'Aa' and 'BB' share a hash code
    assert exact.selector is not None and exact.selector.matches({"TAGS": "Aa"})
    assert not exact.selector.matches({"TAGS": "BB"})
    everything = read(None, "*", exact_tags=True)
    assert (everything.tag_codes, everything.selector) == (None, None)


def test_sql92_is_compiled_and_never_read_as_tags():
    found = read("sql92", "region = 'eu' OR TAGS = 'a'")
    assert (found.kind, found.tag_codes) == (SQL92, None)
    assert found.selector is not None and found.selector.names == {"region", "TAGS"}


def test_what_cannot_be_read_says_why():
    with pytest.raises(SubscriptionTooLongError, match="--max-subscription-chars"):
        read("SQL92", "a = '" + "x" * 100 + "'")
    with pytest.raises(FilterExpressionError, match=re.escape("joined by '||'")):
        read("TAG", "a ||")
    with pytest.raises(FilterExpressionError, match="not TAG or SQL92"):
        read("CLASS", "x")
    with pytest.raises(SelectorError, match="column 5"):
        read("SQL92", "a = ")
    with pytest.raises(FilterNotSupportedError, match="--no-property-filter"):
        read_filter("SQL92", "a = 1", max_chars=64, property_filter=False, broker="b")


def test_a_heartbeat_keeps_the_newest_subscription_of_each_topic():
    subs = [
        Subscribed("t", "a = 1", SQL92, 5),
        Subscribed("u", "*", TAG, 0),
        Subscribed("t", "a = 2", SQL92, 7),
        Subscribed("t", "a = 3", SQL92, 7),  # equal: the first stays
        Subscribed("t", "a = 4", SQL92, 6),
    ]
    assert [(s.topic, s.expression) for s in newest(subs)] == [("t", "a = 2"), ("u", "*")]


def test_a_request_brings_a_bounded_number_of_selectors():
    subs = [Subscribed(f"t{i}", f"a = {i % 3}", SQL92) for i in range(10)]
    check_selectors([*subs, Subscribed("x", "TagA")], 3, "a heartbeat")  # 3 texts: fine
    more = [*subs, Subscribed("y", "a = 9", "sql92")]
    with pytest.raises(InvalidArgumentError, match=r"^4 different SQL92 .*--max-heartbeat-selec"):
        check_selectors(more, 3, "a heartbeat")


# -- the group's filter, from its live members ------------------------------------------------


class Counting:
    """The decoder, counting what it reads."""

    def __init__(self, **settings) -> None:
        self.texts: list[str] = []
        self.settings = {"max_chars": 1000, **settings}

    def __call__(self, kind: str, text: str):
        self.texts.append(text)
        return read_filter(kind, text, **self.settings)


@pytest.fixture
def reads() -> Counting:
    return Counting()


@pytest.fixture
def registry(reads: Counting):
    registry = ConsumerRegistry(
        60_000, clock=FakeClock(), sweep_interval_ms=0, read_filter=reads, max_selectors=4
    )
    yield registry
    registry.close()


def join(registry: ConsumerRegistry, client_id: str, *subs: Subscribed, keep=True) -> None:
    read = registry.read_subscriptions(client_id, [("g", subs)], keep_errors=keep)
    registry.heartbeat(client_id, "g", read["g"])


def test_the_newest_live_subscription_filters_and_each_text_is_read_once(registry, reads):
    join(registry, "c1", Subscribed("orders", "a = 'x'", SQL92, 10))
    join(registry, "c2", Subscribed("orders", "b = 'y'", SQL92, 9))  # older: not the group's
    found = registry.group_filter("g", "orders")
    assert found is not None and (found.expression, found.version) == ("a = 'x'", 10)
    for _ in range(3):  # the same heartbeats again: nothing read again, nothing changes
        join(registry, "c1", Subscribed("orders", "a = 'x'", SQL92, 10))
        join(registry, "c2", Subscribed("orders", "b = 'y'", SQL92, 9))
    assert registry.group_filter("g", "orders") is found
    assert reads.texts == ["a = 'x'", "b = 'y'"]
    join(registry, "c2", Subscribed("orders", "c = 'z'", SQL92, 11))  # newer: the group's
    assert registry.group_filter("g", "orders").expression == "c = 'z'"
    assert registry.group_filter("g", "other") is None


def test_a_departed_members_filter_goes_with_it(registry):
    """The SQL92 member leaves: the remaining member's tag subscription filters the
    topic, though its version is lower (RocketMQ decides from live members)."""
    join(registry, "sql", Subscribed("orders", "a = 'x'", SQL92, 50))
    join(registry, "tags", Subscribed("orders", "*", TAG, 10))
    assert registry.group_filter("g", "orders").kind == SQL92
    registry.unregister("sql", "g")
    found = registry.group_filter("g", "orders")
    assert found is not None and (found.kind, found.tag_codes) == (TAG, None)
    info = registry.consumer_info("g", "tags")
    assert info is not None and info.expression_type("orders") == TAG
    registry.unregister("tags", "g")  # the last member: the group filters by nothing
    assert registry.group_filter("g", "orders") is None
    join(registry, "late", Subscribed("orders", "TagA", TAG, 1))  # an older version, alone
    assert registry.group_filter("g", "orders").expression == "TagA"


def test_a_subscription_without_a_version_counts_from_the_heartbeat_that_brought_it(registry):
    join(registry, "java", Subscribed("orders", "a = 1", SQL92, 1_000))  # long ago
    join(registry, "v1", Subscribed("orders", "a = 2", SQL92))  # rocketlite.v1: no version
    found = registry.group_filter("g", "orders")
    assert found is not None and found.expression == "a = 2" and found.version > 1_000
    join(registry, "v1", Subscribed("orders", "a = 2", SQL92))
    assert registry.group_filter("g", "orders").version == found.version  # unchanged


def test_what_cannot_be_used_is_kept_with_why_or_refused(registry, reads):
    join(registry, "c1", Subscribed("orders", "a = ", SQL92, 3), Subscribed("x", "*"))
    bad = registry.group_filter("g", "orders")
    assert bad is not None and isinstance(bad.error, SelectorError) and bad.selector is None
    join(registry, "c1", Subscribed("orders", "a = ", SQL92, 3), Subscribed("x", "*"))
    assert reads.texts.count("a = ") == 1  # kept, not read again
    with pytest.raises(InvalidArgumentError, match=r"'orders': SQL92 selector .* column 5"):
        join(registry, "c2", Subscribed("orders", "a = ", SQL92, 3), keep=False)
    assert registry.members("g") == ["c1"]
    for refused, why in (("a ||", "joined by '||'"), ("x" * 1001, "--max-subscription-chars")):
        kind = TAG if refused == "a ||" else SQL92
        with pytest.raises(FilterExpressionError, match=re.escape(why)):  # never kept
            join(registry, "c3", Subscribed("orders", refused, kind, 9))


def test_one_heartbeat_compiles_a_bounded_number_of_selectors(registry, reads):
    rising = [Subscribed("orders", f"a = {i}", SQL92, i) for i in range(600)]
    join(registry, "c1", *rising)  # one topic: only the newest is read
    assert reads.texts == ["a = 599"]
    many = [Subscribed(f"t{i}", f"a = {i}", SQL92, 1) for i in range(5)]
    with pytest.raises(InvalidArgumentError, match="--max-heartbeat-selectors"):
        join(registry, "c1", *many)
    assert reads.texts == ["a = 599"]  # refused before anything was compiled


def test_without_property_filters_a_sql92_subscription_is_kept_refused():
    registry = ConsumerRegistry(
        60_000,
        sweep_interval_ms=0,
        read_filter=Counting(property_filter=False, broker="b"),
    )
    join(registry, "c1", Subscribed("orders", "a = 1", SQL92, 1))
    found = registry.group_filter("g", "orders")
    assert found is not None and isinstance(found.error, FilterNotSupportedError)
    registry.close()


def test_doctests():
    assert doctest.testmod(filters).failed == 0
