"""Spark filters on message properties as a SQL92 selector for the brokers. Pure.

What pyspark hands a Python source (``DataSourceReader.pushFilters``, pyspark 4.3): the
conjuncts of a query's ``WHERE`` that name a column or a struct field, compared with
literals. It never pushes a predicate on a map's key: ``properties['region'] = 'eu'``
(``F.col("properties")["region"]``, ``getItem``, ``element_at``, ``properties.region``
on the map) reaches the source as ``IsNotNull(("properties",))`` alone, and ``IN`` or
``IS NULL`` on a key not at all; nor any ``OR`` (pyspark has no filter class for it).
Property predicates reach a source in two ways, both taken here:

* a ``properties`` column the query declares as a struct of the properties it uses
  (``.schema("... properties struct<region string, amount bigint>")``, see
  :mod:`rmq_spark.source.schema`): Spark pushes filters on its fields,
  ``EqualTo(("properties", "region"), "eu")``;
* the ``tags`` column: ``TAGS`` is a property.

:func:`translate` turns each filter it can into a condition of RocketMQ's SQL92 selector
for the brokers (:mod:`rmq_spark.source.sql_filter`), ANDed:

=====================================  =======================  ==========================
Spark filter on a string field / tags  SQL92                    Spark checks it again?
=====================================  =======================  ==========================
``=`` ``<=>`` (non-null)               ``k = 'v'``              no: the same answer
``IN``                                 ``k IN ('a', 'b')``      no
``<>`` (``Not(EqualTo)``)              ``NOT (k = 'v')``        no
``NOT IN``                             ``k NOT IN (...)``       no
``IS NULL`` / ``IS NOT NULL``          ``k IS [NOT] NULL``      no
``LIKE 'x%'``, ``'%x'``, ``'%x%'``     ``k STARTSWITH 'x'``...  no (not for an empty x)
``< <= > >=``                          none: SQL92 orders numbers only
=====================================  =======================  ==========================

A numeric field (int, bigint, double) is compared as a double on the broker
(``k >= 30.0``): ``=``, ``<``, ``<=``, ``>``, ``>=`` (strict ones widened to include the
bound), ``IN`` (as ``k = a OR k = b``) and ``IS NOT NULL``. The broker then picks a superset
of the rows (it also reads ``1e3`` or `` 7`` as numbers, which the struct holds as null), so
Spark checks those filters again: they are returned to it. Everything else (``NOT`` of a
number, ``IS NULL`` on a number, other columns, a property name SQL92 cannot spell) is left
to Spark alone.

Exact means the broker's answer is Spark's: a missing property is null in Spark and unknown
in SQL92, and neither picks the row; a filtered read applies the selector with RocketMQ's
rules on every path (:mod:`rmq_spark.source.read`), so the rows are those without pushdown.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from pyspark.sql.datasource import (
    EqualNullSafe,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    IsNull,
    LessThan,
    LessThanOrEqual,
    Not,
    StringContains,
    StringEndsWith,
    StringStartsWith,
)

from rmq_spark.filter import compile_selector
from rmq_spark.filter.sql92_parse import KEYWORDS
from rmq_spark.source.sql_filter import quote

__all__ = ["Translated", "and_selectors", "translate"]

_NAME = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")
_SUBSTRING = {
    StringStartsWith: "STARTSWITH",
    StringEndsWith: "ENDSWITH",
    StringContains: "CONTAINS",
}
_WIDENED = {GreaterThan: ">=", GreaterThanOrEqual: ">=", LessThan: "<=", LessThanOrEqual: "<="}


@dataclass
class Translated:
    """The selector the brokers get (None: no filter translated), the filters it answers
    exactly (Spark need not check them), and those Spark still checks."""

    selector: str | None = None
    exact: list[Filter] = field(default_factory=list)
    rest: list[Filter] = field(default_factory=list)
    #: the SQL92 condition of each translated filter, in order
    conditions: list[str] = field(default_factory=list)


def translate(
    filters: Iterable[Filter],
    columns: Mapping[str, str] | None = None,
    property_types: Mapping[str, str] | None = None,
) -> Translated:
    """The selector of the ``filters`` that name ``tags`` or a field of a ``properties``
    struct; see the module doc.

    ``columns`` gives the source column each of the read's column names stands for (None:
    the source's names); ``property_types`` the type name of each field of a ``properties``
    struct (string, int, bigint, double; None or empty: ``properties`` is the map).

    >>> from pyspark.sql.datasource import EqualTo, GreaterThan
    >>> found = translate(
    ...     [EqualTo(("properties", "region"), "eu"), GreaterThan(("properties", "n"), 5),
    ...      EqualTo(("keys",), "k")],
    ...     property_types={"region": "string", "n": "bigint"})
    >>> found.selector
    "(region = 'eu') AND (n >= 6.0)"
    >>> [type(f).__name__ for f in found.exact], [type(f).__name__ for f in found.rest]
    (['EqualTo'], ['GreaterThan', 'EqualTo'])
    """
    out = Translated()
    types = dict(property_types or {})
    for item in filters:
        condition, exact = _condition(item, columns, types)
        if condition is None:
            out.rest.append(item)
            continue
        out.conditions.append(condition)
        (out.exact if exact else out.rest).append(item)
    if out.conditions:
        out.selector = " AND ".join(f"({c})" for c in out.conditions)
        compile_selector(out.selector)  # a translation is always a valid selector
    return out


def and_selectors(first: str | None, second: str | None) -> str | None:
    """Both selectors (either may be None); a ``--`` comment in the first cannot swallow
    the second."""
    if first is None or second is None:
        return second if first is None else first
    return f"({first}\n) AND ({second})"


def _condition(
    item: Filter, columns: Mapping[str, str] | None, types: Mapping[str, str]
) -> tuple[str | None, bool]:
    """(SQL92 condition of ``item``, whether it answers exactly), or (None, False)."""
    negated = isinstance(item, Not)
    inner: Filter = item.child if isinstance(item, Not) else item
    target = _target(getattr(inner, "attribute", ()), columns, types)
    if target is None:
        return None, False
    name, kind = target
    if kind == "string":
        condition = _string_condition(name, inner)
        if condition is None:
            return None, False
        if negated:
            if isinstance(inner, EqualTo):
                return f"NOT ({condition})", True
            if isinstance(inner, In):
                return condition.replace(" IN (", " NOT IN (", 1), True
            return None, False  # NOT of IS NULL or LIKE: Spark writes those its own way
        return condition, True
    if negated:
        return None, False  # a number's NOT: the broker's reading of the text differs
    return _number_condition(name, kind, inner), False


def _target(
    attribute: tuple[str, ...], columns: Mapping[str, str] | None, types: Mapping[str, str]
) -> tuple[str, str] | None:
    """(property name, type name) a filter's column stands for, when SQL92 can name it."""
    column = attribute[0] if attribute else None
    source = column if columns is None or column is None else columns.get(column)
    if len(attribute) == 1 and source == "tags":
        return "TAGS", "string"
    if len(attribute) == 2 and source == "properties" and attribute[1] in types:
        name = attribute[1]
        if _NAME.fullmatch(name) and name.upper() not in KEYWORDS:
            return name, types[name]
    return None


