"""RocketMQ's SQL92 selector: the grammar and the semantics, table by table.

The rows follow what Apache RocketMQ 4.9.7's own filter (``filter/`` module, its
``ExpressionTest`` and ``ParserTest``) does with string property values: a missing
property is unknown, a value its number type cannot read fails the message, ``=`` is
asymmetric about a missing side. Where RocketMQ parses a text whose meaning is a trap
(trailing tokens, ``NOT a = 'x'``, a bare property), rocketlite refuses it instead.
"""

from __future__ import annotations

import time
import traceback

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rmq_spark.codec.properties import encode_properties
from rmq_spark.filter import SelectorError, compile_selector
from rmq_spark.filter.values import compare_literals, java_double, java_whole

MAP = pa.map_(pa.string(), pa.string())

# (selector, properties, selected?)
SEMANTICS = [
    # upstream ExpressionTest rows
    ("TAGS is not null and TAGS='''''tag'''''", {"TAGS": "''tag''"}, True),
    ("a between up and low", {"a": "3.14"}, None),  # a parse error: bounds are numbers
    ("a > 3.1E10", {"a": "3.1415E10"}, True),
    ("a > 3.14", {"a": "3.1415"}, True),
    ("a > b", {"a": "10", "b": "20"}, False),
    ("a > b", {"a": "20", "b": "10"}, True),
    ("a is null OR a='hello'", {}, True),
    ("a is null OR a='hello'", {"a": "hello"}, True),
    ("a is null OR a='hello'", {"a": "abc"}, False),
    ("a=TRUE OR b=FALSE", {"a": "true", "b": "false"}, True),
    ("a=TRUE OR b=FALSE", {"a": "false", "b": "true"}, False),
    ("a is not null and a='hello'", {"a": "hello"}, True),
    ("a is not null and a='hello'", {}, False),
    ("a=3 and b<>4 And c>5 AND d<=4", {"a": "3", "b": "5", "c": "6", "d": "1"}, True),
    ("a=3 and b<>4 And c>5 AND d<=4", {"a": "4", "b": "5", "c": "6", "d": "1"}, False),
    ("a=3 or b<>4 Or c>5 OR d<=4", {"a": "4", "b": "4", "c": "3", "d": "2"}, True),
    ("a=3 or b<>4 Or c>5 OR d<=4", {"a": "4", "b": "4", "c": "3", "d": "10"}, False),
    ("a in ('3', '4', '5')", {"a": "4"}, True),
    ("a in ('3', '4', '5')", {"a": "8"}, False),
    ("a not in ('3', '4', '5')", {"a": "8"}, True),
    ("a not in ('3', '4', '5')", {"a": "3"}, False),
    ("a between 2 and 10", {"a": "2"}, True),
    ("a between 2 and 10", {"a": "10"}, True),
    ("a between 2 and 10", {"a": "11"}, False),
    ("a not between 2 and 10", {"a": "1"}, True),
    ("a not between 2 and 10", {"a": "3"}, False),
    ("a is null", {"abc": "2"}, True),
    ("a is null", {"a": "2"}, False),
    ("a is not null", {"a": "2"}, True),
    # a missing property: unknown, never selected, NOT of it neither
    ("a = 'x'", {}, False),
    ("a <> 'x'", {}, False),
    ("NOT (a = 'x')", {}, False),
    ("a in ('x', 'y')", {}, False),
    ("a not in ('x', 'y')", {}, False),
    ("a between 1 and 10", {}, False),
    ("a not between 1 and 10", {}, False),
    ("a <> 'x'", {"a": "y"}, True),
    # = is asymmetric: only the right side missing is FALSE, so <> is TRUE
    ("a = b", {"a": "x"}, False),
    ("a <> b", {"a": "x"}, True),
    ("a = b", {}, True),
    ("a = b", {"a": "10", "b": "10.0"}, False),
    ("5 = a", {}, False),
    ("5 <> a", {}, True),
    # the literal's type reads the value
    ("a = 10", {"a": "10"}, True),
    ("a = 10", {"a": "010"}, True),
    ("a = 10", {"a": "+10"}, True),
    ("a = 10", {"a": " 10"}, False),  # Integer.valueOf fails: not selected
    ("a = 10", {"a": "10.0"}, False),
    ("a = 10.0", {"a": "10"}, True),
    ("a <> 5", {"a": "abc"}, False),  # an error, not TRUE
    ("a <> 5", {"a": "5"}, False),
    ("a > 5", {"a": "10"}, True),
    ("a > 5", {"a": "10.5"}, False),
    ("a > 5", {"a": "10000000000"}, False),  # not an int
    ("a > 5000000000", {"a": "10000000000"}, True),  # a long literal reads a long
    ("a > 5.0", {"a": "10.5"}, True),
    ("a > 5.0", {"a": " 1e3d "}, True),
    ("a >= 1", {"a": "1.0"}, False),
    ("a > 9223372036854775807", {"a": "1"}, False),
    ("a < 0.5", {"a": "NaN"}, False),  # NaN is above every number
    ("a > 1e300", {"a": "Infinity"}, True),
    ("a between -10 and -1", {"a": "-5"}, True),
    ("a > -2147483648", {"a": "3000000000"}, True),  # Java: the long 2147483648, negated
    ("a > 2147483647", {"a": "3000000000"}, False),  # an int literal: the value is no int
    ("a > 5", {"a": "1" * 5000}, False),  # no int: not selected (Python's int() refuses it)
    ("a > 5.0", {"a": "1" * 5000}, True),  # Double.valueOf: Infinity
    ("a > 5", {"a": "0" * 5000 + "7"}, True),  # leading zeros are no digits of size
    ("a between 1.5 and 10", {"a": "5"}, True),
    ("a between 1.5 and 10", {"a": "5.5"}, False),  # 10 is an int: "5.5" fails
    ("a > b", {"a": "abc", "b": "9"}, False),
    ("a > b", {"a": "10", "b": "9"}, True),
    # booleans: Boolean.valueOf
    ("a = TRUE", {"a": "true"}, True),
    ("a = TRUE", {"a": "TRUE"}, True),
    ("a = TRUE", {"a": "yes"}, False),
    ("a = FALSE", {"a": "abc"}, True),
    ("a = TRUE", {}, False),
    ("TRUE", {}, True),
    ("FALSE", {"a": "1"}, False),
    ("NULL", {"a": "1"}, False),
    ("1 = 1", {}, True),
    ("'x' IS NULL", {}, False),
    # empty is not NULL
    ("a IS NULL", {"a": ""}, False),
    ("a IS NOT NULL", {"a": ""}, True),
    ("a = ''", {"a": ""}, True),
    # three-valued AND / OR and RocketMQ's order of evaluation
    ("a = 'x' OR b = 'y'", {"b": "n"}, False),
    ("a = 'x' AND b = 'y'", {"b": "y"}, False),
    ("a = 'x' AND b = 'y' OR c = 'z'", {"c": "z"}, True),
    ("a = 10 OR b = 'x'", {"a": "abc", "b": "x"}, False),  # the left fails first
    ("b = 'x' OR a = 10", {"a": "abc", "b": "x"}, True),  # decided before the failure
    ("a = 10 AND b = 'x'", {"a": "9", "b": "x"}, False),
    ("b = 'y' AND a = 10", {"a": "abc", "b": "x"}, False),
    ("NOT (a = 10)", {"a": "abc"}, False),
    ("NOT (a = 10)", {"a": "9"}, True),
    ("NOT (NOT (a = 'x'))", {"a": "x"}, True),
    ("a = 'it''s'", {"a": "it's"}, True),
    ("TAGS = 'tagA'", {"TAGS": "tagA"}, True),
    ("A = 'x'", {"a": "x"}, False),  # names are case-sensitive
    ("a = 'x' and B = 'y'", {"a": "x", "B": "y"}, True),  # keywords are not
    ("$a = 'x' AND _b = 'y'", {"$a": "x", "_b": "y"}, True),
    ("a = 'x' /* c */ and b = 'y' -- the end", {"a": "x", "b": "y"}, True),
    # RocketMQ 5.1.3's substring tests
    ("a contains 'x'", {"a": "axb"}, True),
    ("a startswith 'ax'", {"a": "axb"}, True),
    ("a endswith 'xb'", {"a": "axb"}, True),
    ("a not contains 'x'", {"a": "axb"}, False),
    ("a not contains 'z'", {"a": "axb"}, True),
    ("a contains ''", {"a": "axb"}, False),
    ("a not contains ''", {"a": "axb"}, False),
    ("a not contains 'x'", {}, False),
    ("'axb' contains 'x'", {}, True),
    (
        "a not in ('4','4','5') and b between 3 and 10 and c not contains 'axbc'",
        {"a": "3", "b": "3", "c": "axbdc"},
        True,
    ),
]


