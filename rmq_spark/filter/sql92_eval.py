"""A parsed SQL92 selector evaluated over a batch of messages at once. Pure, columnar.

Each condition yields three masks over the batch: TRUE, NULL (unknown: a property is
missing) and ERROR (RocketMQ throws: a value its number type cannot read). A message is
selected when the whole selector is TRUE and not an error, as RocketMQ's broker decides.

AND and OR follow RocketMQ's order of evaluation, left to right with a short cut: an
error on the left is the answer; a decided left (FALSE for AND, TRUE for OR) is the
answer even when the right would fail; otherwise the right's error is. NULL is SQL's
unknown, so ``NOT`` of unknown is unknown.

Comparisons (see :mod:`rmq_spark.filter.values` for how a value is read):

* ``=``: both sides missing is TRUE (two missing properties), the left missing is
  unknown, only the right missing is FALSE; ``<>`` is ``NOT (=)``.
* ``> >= < <=``: a missing side is unknown; two properties are both read as doubles.
* ``IN`` and ``NOT IN``: unknown for a missing property.
* ``IS [NOT] NULL``: never unknown; an empty string is not NULL.
* ``[NOT] CONTAINS/STARTSWITH/ENDSWITH``: FALSE for a missing property or an empty text.

No Python object is made per message: property values are Arrow string arrays, read into
numbers by Arrow's kernels, and the masks are numpy arrays.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rmq_spark.filter.sql92_parse import (
    And,
    Between,
    Compare,
    Constant,
    In,
    IsNull,
    Literal,
    Node,
    Not,
    Operand,
    Or,
    Property,
    Substring,
)
from rmq_spark.filter.values import DOUBLE_TEXT, INT_MAX, INT_MIN, WHOLE_TEXT, java_whole

__all__ = ["PropertyValues", "Truth", "evaluate"]


@dataclass
class Truth:
    """A condition's value for each message: TRUE, unknown (``null``) or an ``error``;
    a message in none of the three is FALSE."""

    true: np.ndarray
    null: np.ndarray
    error: np.ndarray

    @classmethod
    def constant(cls, value: bool | None, n: int) -> Truth:
        none = np.zeros(n, bool)
        return cls(np.full(n, value is True), np.full(n, value is None), none)

    @property
    def false(self) -> np.ndarray:
        return ~(self.true | self.null | self.error)

    @property
    def selected(self) -> np.ndarray:
        return self.true

    def negate(self) -> Truth:
        return Truth(self.false, self.null, self.error)


class PropertyValues:
    """The properties of a batch of messages as a selector reads them, each name's value
    column (null where a message lacks it) looked up once and read as numbers once."""

    def __init__(self, count: int, lookup: Callable[[str], pa.Array]) -> None:
        self.count = count
        self._lookup = lookup
        self._strings: dict[str, pa.Array] = {}
        self._numbers: dict[tuple[str, str], tuple[np.ndarray, np.ndarray]] = {}
        self._missing: dict[str, np.ndarray] = {}

    def strings(self, name: str) -> pa.Array:
        if name not in self._strings:
            values = self._lookup(name)
            if len(values) != self.count:
                raise ValueError(f"property {name!r}: {len(values)} values for {self.count}")
            self._strings[name] = values
        return self._strings[name]

    def subset(self, rows: np.ndarray) -> PropertyValues:
        """The same properties for the messages ``rows`` only."""
        taken = pa.array(rows)
        return PropertyValues(len(rows), lambda name: self.strings(name).take(taken))

    def missing(self, operand: Operand) -> np.ndarray:
        if isinstance(operand, Literal):
            return np.zeros(self.count, bool)
        if operand.name not in self._missing:
            strings = self.strings(operand.name)
            self._missing[operand.name] = (
                np.asarray(strings.is_null().to_numpy(zero_copy_only=False), bool)
                if strings.null_count
                else np.zeros(self.count, bool)
            )
        return self._missing[operand.name]

    def numbers(self, name: str, kind: str) -> tuple[np.ndarray, np.ndarray]:
        """The values read as ``kind`` ("int", "long" or "double"): where that worked
        (bool) and the numbers (int64 or float64; arbitrary where it did not)."""
        key = (name, kind)
        if key not in self._numbers:
            self._numbers[key] = _read_numbers(self.strings(name), kind)
        return self._numbers[key]

    def booleans(self, name: str) -> np.ndarray:
        """``Boolean.valueOf`` of each value: "true" in any case."""
        return _mask(pc.equal(pc.utf8_lower(self.strings(name)), "true"))


def evaluate(node: Node, values: PropertyValues) -> Truth:
    """The selector's :class:`Truth` for every message of ``values``."""
    n = values.count
    if isinstance(node, Constant):
        return Truth.constant(node.value, n)
    if isinstance(node, And):
        right = node.right
        return _and(evaluate(node.left, values), lambda some: evaluate(right, some), values)
    if isinstance(node, Or):
        right = node.right
        return _or(evaluate(node.left, values), lambda some: evaluate(right, some), values)
    if isinstance(node, Not):
        return evaluate(node.operand, values).negate()
    if isinstance(node, Compare):
        return _compare(node, values)
    if isinstance(node, Between):  # (v >= low AND v <= high), NOT: (v < low OR v > high)
        low = Compare("<" if node.negated else ">=", node.operand, node.low)
        high = Compare(">" if node.negated else "<=", node.operand, node.high)
        combine = _or if node.negated else _and
        return combine(_compare(low, values), lambda some: _compare(high, some), values)
    none = np.zeros(n, bool)
    if isinstance(node, IsNull):
        missing = values.missing(node.operand)
        return Truth(missing != node.negated, none, none)
    if isinstance(node, In):
        strings = values.strings(node.prop.name)
        present = ~values.missing(node.prop)
        hit = _mask(pc.is_in(strings, value_set=pa.array(node.values, pa.string())))
        return Truth(present & (hit != node.negated), ~present, none)
    if isinstance(node, Substring):
        return _substring(node, values)
    raise TypeError(f"not a selector node: {node!r}")


