"""How RocketMQ's selector reads and compares values, one value at a time. Pure.

A message's property values are strings. Compared with a number, a value is read the way
the number's Java type reads text: ``Integer.valueOf`` for an int literal (``5``),
``Long.valueOf`` for a long one (``5000000000``), ``Double.valueOf`` for a double
(``5.0``). Compared with TRUE or FALSE, it is ``Boolean.valueOf``: "true" in any case, and
every other text is false. A value that its number type cannot read is an error, which
RocketMQ counts as "not matched" for the whole message; the same rule is applied here.

:mod:`rmq_spark.filter.sql92_eval` applies these rules to whole columns; the scalar forms
here serve literals the parser folds and the tests that hold both to one table.
"""

from __future__ import annotations

import math
import re

__all__ = [
    "DOUBLE_TEXT",
    "INT_MAX",
    "INT_MIN",
    "LONG_MAX",
    "LONG_MIN",
    "MAX_WHOLE_DIGITS",
    "WHOLE_TEXT",
    "Value",
    "compare_literals",
    "java_double",
    "java_whole",
    "order",
]

INT_MIN, INT_MAX = -(2**31), 2**31 - 1
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1
Value = str | int | float | bool

#: the texts Integer.valueOf and Long.valueOf read (ASCII digits; Java also takes other
#: Unicode digits, which no producer writes)
WHOLE_TEXT = r"^[+-]?[0-9]+$"
#: the texts Double.valueOf reads (but hexadecimal ones): spaces around, a type suffix
DOUBLE_TEXT = (
    r"^[\x00-\x20]*[+-]?(?:NaN|Infinity|(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
    r"[fFdD]?)[\x00-\x20]*$"
)
#: more digits (leading zeros aside) than any long has: out of range, never read
MAX_WHOLE_DIGITS = 19
_WHOLE = re.compile(WHOLE_TEXT)
_DOUBLE = re.compile(DOUBLE_TEXT)


def java_whole(text: str, is_long: bool) -> int | None:
    """``Integer.valueOf(text)`` (``Long.valueOf`` when ``is_long``), None when it throws.

    >>> java_whole("+10", False), java_whole("10.0", False), java_whole("3000000000", False)
    (10, None, None)
    """
    if not _WHOLE.match(text):
        return None
    digits = text.lstrip("+-").lstrip("0")
    if len(digits) > MAX_WHOLE_DIGITS:  # out of range (and int() refuses 4,300 digits)
        return None
    value = -int(digits or "0") if text.startswith("-") else int(digits or "0")
    low, high = (LONG_MIN, LONG_MAX) if is_long else (INT_MIN, INT_MAX)
    return value if low <= value <= high else None


def java_double(text: str) -> float | None:
    """``Double.valueOf(text)``, None when it throws.

    >>> java_double(" 1e3d "), java_double("abc")
    (1000.0, None)
    """
    if not _DOUBLE.match(text):
        return None
    core = text.strip("".join(map(chr, range(33)))).rstrip("fFdD")
    return float(core.replace("Infinity", "inf"))


def order(left: int | float, right: int | float) -> int:
    """``Double.compareTo``'s order: NaN above everything, equal to itself."""
    if math.isnan(left) or math.isnan(right):
        return (math.isnan(left) > math.isnan(right)) - (math.isnan(left) < math.isnan(right))
    return (left > right) - (left < right)


def compare_literals(op: str, left: Value, right: Value, is_long: bool) -> bool | None:
    """``left op right`` for two present values as RocketMQ compares them; None when
    RocketMQ fails (a text its number type cannot read, or two types it cannot compare).
    ``is_long``: a whole number among them is a long literal.

    >>> compare_literals(">", "10", 5, False), compare_literals("=", "abc", 10, False)
    (True, None)
    """
    if isinstance(left, bool) or isinstance(right, bool):
        if not (isinstance(left, bool) and isinstance(right, bool)) or op not in ("=", "<>"):
            return None
        return (left == right) == (op == "=")
    if isinstance(left, str) and isinstance(right, str):
        if op in ("=", "<>"):
            return (left == right) == (op == "=")
        a, b = java_double(left), java_double(right)
        return None if a is None or b is None else _holds(op, order(a, b))
    a, b = _number(left, right, is_long), _number(right, left, is_long)
    if a is None or b is None:
        return None
    return _holds(op, order(a, b))


def _number(value: Value, other: Value, is_long: bool) -> int | float | None:
    """``value`` as the number it is compared as: a string read by ``other``'s type."""
    if isinstance(value, str):
        return java_double(value) if isinstance(other, float) else java_whole(value, is_long)
    return value


def _holds(op: str, sign: int) -> bool:
    return {
        "=": sign == 0,
        "<>": sign != 0,
        ">": sign > 0,
        ">=": sign >= 0,
        "<": sign < 0,
        "<=": sign <= 0,
    }[op]