@pytest.mark.parametrize(("text", "props", "selected"), SEMANTICS)
def test_selects_as_rocketmq_does(text: str, props: dict[str, str], selected: bool | None) -> None:
    if selected is None:
        with pytest.raises(SelectorError):
            compile_selector(text)
        return
    assert compile_selector(text).matches(props) is selected


def test_a_batch_is_selected_as_its_messages_are_one_by_one() -> None:
    """One evaluation over many messages gives each the answer it gets alone, whatever
    the others hold (missing, unreadable, matching)."""
    for text in {row[0] for row in SEMANTICS if row[2] is not None}:
        selector = compile_selector(text)
        messages = [props for row_text, props, _ in SEMANTICS if row_text == text]
        messages += [{}, {"a": "abc"}, {"a": "7", "b": "7"}, {"TAGS": "x", "c": "z"}]
        column = pa.array([list(m.items()) for m in messages], MAP)
        one_by_one = [selector.matches(m) for m in messages]
        assert selector.select_map(column).tolist() == one_by_one, text


def test_stored_properties_are_read_as_the_map_is() -> None:
    """The broker's pull path reads the properties as stored (name\\x01value\\x02)."""
    messages = [{"a": "1", "TAGS": "x"}, {"a": "20"}, {}, {"b": "2", "a": "30", "KEYS": "k"}]
    raw = pa.array([encode_properties(m) for m in messages], pa.binary())
    selector = compile_selector("a > 5 OR TAGS = 'x'")
    assert selector.select_raw(raw).tolist() == [True, True, False, True]
    assert compile_selector("TRUE").select_raw(raw).tolist() == [True] * 4