def _string_condition(name: str, item: Filter) -> str | None:
    if isinstance(item, IsNull):
        return f"{name} IS NULL"
    if isinstance(item, IsNotNull):
        return f"{name} IS NOT NULL"
    value = getattr(item, "value", None)
    if isinstance(item, EqualTo | EqualNullSafe) and isinstance(value, str):
        return f"{name} = {quote(value)}"
    if isinstance(item, In):
        values = list(value or ())
        if values and all(isinstance(v, str) for v in values):
            return f"{name} IN ({', '.join(quote(v) for v in values)})"
        return None
    kind = _SUBSTRING.get(type(item))
    if kind is not None and isinstance(value, str) and value:
        return f"{name} {kind} {quote(value)}"  # '' is FALSE in SQL92, TRUE in Spark
    return None


def _number_condition(name: str, kind: str, item: Filter) -> str | None:
    if isinstance(item, IsNotNull):
        return f"{name} IS NOT NULL"
    value = getattr(item, "value", None)
    if isinstance(item, In):
        literals = [_double(v) for v in value or ()]
        if not literals or any(v is None for v in literals):
            return None
        return " OR ".join(f"{name} = {v}" for v in literals)
    literal = _double(value)
    if literal is None:
        return None
    if isinstance(item, EqualTo | EqualNullSafe):
        return f"{name} = {literal}"
    if isinstance(item, GreaterThan) and kind != "double" and isinstance(value, int):
        return f"{name} >= {_double(value + 1)}"  # whole numbers: > n is >= n + 1
    op = _WIDENED.get(type(item))
    return None if op is None else f"{name} {op} {literal}"


def _double(value: object) -> str | None:
    """A SQL92 double literal of a number (the broker reads the text as a double for it,
    whatever digits it has), or None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    if not math.isfinite(number):
        return None
    text = repr(abs(number))
    if "e" in text and "." not in text.split("e")[0]:
        mantissa, exponent = text.split("e")
        text = f"{mantissa}.0e{exponent}"
    return f"-{text}" if number < 0 else text
