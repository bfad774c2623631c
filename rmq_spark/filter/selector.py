"""A compiled SQL92 selector: parsed once, applied to batches of messages.

:func:`compile_selector` keeps the last compiled selectors, so a subscription given again
in every heartbeat or pull is parsed once. A :class:`Selector` picks messages from their
properties in any of the forms the readers hold them:

* :meth:`Selector.select_map`: a ``map<string, string>`` column (decoded Arrow batches);
* :meth:`Selector.select_raw`: the properties as stored (``name\\x01value\\x02...``), one
  binary value per message (the broker's pull path);
* :meth:`Selector.matches`: one message's properties as a dict (a client's single message).

``TAGS`` is a property like any other, as in RocketMQ.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rmq_spark.codec.arrow_decode.property_map import property_values
from rmq_spark.codec.properties import TAGS
from rmq_spark.filter.sql92_eval import PropertyValues, evaluate
from rmq_spark.filter.sql92_parse import (
    And,
    Between,
    Compare,
    In,
    IsNull,
    Node,
    Not,
    Or,
    Property,
    SelectorError,
    Substring,
    parse,
)

__all__ = ["SQL92", "TAG", "Selector", "compile_selector", "tags_selector"]

#: the expression type RocketMQ's clients and brokers name this filter by
SQL92 = "SQL92"
#: the expression type of tag subscriptions (RocketMQ's ExpressionType.TAG)
TAG = "TAG"


@dataclass(frozen=True)
class Selector:
    """A SQL92 selector ready to run; ``names``: the properties it reads."""

    text: str
    tree: Node = field(repr=False)
    names: frozenset[str]

    def select_map(self, properties: pa.Array) -> np.ndarray:
        """The messages selected, as a mask, from a ``map<string, string>`` column."""
        if isinstance(properties, pa.ChunkedArray):
            properties = properties.combine_chunks()

        def lookup(name: str) -> pa.Array:
            return pc.map_lookup(properties, pa.scalar(name), "last")

        return self._select(len(properties), lookup)

    def select_raw(self, raw_properties: pa.Array) -> np.ndarray:
        """The messages selected, as a mask, from their properties as stored (a binary
        array, offset 0, no nulls)."""
        if not self.names:
            return self._select(len(raw_properties), _no_lookup)
        found = property_values(raw_properties, sorted(self.names))
        return self._select(len(raw_properties), found.__getitem__)

    def matches(self, properties: Mapping[str, str]) -> bool:
        """Whether one message with ``properties`` is selected."""
        mapped = pa.array([list(properties.items())], pa.map_(pa.string(), pa.string()))
        return bool(self.select_map(mapped)[0])

    @property
    def newer_forms(self) -> frozenset[str]:
        """The forms it uses that RocketMQ brokers before 5.1.3 do not know (CONTAINS,
        STARTSWITH, ENDSWITH): a 4.x broker ignores what follows a complete condition, so
        it would read ``a CONTAINS 'x'`` as ``a`` and select nothing."""
        found: set[str] = set()
        stack: list[Node] = [self.tree]
        while stack:
            node = stack.pop()
            if isinstance(node, Substring):
                found.add(node.kind)
            elif isinstance(node, And | Or):
                stack += [node.left, node.right]
            elif isinstance(node, Not):
                stack.append(node.operand)
        return frozenset(found)

    def _select(self, count: int, lookup: object) -> np.ndarray:
        values = PropertyValues(count, lookup)  # type: ignore[arg-type]
        return evaluate(self.tree, values).selected


def _no_lookup(name: str) -> pa.Array:
    raise AssertionError(f"a selector that reads no property looked up {name!r}")


def tags_selector(tags: Iterable[str]) -> Selector:
    """The selector of messages whose TAGS is one of ``tags`` exactly: what a tag filter's
    hash codes only narrow down (different tags can share a code).

    >>> tags_selector(["a", "b"]).matches({"TAGS": "b"})
    True
    """
    names = tuple(sorted(set(tags)))
    text = "TAGS IN (" + ", ".join("'" + t.replace("'", "''") + "'" for t in names) + ")"
    return Selector(text, In(Property(TAGS), names), frozenset({TAGS}))


def compile_selector(text: str) -> Selector:
    """The :class:`Selector` of ``text``; ``SelectorError`` says where and why it is not one.
    The last 1,024 texts are remembered, refused ones too, so a subscription sent again
    in every heartbeat or pull is parsed once.

    >>> compile_selector("region = 'eu' AND TAGS IN ('a', 'b')").names == {"region", "TAGS"}
    True
    """
    compiled = _compiled(text)
    if isinstance(compiled, SelectorError):
        raise compiled.with_traceback(None)
    return compiled


@functools.lru_cache(maxsize=1024)
def _compiled(text: str) -> Selector | SelectorError:
    try:
        tree = parse(text)
    except SelectorError as exc:
        return exc
    return Selector(text, tree, frozenset(_names(tree)))


def _names(node: Node) -> set[str]:
    if isinstance(node, And | Or):
        return _names(node.left) | _names(node.right)
    if isinstance(node, Not):
        return _names(node.operand)
    if isinstance(node, In):
        return {node.prop.name}
    operands: tuple[object, ...] = ()
    if isinstance(node, Compare):
        operands = (node.left, node.right)
    elif isinstance(node, IsNull | Between | Substring):
        operands = (node.operand,)
    return {o.name for o in operands if isinstance(o, Property)}