# (selector, column of the error, words the reason holds)
REFUSED = [
    ("", 0, "empty"),
    ("a LIKE 'x%'", 3, "'LIKE'"),
    ("a = 1 b = 2", 7, "after a complete condition"),
    ("a = 1)", 6, "')'"),
    ("NOT a = 'x'", 7, "NOT (...)"),
    ("NOT a > 5", 7, "NOT (...)"),
    ("a", 1, "a IS NOT NULL"),
    ("(a)", 1, "alone"),
    ("a != 'x'", 3, "<>"),
    ("a == 'x'", 4, "'='"),
    ('a = "x"', 5, "single quotes"),
    ("a = 'x", 5, "not closed"),
    ("a > 'x'", 5, "compares numbers"),
    ("a between 'a' and 'z'", 11, "numbers"),
    ("a between 10 and 1", 3, "above its high bound"),
    ("a = NULL", 3, "IS NULL"),
    ("a <> NULL", 3, "IS NOT NULL"),
    ("TRUE = a", 6, "a = TRUE"),
    ("'abc' = 10", 7, "cannot be compared"),
    ("TRUE = 1", 6, "boolean"),
    ("a > TRUE", 5, "compares numbers"),
    ("a in (1, 2)", 7, "IN lists strings"),
    ("a in ()", 7, "IN lists strings"),
    ("'x' in ('x')", 1, "property on its left"),
    ("a > 100000000000000000000000", 5, "larger than a long"),
    ("a > " + "9" * 5000, 5, "larger than a long"),
    ("a > 1e400", 5, "larger than a double"),
    ("a > 010", 5, "octal"),
    ("a = 1 and", 10, "the end of the selector"),
    ("a and between 2 and 10", 7, "expected a property"),
    ("-a > 5", 2, "property values are strings"),
    ("a = 'x' AND 5", 13, "a value, not a condition"),
    ("and = 'x'", 1, "expected a property"),
    ("a contains 5", 12, "takes a string"),
    ("(a = 1) = TRUE", 1, "not a condition"),
    ("a = 'x\ud800'", 7, "lone surrogate"),
    ("a in ('\udfff')", 8, "lone surrogate"),
]


