"""RocketMQ's SQL92 message selector: the text parsed into a small tree. Pure.

The grammar is RocketMQ's (the JMS selector without LIKE, arithmetic, hex and octal
literals), lowest precedence first::

    or         := and (OR and)*
    and        := equality (AND equality)*
    equality   := comparison ( (= | <>) comparison | IS [NOT] NULL )*
    comparison := unary ( (> | >= | < | <=) unary
                        | [NOT] BETWEEN unary AND unary
                        | [NOT] IN '(' string (, string)* ')'
                        | [NOT] (CONTAINS | STARTSWITH | ENDSWITH) string )*
    unary      := (+ | - | NOT) unary | literal | property | '(' or ')'

Keywords are case-insensitive; property names (``[A-Za-z_$][A-Za-z0-9_$]*``) are not.
Strings are single-quoted, ``''`` standing for one quote. Whole numbers are Java ints when
they fit, else longs; ``1.5``, ``.5``, ``5.`` and ``5e2`` are doubles. ``--`` and ``/* */``
comments are skipped. ``CONTAINS``, ``STARTSWITH`` and ``ENDSWITH`` are RocketMQ 5.1.3's.

Where RocketMQ accepts a text whose meaning is a trap, this parser refuses it with the
reason instead, so a subscription never silently matches nothing:

* tokens after a complete expression (RocketMQ 4.9 drops them: ``a LIKE 'x%'`` reads ``a``);
* ``NOT a = 'x'``: NOT binds tighter than ``=``, so RocketMQ compares ``(NOT a)`` and fails
  on every message; write ``NOT (a = 'x')``;
* a bare property as a condition, or negating a property (property values are strings);
* a boolean literal on the left of a property (RocketMQ fails on every message);
* two literals that cannot be compared.

Errors are :class:`SelectorError`, naming the column and the token.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal as TypingLiteral
from typing import cast

from rmq_spark.errors import InvalidArgumentError, shown
from rmq_spark.filter.values import (
    INT_MAX,
    LONG_MAX,
    MAX_WHOLE_DIGITS,
    Value,
    compare_literals,
)

__all__ = [
    "And",
    "Between",
    "Compare",
    "Constant",
    "In",
    "IsNull",
    "Literal",
    "Node",
    "Not",
    "Operand",
    "Or",
    "Property",
    "SelectorError",
    "Substring",
    "parse",
]

#: the longest selector accepted (RocketMQ bounds a subscription's text the same way)
MAX_SELECTOR_CHARS = 64 * 1024
#: parentheses, NOTs and signs nested in one another, at most
MAX_NESTING = 64
#: conditions chained below one another (a AND b AND c ... is a chain), at most
MAX_DEPTH = 256


class SelectorError(InvalidArgumentError):
    """A SQL92 selector that cannot be used: where and why.

    ``column`` is 1-based (0 when the error is not at one place)."""

    def __init__(self, text: str, column: int, reason: str) -> None:
        where = f" at column {column}" if column else ""
        super().__init__(f"SQL92 selector {shown(text)} is not valid{where}: {reason}")
        self.text = text
        self.column = column
        self.reason = reason


# -- the tree -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Literal:
    """A constant: a string, a Java int (``is_long`` False) or long, a double, a boolean."""

    value: Value
    is_long: bool = False


@dataclass(frozen=True)
class Property:
    name: str


Operand = Literal | Property


@dataclass(frozen=True)
class Compare:
    """``left op right``; ``op`` is one of ``= <> > >= < <=``."""

    op: str
    left: Operand
    right: Operand


@dataclass(frozen=True)
class IsNull:
    operand: Operand
    negated: bool = False


@dataclass(frozen=True)
class Between:
    """``operand [NOT] BETWEEN low AND high``: ``operand >= low AND operand <= high``."""

    operand: Operand
    low: Literal
    high: Literal
    negated: bool = False


@dataclass(frozen=True)
class In:
    prop: Property
    values: tuple[str, ...]
    negated: bool = False


SubstringKind = TypingLiteral["CONTAINS", "STARTSWITH", "ENDSWITH"]


@dataclass(frozen=True)
class Substring:
    """``operand [NOT] CONTAINS|STARTSWITH|ENDSWITH 'text'`` (RocketMQ 5.1.3): FALSE for a
    missing property or an empty text, whichever the form."""

    kind: SubstringKind
    operand: Operand
    text: str
    negated: bool = False


@dataclass(frozen=True)
class Not:
    operand: Node


@dataclass(frozen=True)
class And:
    left: Node
    right: Node


@dataclass(frozen=True)
class Or:
    left: Node
    right: Node


@dataclass(frozen=True)
class Constant:
    """A condition known without looking at a message: TRUE, FALSE or NULL (None)."""

    value: bool | None


Node = Compare | IsNull | Between | In | Substring | Not | And | Or | Constant

# -- tokens -------------------------------------------------------------------------------

KEYWORDS = frozenset(
    {"NOT", "AND", "OR", "BETWEEN", "IN", "IS", "NULL", "TRUE", "FALSE"}
    | {"CONTAINS", "STARTSWITH", "ENDSWITH"}
)
_TOKEN = re.compile(
    r"""
    (?P<space>[ \t\n\r\f]+|--[^\n\r]*(?:\n|\r|$)|/\*.*?\*/)
    | (?P<string>'(?:[^']|'')*')
    | (?P<float>[0-9]+\.[0-9]*(?:[eE][+-]?[0-9]+)?|\.[0-9]+(?:[eE][+-]?[0-9]+)?
                |[0-9]+[eE][+-]?[0-9]+)
    | (?P<int>[0-9]+[lL]?)
    | (?P<word>[A-Za-z_$][A-Za-z0-9_$]*)
    | (?P<op><>|>=|<=|[=<>(),+-])
    """,
    re.VERBOSE | re.DOTALL,
)

TokenKind = TypingLiteral["string", "float", "int", "word", "keyword", "op", "end"]


@dataclass(frozen=True)
class Token:
    kind: TokenKind
    text: str
    column: int  # 1-based

    def describe(self) -> str:
        if self.kind == "end":
            return "the end of the selector"
        text = self.text if len(self.text) <= 40 else self.text[:37] + "..."
        return text if self.kind == "string" else f"'{text}'"


def tokenize(text: str) -> list[Token]:
    """The tokens of ``text``, comments and spaces dropped, ending with an ``end`` token."""
    tokens: list[Token] = []
    pos = 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None:
            hint = ""
            if text.startswith(("!=", "=="), pos):
                hint = "; RocketMQ's selector writes <> and ="
            elif text[pos] == '"':
                hint = "; strings take single quotes"
            elif text[pos] == "'":
                hint = "; the string is not closed"
            raise SelectorError(text, pos + 1, f"unexpected {shown(text[pos])}{hint}")
        kind = match.lastgroup
        assert kind is not None
        if kind != "space":
            value = match.group()
            if kind == "word" and value.upper() in KEYWORDS:
                tokens.append(Token("keyword", value.upper(), pos + 1))
            else:
                tokens.append(Token(kind, value, pos + 1))  # type: ignore[arg-type]
        pos = match.end()
    tokens.append(Token("end", "", len(text) + 1))
    return tokens


# -- the parser ---------------------------------------------------------------------------


def parse(text: str) -> Node:
    """The tree of a selector; :class:`SelectorError` says where and why it is not one.

    >>> parse("a = 'x' AND b > 5")
    And(left=Compare(op='=', left=Property(name='a'), right=Literal(value='x', is_long=False)), \
right=Compare(op='>', left=Property(name='b'), right=Literal(value=5, is_long=False)))
    """
    if not isinstance(text, str):
        raise InvalidArgumentError(f"a SQL92 selector is text, not {type(text).__name__}")
    if len(text) > MAX_SELECTOR_CHARS:
        raise SelectorError(text, 0, f"it is longer than {MAX_SELECTOR_CHARS} characters")
    if not text.strip():
        raise SelectorError(text, 0, "it is empty; select every message with TRUE")
    try:
        text.encode()
    except UnicodeEncodeError as exc:  # no message property can hold it either
        raise SelectorError(
            text, exc.start + 1, f"{text[exc.start]!r} is not a character (a lone surrogate)"
        ) from None
    tree = _Parser(text).selector()
    if _depth(tree) > MAX_DEPTH:
        raise SelectorError(
            text, 0, f"it chains more than {MAX_DEPTH} conditions; list values with IN (...)"
        )
    return tree


def _depth(tree: Node) -> int:
    """How deep the tree goes (counted without recursing: it may be deep)."""
    deepest, stack = 0, [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        if isinstance(node, And | Or):
            stack += [(node.left, depth + 1), (node.right, depth + 1)]
        elif isinstance(node, Not):
            stack.append((node.operand, depth + 1))
    return deepest


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = tokenize(text)
        self.at = 0
        self.nesting = 0

    # -- token helpers

    @property
    def token(self) -> Token:
        return self.tokens[self.at]

    def take(self) -> Token:
        token = self.tokens[self.at]
        self.at += 1
        return token

    def is_keyword(self, *words: str) -> bool:
        return self.token.kind == "keyword" and self.token.text in words

    def is_op(self, *ops: str) -> bool:
        return self.token.kind == "op" and self.token.text in ops

    def fail(self, reason: str, token: Token | None = None) -> SelectorError:
        token = token or self.token
        return SelectorError(self.text, token.column, reason)

    def expect_keyword(self, word: str) -> None:
        if not self.is_keyword(word):
            raise self.fail(f"expected {word}, found {self.token.describe()}")
        self.take()

    def expect_op(self, op: str) -> None:
        if not self.is_op(op):
            raise self.fail(f"expected {op!r}, found {self.token.describe()}")
        self.take()

    # -- the grammar

    def selector(self) -> Node:
        start = self.token
        node = self.or_()
        if self.token.kind != "end":
            raise self.fail(
                f"unexpected {self.token.describe()} after a complete condition "
                "(LIKE and arithmetic are not part of RocketMQ's SQL92)"
            )
        return self.condition(node, start)

    def or_(self) -> Node | Operand:
        start = self.token
        left = self.and_()
        while self.is_keyword("OR"):
            op = self.take()
            right_start = self.token
            right = self.and_()
            left = Or(self.condition(left, start), self.condition(right, right_start, op))
        return left

    def and_(self) -> Node | Operand:
        start = self.token
        left = self.equality()
        while self.is_keyword("AND"):
            op = self.take()
            right_start = self.token
            right = self.equality()
            left = And(self.condition(left, start), self.condition(right, right_start, op))
        return left

    def equality(self) -> Node | Operand:
        start = self.token
        left = self.comparison()
        while True:
            if self.is_op("=", "<>"):
                op = self.take()
                right_start = self.token
                right = self.comparison()
                left = self.compare(op, left, start, right, right_start)
            elif self.is_keyword("IS"):
                op = self.take()
                negated = self.is_keyword("NOT")
                if negated:
                    self.take()
                self.expect_keyword("NULL")
                left = self.null_check(self.operand(left, start, op), negated)
            else:
                return left

    def comparison(self) -> Node | Operand:
        start = self.token
        left = self.unary()
        while True:
            negated = self.is_keyword("NOT") and self.tokens[self.at + 1].text in (
                "BETWEEN", "IN", "CONTAINS", "STARTSWITH", "ENDSWITH",
            )  # fmt: skip
            if negated:
                self.take()
            if self.is_op(">", ">=", "<", "<="):
                op = self.take()
                right_start = self.token
                right = self.unary()
                left = self.compare(op, left, start, right, right_start)
            elif self.is_keyword("BETWEEN"):
                op = self.take()
                operand = self.operand(left, start, op)
                low = self.bound()
                self.expect_keyword("AND")
                high = self.bound()
                left = self.between(operand, low, high, negated, op)
            elif self.is_keyword("IN"):
                op = self.take()
                if not isinstance(left, Property):
                    raise self.fail("IN takes a property on its left", start)
                left = In(left, self.string_list(), negated)
            elif self.is_keyword("CONTAINS", "STARTSWITH", "ENDSWITH"):
                op = self.take()
                operand = self.operand(left, start, op)
                if self.token.kind != "string":
                    raise self.fail(f"{op.text} takes a string, found {self.token.describe()}")
                kind = cast(SubstringKind, op.text)
                found = Substring(kind, operand, _unquote(self.take().text), negated)
                left = _fold_substring(found) if isinstance(operand, Literal) else found
            else:
                return left

    def unary(self) -> Node | Operand:
        token = self.token
        if self.nesting >= MAX_NESTING:
            raise self.fail(f"it nests deeper than {MAX_NESTING} levels")
        self.nesting += 1
        try:
            return self.nested_unary(token)
        finally:
            self.nesting -= 1

    def nested_unary(self, token: Token) -> Node | Operand:
        if self.is_op("+", "-"):
            self.take()
            inner_start = self.token
            inner = self.unary()
            if not isinstance(inner, Literal) or isinstance(inner.value, str | bool):
                raise self.fail(
                    f"{token.text} applies to a number; property values are strings",
                    inner_start,
                )
            return inner if token.text == "+" else _negate(inner, self, inner_start)
        if self.is_keyword("NOT"):
            self.take()
            inner_start = self.token
            inner = self.unary()
            if self.is_op("=", "<>", ">", ">=", "<", "<=") or self.is_keyword(
                "IS", "BETWEEN", "IN", "CONTAINS", "STARTSWITH", "ENDSWITH"
            ):
                raise self.fail(
                    f"NOT binds tighter than {self.token.text}: write NOT (...) around "
                    "the comparison"
                )
            return Not(self.condition(inner, inner_start, token))
        if self.is_op("("):
            self.take()
            inner = self.or_()
            self.expect_op(")")
            return inner
        return self.literal_or_property()

    def literal_or_property(self) -> Operand | Node:
        token = self.take()
        if token.kind == "string":
            return Literal(_unquote(token.text))
        if token.kind == "int":
            return _int_literal(token, self)
        if token.kind == "float":
            return _float_literal(token, self)
        if token.kind == "word":
            return Property(token.text)
        if token.kind == "keyword" and token.text in ("TRUE", "FALSE"):
            return Literal(token.text == "TRUE")
        if token.kind == "keyword" and token.text == "NULL":
            return Constant(None)
        raise self.fail(f"expected a property, a value or '(', found {token.describe()}", token)

    # -- building and checking nodes

    def condition(self, node: Node | Operand, start: Token, near: Token | None = None) -> Node:
        """``node`` where a condition must stand: a bare property or value is refused."""
        if isinstance(node, Literal):
            if isinstance(node.value, bool):
                return Constant(node.value)
            raise self.fail(f"{start.describe()} is a value, not a condition", start)
        if isinstance(node, Property):
            raise self.fail(
                f"property {node.name!r} alone is not a condition (its value is a string): "
                f"compare it, e.g. {node.name} = 'true' or {node.name} IS NOT NULL",
                start,
            )
        return node

    def operand(self, node: Node | Operand, start: Token, op: Token) -> Operand:
        if isinstance(node, Literal | Property):
            return node
        raise self.fail(f"{op.text} compares a property or a value, not a condition", start)

    def bound(self) -> Literal:
        start = self.token
        node = self.unary()
        if not isinstance(node, Literal) or isinstance(node.value, str | bool):
            raise self.fail("BETWEEN's bounds are numbers", start)
        return node

    def string_list(self) -> tuple[str, ...]:
        self.expect_op("(")
        values = []
        while True:
            if self.token.kind != "string":
                raise self.fail(f"IN lists strings, found {self.token.describe()}")
            values.append(_unquote(self.take().text))
            if not self.is_op(","):
                break
            self.take()
        self.expect_op(")")
        return tuple(values)

    def compare(
        self,
        op: Token,
        left: Node | Operand,
        left_start: Token,
        right: Node | Operand,
        right_start: Token,
    ) -> Node:
        if isinstance(left, Constant) or isinstance(right, Constant):
            hint = " IS NULL" if op.text == "=" else " IS NOT NULL"
            raise self.fail(f"NULL cannot be compared; write{hint}", op)
        lhs = self.operand(left, left_start, op)
        rhs = self.operand(right, right_start, op)
        if op.text in ("=", "<>"):
            self.check_equality(lhs, rhs, op)
        else:
            for side, at in ((lhs, left_start), (rhs, right_start)):
                if isinstance(side, Literal) and isinstance(side.value, str | bool):
                    raise self.fail(f"{op.text} compares numbers; {at.describe()} is not one", at)
        node = Compare(op.text, lhs, rhs)
        if isinstance(lhs, Literal) and isinstance(rhs, Literal):
            return Constant(self.fold(node, op))
        return node

    def check_equality(self, lhs: Operand, rhs: Operand, op: Token) -> None:
        if isinstance(lhs, Literal) and isinstance(lhs.value, bool) and isinstance(rhs, Property):
            raise self.fail(
                f"write the property first: {rhs.name} {op.text} {str(lhs.value).upper()}", op
            )
        both = isinstance(lhs, Literal) and isinstance(rhs, Literal)
        if both and isinstance(lhs.value, bool) != isinstance(rhs.value, bool):  # type: ignore[union-attr]
            raise self.fail("a boolean cannot be compared with a value of another type", op)

    def fold(self, node: Compare, op: Token) -> bool:
        lhs, rhs = node.left, node.right
        assert isinstance(lhs, Literal) and isinstance(rhs, Literal)
        result = compare_literals(node.op, lhs.value, rhs.value, rhs.is_long or lhs.is_long)
        if result is None:
            raise self.fail(f"{shown(lhs.value)} and {shown(rhs.value)} cannot be compared", op)
        return result

    def null_check(self, operand: Operand, negated: bool) -> Node:
        if isinstance(operand, Literal):
            return Constant(negated)
        return IsNull(operand, negated)

    def between(
        self, operand: Operand, low: Literal, high: Literal, negated: bool, op: Token
    ) -> Node:
        if low.value > high.value:  # type: ignore[operator]
            raise self.fail(
                f"BETWEEN's low bound {low.value} is above its high bound {high.value}", op
            )
        if isinstance(operand, Literal):
            raise self.fail("BETWEEN takes a property on its left", op)
        return Between(operand, low, high, negated)


def _unquote(token: str) -> str:
    return token[1:-1].replace("''", "'")


def _int_literal(token: Token, parser: _Parser) -> Literal:
    digits = token.text.rstrip("lL")
    if len(digits) > 1 and digits.startswith("0"):
        raise parser.fail(f"{token.describe()}: octal numbers are not supported", token)
    if len(digits) > MAX_WHOLE_DIGITS or int(digits) > LONG_MAX:
        raise parser.fail(f"{token.describe()} is larger than a long ({LONG_MAX})", token)
    value = int(digits)
    return Literal(value, is_long=value > INT_MAX)


def _float_literal(token: Token, parser: _Parser) -> Literal:
    value = float(token.text)
    if value == float("inf"):
        raise parser.fail(f"{token.describe()} is larger than a double", token)
    return Literal(value)


def _negate(literal: Literal, parser: _Parser, at: Token) -> Literal:
    value = literal.value
    assert isinstance(value, int | float) and not isinstance(value, bool)
    if isinstance(value, float):
        return Literal(-value)
    # Java negates the literal after typing it: -2147483648 stays the long 2147483648 was
    return Literal(-value, is_long=literal.is_long)


def _fold_substring(node: Substring) -> Constant:
    """A substring test of a literal, known at once (RocketMQ 5: FALSE for a non-string or
    an empty text, whichever the form)."""
    assert isinstance(node.operand, Literal)
    value = node.operand.value
    if not isinstance(value, str) or not node.text:
        return Constant(False)
    test = {"CONTAINS": str.__contains__, "STARTSWITH": str.startswith, "ENDSWITH": str.endswith}
    return Constant(test[node.kind](value, node.text) != node.negated)