def _and(left: Truth, right_of: Callable[[PropertyValues], Truth], values: PropertyValues) -> Truth:
    right = _where(left.true | left.null, right_of, values)  # the others are decided
    if right is None:
        return left
    left_false, right_false = left.false, right.false
    error = left.error | (~left_false & right.error)
    false = ~error & (left_false | right_false)
    true = ~error & left.true & right.true
    return Truth(true, ~(error | false | true), error)


def _or(left: Truth, right_of: Callable[[PropertyValues], Truth], values: PropertyValues) -> Truth:
    right = _where(left.false | left.null, right_of, values)  # the others are decided
    if right is None:
        return left
    error = left.error | (~left.true & right.error)
    true = ~error & (left.true | right.true)
    null = ~error & ~true & (left.null | right.null)
    return Truth(true, null, error)


def _where(
    needed: np.ndarray, evaluate_on: Callable[[PropertyValues], Truth], values: PropertyValues
) -> Truth | None:
    """The right side of AND or OR, evaluated only for the messages whose answer it can
    still change (``needed``): FALSE elsewhere; None when it changes none."""
    count = int(np.count_nonzero(needed))
    if not count:
        return None
    if count > values.count // 2:
        return evaluate_on(values)
    rows = np.flatnonzero(needed)
    some = evaluate_on(values.subset(rows))
    none = np.zeros(values.count, bool)
    whole = Truth(none, none.copy(), none.copy())
    whole.true[rows], whole.null[rows], whole.error[rows] = some.true, some.null, some.error
    return whole


def _compare(node: Compare, values: PropertyValues) -> Truth:
    left, right, op = node.left, node.right, node.op
    left_missing, right_missing = values.missing(left), values.missing(right)
    both = ~left_missing & ~right_missing
    if op in ("=", "<>"):
        equal, readable = _equal(left, right, values)
        true = (left_missing & right_missing) | (both & readable & equal)
        error = both & ~readable
        result = Truth(true, left_missing & ~right_missing, error)
        return result if op == "=" else result.negate()
    sign, readable = _order(left, right, values)
    holds = {">": sign > 0, ">=": sign >= 0, "<": sign < 0, "<=": sign <= 0}[op]
    return Truth(both & readable & holds, ~both, both & ~readable)