@pytest.mark.parametrize(("text", "column", "words"), REFUSED)
def test_a_bad_selector_is_refused_naming_where_and_why(text: str, column: int, words: str) -> None:
    with pytest.raises(SelectorError) as caught:
        compile_selector(text)
    assert caught.value.column == column, str(caught.value)
    assert words in str(caught.value)
    assert str(caught.value).startswith("SQL92 selector ")


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("(" * 5000 + "a = 1" + ")" * 5000, "nests deeper than 64"),
        ("NOT " * 3000 + "(a = 1)", "nests deeper than 64"),
        ("- " * 3000 + "1 = a", "nests deeper than 64"),
        (" AND ".join(["a = 1"] * 3000), "chains more than 256 conditions"),
    ],
)
def test_a_deep_selector_is_refused_not_a_recursion_error(text: str, words: str) -> None:
    with pytest.raises(SelectorError, match=words):
        compile_selector(text)
    deep_enough = " AND ".join(["a = 1"] * 200)
    assert compile_selector(deep_enough).matches({"a": "1"})


def test_a_long_selector_is_refused_and_echoed_in_part() -> None:
    text = "a = '" + "x" * 100_000 + "'"
    with pytest.raises(SelectorError, match="longer than 65536") as caught:
        compile_selector(text)
    assert len(str(caught.value)) < 300


def test_the_names_a_selector_reads() -> None:
    selector = compile_selector("a = 'x' OR (b IS NULL AND NOT (c in ('1'))) OR d between 1 and 2")
    assert selector.names == {"a", "b", "c", "d"}
    assert compile_selector("TRUE").names == frozenset()


def test_compiled_once_per_text() -> None:
    assert compile_selector("a = 'cache'") is compile_selector("a = 'cache'")
    for _ in range(2):  # a refused text is remembered too, and raises the same way
        with pytest.raises(SelectorError, match="column 5") as caught:
            compile_selector("a > 'cache'")
        assert len(traceback.extract_tb(caught.value.__traceback__)) < 5


def test_long_texts_take_linear_time() -> None:
    """Texts that make a backtracking pattern take seconds (16 KB: 18 s before)."""
    started = time.perf_counter()
    for text in ["'" + "1" * 16_000 + "x' = 5.0", "a > " + "1" * 16_000 + ".5x"]:
        with pytest.raises(SelectorError):
            compile_selector(text)
    assert java_double("1" * 16_000 + "x") is None
    column = pa.array([[("a", "1" * 16_000 + "x")]] * 10, MAP)
    assert not compile_selector("a > 5.0").select_map(column).any()
    assert time.perf_counter() - started < 5  # a hang guard: backtracking took 18 s


# -- the column rules against the scalar ones -----------------------------------------------

_texts = st.one_of(
    st.integers(-(2**64), 2**64).map(str),
    st.floats(allow_nan=True).map(repr),
    st.sampled_from(["", " 1", "+7", "010", "1e3", "1.5d", "NaN", "Infinity", "-0", "x", "true"]),
)
_literals = st.one_of(
    st.integers(-(2**63) + 1, 2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
)


@given(value=_texts, literal=_literals, op=st.sampled_from(["=", "<>", ">", ">=", "<", "<="]))
def test_a_column_compares_as_one_value_does(value: str, literal: int | float, op: str) -> None:
    """The vectorised comparison of a property with a number gives, row by row, what
    RocketMQ's one-value rule gives (an error not selected)."""
    text = repr(literal) if isinstance(literal, float) else str(literal)
    if isinstance(literal, float) and "e" not in text and "." not in text:
        return
    try:
        selector = compile_selector(f"a {op} {text}")
    except SelectorError:
        return  # e.g. a literal this grammar does not read (1e-320 rounds below MIN_VALUE)
    is_long = isinstance(literal, int) and not -(2**31) <= literal < 2**31
    expected = compare_literals(op, value, literal, is_long)
    assert selector.matches({"a": value}) is (expected is True)


def test_java_number_reading() -> None:
    assert [java_whole(t, False) for t in ["12", "+12", "-0", "2147483648", "1.0", ""]] == [
        12, 12, 0, None, None, None,
    ]  # fmt: skip
    assert java_whole("2147483648", True) == 2147483648
    assert java_double("\t2.5f ") == 2.5
    assert np.isnan(java_double("NaN") or 0.0)
    assert java_double("0x10") is None
