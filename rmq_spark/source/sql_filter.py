"""The option ``sqlFilter``: RocketMQ's SQL92 selector over message properties. Pure.

A read with ``sqlFilter`` yields only the messages the selector picks (``TAGS`` is one of
their properties), on every path: the brokers apply it to pulls (``expression_type``
SQL92 on rocketlite.v1, ``expressionType`` SQL92 over RocketMQ's remoting protocol), and
a task applies it itself where it reads files (short-circuit reads, ``storePath``) or where
a broker does not (an Apache RocketMQ broker without ``enablePropertyFilter``). Offsets
move over the messages it skips as over any other: a batch's or a trigger's range is the
same with or without it.

With a tag filter (``subExpression``) too, the read takes the messages both pick: the
selector sent to brokers is ``TAGS IN (...) AND (sqlFilter)``.

>>> selector_text("region = 'eu'", frozenset({"paid", "new"}))
"TAGS IN ('new', 'paid') AND (region = 'eu'\\n)"
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from rmq_spark.client.remoting.transport import RemotingError
from rmq_spark.errors import FilterNotSupportedError, InvalidArgumentError, RocketliteError
from rmq_spark.filter import SQL92, SelectorError, compile_selector
from rmq_spark.wire.remoting.codes import ResponseCode

__all__ = [
    "SQL92",
    "TAG",
    "checked_sql_filter",
    "quote",
    "refuses_sql92",
    "selector_text",
    "task_only_reason",
]

#: the expression type of tag filters (RocketMQ's ExpressionType.TAG)
TAG = "TAG"

#: a token of the selector at an error's column, to name it
_TOKEN_AT = re.compile(
    r"'(?:[^']|'')*'?|[A-Za-z_$][A-Za-z0-9_$]*|[0-9][0-9A-Za-z_.+-]*|<>|<=|>=|!=|==|\S"
)


def checked_sql_filter(text: str, option: str = "sqlFilter") -> str:
    """``text`` when it is a selector the read can apply; else an error naming ``option``,
    the column and the token there, and why.

    >>> checked_sql_filter("region = 'eu' AND amount > 100")
    "region = 'eu' AND amount > 100"
    >>> checked_sql_filter("region != 'eu'")
    Traceback (most recent call last):
    ...
    rmq_spark.errors.InvalidArgumentError: option sqlFilter is not a valid SQL92 selector: \
at column 8, near '!=': unexpected '!'; RocketMQ's selector writes <> and = \
(the selector: "region != 'eu'")
    """
    try:
        compile_selector(text)
    except SelectorError as exc:
        where = f"at column {exc.column}, near {_near(text, exc.column)}: " if exc.column else ""
        shown = text if len(text) <= 200 else text[:197] + "..."
        raise InvalidArgumentError(
            f"option {option} is not a valid SQL92 selector: {where}{exc.reason} "
            f"(the selector: {shown!r})"
        ) from None
    return text


def _near(text: str, column: int) -> str:
    if column > len(text):
        return "the end of the text"
    match = _TOKEN_AT.match(text, column - 1)
    token = match.group() if match else text[column - 1]
    return repr(token if len(token) <= 40 else token[:37] + "...")


def quote(value: str) -> str:
    """A SQL92 string literal of ``value`` (single quotes, a quote inside doubled)."""
    return "'" + value.replace("'", "''") + "'"


def selector_text(sql_filter: str | None, tags: Iterable[str] | None) -> str | None:
    """The one selector a read applies: ``sql_filter`` (None: no SQL92 filter, return
    None), and the tags of a tag filter as ``TAGS IN (...)`` (None: every tag).

    The selector goes in parentheses on a line of its own end: a ``--`` comment at its end
    would otherwise take the closing parenthesis with it."""
    if sql_filter is None:
        return None
    if tags is None:
        return sql_filter
    listed = ", ".join(quote(tag) for tag in sorted(tags))
    return f"TAGS IN ({listed}) AND ({sql_filter}\n)"


def task_only_reason(selector: str) -> str | None:
    """Why a RocketMQ broker reached through a name server must not be given ``selector``
    (the tasks apply it to whole pulls instead), or None when it may be.

    ``CONTAINS``, ``STARTSWITH`` and ``ENDSWITH`` are RocketMQ 5.1.3's: a 4.x broker ignores
    what follows a complete condition, so it would read ``a CONTAINS 'x'`` as ``a`` and
    deliver nothing. rocketlite's brokers know them, but a name server does not say whose
    brokers it routes to.

    >>> task_only_reason("a = 'x'") is None
    True
    >>> task_only_reason("a = 'x' OR NOT (b CONTAINS 'y')")[:40]
    'it uses CONTAINS, which RocketMQ brokers'
    """
    found = compile_selector(selector).newer_forms
    if not found:
        return None
    kinds = "/".join(sorted(found))
    return (
        f"it uses {kinds}, which RocketMQ brokers before 5.1.3 read as another selector "
        "(one that picks nothing)"
    )


def refuses_sql92(error: RocketliteError) -> bool:
    """Whether a broker's answer to a SQL92 pull says it does not apply SQL92 selectors:
    FilterNotSupportedError (rocketlite.v1, a broker with --no-property-filter), or over
    RocketMQ's remoting protocol SYSTEM_ERROR naming SQL92 (Apache RocketMQ's broker without
    enablePropertyFilter: "The broker does not support consumer to filter message by
    SQL92"; rocketlite's with --no-property-filter), or SUBSCRIPTION_PARSE_FAILED (a broker
    that cannot read a selector rocketlite's parser accepted). Newer remoting clients raise
    FilterNotSupportedError for the first."""
    if isinstance(error, FilterNotSupportedError):
        return True
    if not isinstance(error, RemotingError):
        return False
    if error.code == ResponseCode.SYSTEM_ERROR:
        return "SQL92" in str(error)
    return bool(error.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED)