def _equal(left: Operand, right: Operand, values: PropertyValues) -> tuple[np.ndarray, np.ndarray]:
    """Whether the two sides are equal where both are present, and where they could be
    compared at all."""
    n = values.count
    everywhere = np.ones(n, bool)
    prop, other = (left, right) if isinstance(left, Property) else (right, left)
    assert isinstance(prop, Property)
    if isinstance(other, Property) or isinstance(other.value, str):
        target = values.strings(other.name) if isinstance(other, Property) else other.value
        return _mask(pc.equal(values.strings(prop.name), target)), everywhere
    if isinstance(other.value, bool):  # the parser keeps the boolean on the right
        return values.booleans(prop.name) == other.value, everywhere
    sign, readable = _order(left, right, values)
    return sign == 0, readable


def _order(left: Operand, right: Operand, values: PropertyValues) -> tuple[np.ndarray, np.ndarray]:
    """The sign of ``left - right`` as Java compares them, and where both sides could be
    read as numbers. A property is read by the type of the literal across from it; two
    properties are both read as doubles."""
    if isinstance(left, Property) and isinstance(right, Property):
        ok_l, a = values.numbers(left.name, "double")
        ok_r, b = values.numbers(right.name, "double")
        return _sign(a, b), ok_l & ok_r
    flip = isinstance(left, Literal)
    prop, literal = (right, left) if flip else (left, right)
    assert isinstance(prop, Property) and isinstance(literal, Literal)
    number = literal.value
    assert isinstance(number, int | float) and not isinstance(number, bool)
    kind = "double" if isinstance(number, float) else "long" if literal.is_long else "int"
    readable, read = values.numbers(prop.name, kind)
    sign = _sign(read, np.asarray(number, read.dtype))
    return (-sign if flip else sign), readable


def _sign(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Java's compareTo for doubles (NaN above all, equal to itself), or plain ints."""
    sign = (a > b).astype(np.int8) - (a < b).astype(np.int8)
    if a.dtype.kind == "f":
        nan_a, nan_b = np.isnan(a), np.isnan(b)
        if nan_a.any() or nan_b.any():
            sign = np.where(nan_a | nan_b, nan_a.astype(np.int8) - nan_b, sign).astype(np.int8)
    return sign


def _substring(node: Substring, values: PropertyValues) -> Truth:
    n = values.count
    none = np.zeros(n, bool)
    assert isinstance(node.operand, Property)  # the parser folds literals
    if not node.text:
        return Truth(none, none, none)
    strings = values.strings(node.operand.name)
    test = {
        "CONTAINS": pc.match_substring,
        "STARTSWITH": pc.starts_with,
        "ENDSWITH": pc.ends_with,
    }[node.kind]
    present = ~values.missing(node.operand)
    hit = _mask(test(strings, pattern=node.text))
    return Truth(present & (hit != node.negated), none, none)


def _read_numbers(strings: pa.Array, kind: str) -> tuple[np.ndarray, np.ndarray]:
    n = len(strings)
    pattern, dtype = (DOUBLE_TEXT, np.float64) if kind == "double" else (WHOLE_TEXT, np.int64)
    readable = _mask(pc.match_substring_regex(strings, pattern))
    out = np.zeros(n, dtype)
    at = np.flatnonzero(readable)
    if not len(at):
        return readable, out
    texts = strings.take(pa.array(at))
    if kind == "double":
        texts = pc.replace_substring_regex(texts, r"^[\x00-\x20]+|[fFdD]?[\x00-\x20]*$", "")
        texts = pc.replace_substring(texts, "Infinity", "inf")
        out[at] = pc.cast(texts, pa.float64()).to_numpy(zero_copy_only=False)
        return readable, out
    texts = pc.replace_substring_regex(texts, r"^\+", "")
    fits = _mask(pc.less_equal(pc.utf8_length(texts), 18))  # shorter than any overflow
    out[at[fits]] = pc.cast(texts.filter(pa.array(fits)), pa.int64()).to_numpy()
    for i in np.flatnonzero(~fits):  # 19 digits or more: rare, read one by one
        value = java_whole(texts[int(i)].as_py(), is_long=True)
        ok = value is not None
        readable[at[i]] = ok
        out[at[i]] = value or 0
    if kind == "int":
        readable &= (out >= INT_MIN) & (out <= INT_MAX)
    return readable, out


def _mask(array: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A boolean Arrow result as a numpy mask, null as False."""
    return np.asarray(array.fill_null(False).to_numpy(zero_copy_only=False), dtype=bool)
