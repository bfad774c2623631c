"""Filters a batch read takes over from Spark, and what they narrow. Pure.

Spark hands a batch reader the conjuncts of a query's ``WHERE`` (``pushFilters``). The ones
the brokers answer cheaply are taken:

==================  ==========================  =========================================
column              filters                     effect
==================  ==========================  =========================================
``topic``           ``=``, ``IN``               only those topics are probed and read
``queueId``         ``=``, ``IN``               other queues are skipped
``queueOffset``     ``=``, ``<``, ``<=``,       each queue's range is narrowed
                    ``>``, ``>=``, ``IN``
``storeTimestamp``  ``<``, ``<=``, ``>``,       each range is narrowed by a search by
                    ``>=``, ``=``               timestamp; Spark still checks the rows
``tags``            ``=``, ``IN``               the broker's tag filter (exact: the
                                                reader checks the tag of every row)
==================  ==========================  =========================================

Filters on properties (``tags`` other than ``=`` and ``IN``, the fields of a ``properties``
column declared as a struct) become a SQL92 selector the brokers apply
(:mod:`rmq_spark.source.sql_pushdown`). Everything else (``keys``, ``msgId``, ``OR``, ...)
stays with Spark: there is no index to answer it from without reading every message; pyspark
never pushes ``OR``, nor any predicate on a key of the ``properties`` map. Values of the
wrong type (a string compared with ``queueId``) are left to Spark as well, which then
reports or casts them as it always does. Filters name the read's columns: with a schema
given by the user (``.schema(...)``), those it holds, as it spells them.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from pyspark.sql.datasource import (
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    LessThan,
    LessThanOrEqual,
)

__all__ = ["Pushed", "push_filters"]

_NO_END = 2**63 - 1


@dataclass
class Pushed:
    """What the taken filters allow; None (or the full range) = no restriction."""

    topics: frozenset[str] | None = None
    queue_ids: frozenset[int] | None = None
    #: queue offsets [low, high)
    offsets: tuple[int, int] = (0, _NO_END)
    #: store timestamps in epoch ms, [low, high)
    store_ms: tuple[int, int] = (0, _NO_END)
    tags: frozenset[str] | None = None
    taken: list[Filter] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        """The filters contradict each other: nothing can match."""
        return (
            self.offsets[0] >= self.offsets[1]
            or self.store_ms[0] >= self.store_ms[1]
            or any(s is not None and not s for s in (self.topics, self.queue_ids, self.tags))
        )

    @property
    def narrows_time(self) -> bool:
        return self.store_ms != (0, _NO_END)


def push_filters(
    filters: Iterable[Filter], columns: Mapping[str, str] | None = None
) -> tuple[Pushed, list[Filter]]:
    """Take what :class:`Pushed` can hold; return it and the filters Spark must still apply.

    ``columns`` gives the source column each of the read's column names stands for, when
    the user named them (filters on other names are left to Spark).

    >>> pushed, rest = push_filters([EqualTo(("queueId",), 3), EqualTo(("keys",), "k")])
    >>> pushed.queue_ids, rest
    (frozenset({3}), [EqualTo(attribute=('keys',), value='k')])
    """
    pushed = Pushed()
    rest: list[Filter] = []
    for item in filters:
        if _take(pushed, item, columns):
            pushed.taken.append(item)
        else:
            rest.append(item)
    return pushed, rest


def _take(pushed: Pushed, item: Filter, columns: Mapping[str, str] | None) -> bool:
    column: tuple[str, ...] = getattr(item, "attribute", ())
    if len(column) != 1:
        return False
    name = column[0] if columns is None else columns.get(column[0])
    if name in ("topic", "tags"):
        values = _values(item, str)
        if values is None:
            return False
        if name == "topic":
            pushed.topics = _meet(pushed.topics, values)
        else:
            pushed.tags = _meet(pushed.tags, values)
        return True
    if name == "queueId":
        values = _values(item, int)
        if values is None:
            return False
        pushed.queue_ids = _meet(pushed.queue_ids, values)
        return True
    if name == "queueOffset":
        bounds = _bounds(item, _whole)
        if bounds is None:
            return False
        pushed.offsets = _narrow(pushed.offsets, bounds)
        return True
    if name == "storeTimestamp":
        bounds = _bounds(item, _epoch_ms)
        if bounds is None:
            return False
        # One millisecond wider each way: literals may carry microseconds, stored times
        # do not. Spark still checks each row's timestamp.
        pushed.store_ms = _narrow(pushed.store_ms, (max(0, bounds[0] - 1), bounds[1] + 1))
        return False
    return False


def _values(item: Filter, kind: type) -> frozenset | None:
    if isinstance(item, EqualTo):
        candidates: tuple = (item.value,)
    elif isinstance(item, In):
        candidates = tuple(item.value)
    else:
        return None
    if not all(isinstance(v, kind) and not isinstance(v, bool) for v in candidates):
        return None
    return frozenset(candidates)


def _bounds(item: Filter, convert: Callable[[object], int | None]) -> tuple[int, int] | None:
    """[low, high) of integers that ``item`` allows (``convert`` gives an int or None)."""
    if isinstance(item, In):
        converted = [convert(v) for v in item.value]
        values = [v for v in converted if v is not None]
        if not values or len(values) != len(converted):
            return None
        return min(values), max(values) + 1  # Spark keeps the exact IN; this is its hull
    value = convert(getattr(item, "value", None))
    if value is None:
        return None
    if isinstance(item, EqualTo):
        return value, value + 1
    if isinstance(item, GreaterThan):
        return value + 1, _NO_END
    if isinstance(item, GreaterThanOrEqual):
        return value, _NO_END
    if isinstance(item, LessThan):
        return 0, value
    if isinstance(item, LessThanOrEqual):
        return 0, value + 1
    return None


def _whole(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _epoch_ms(value: object) -> int | None:
    """A timestamp literal as epoch milliseconds (naive values are UTC, as Spark sends a
    TIMESTAMP_NTZ); sub-millisecond parts round down, which only widens a lower bound."""
    if not isinstance(value, dt.datetime):
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    micros = (value - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(microseconds=1)
    return micros // 1000


def _meet(current: frozenset | None, values: frozenset) -> frozenset:
    return values if current is None else current & values


def _narrow(current: tuple[int, int], bounds: tuple[int, int]) -> tuple[int, int]:
    return max(current[0], bounds[0]), min(current[1], bounds[1])
