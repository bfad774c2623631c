"""Spark's filters on properties as the SQL92 selector the brokers get
(rmq_spark.source.sql_pushdown.translate): the text of each, which are exact, and, over
messages with all sorts of property values, that an exact one picks the rows Spark keeps and
any other picks at least those (Spark checks it again)."""

from __future__ import annotations

import math

import pyarrow as pa
import pytest
from pyspark.sql.datasource import (
    EqualNullSafe,
    EqualTo,
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
from rmq_spark.source.schema import property_struct
from rmq_spark.source.sql_pushdown import and_selectors, translate

TYPES = {"region": "string", "amount": "bigint", "small": "int", "price": "double"}
P = "properties"

EXACT, SUPERSET, NONE = "exact", "superset", None

CASES = [
    # (filter, SQL92 condition or None, how it answers)
    (EqualTo((P, "region"), "eu"), "region = 'eu'", EXACT),
    (EqualTo((P, "region"), "it's"), "region = 'it''s'", EXACT),
    (EqualNullSafe((P, "region"), "eu"), "region = 'eu'", EXACT),
    (EqualNullSafe((P, "region"), None), None, NONE),
    (In((P, "region"), ("eu", "us")), "region IN ('eu', 'us')", EXACT),
    (In((P, "region"), ("eu", None)), None, NONE),
    (Not(EqualTo((P, "region"), "eu")), "NOT (region = 'eu')", EXACT),
    (Not(In((P, "region"), ("eu", "us"))), "region NOT IN ('eu', 'us')", EXACT),
    (IsNull((P, "region")), "region IS NULL", EXACT),
    (IsNotNull((P, "region")), "region IS NOT NULL", EXACT),
    (StringStartsWith((P, "region"), "e"), "region STARTSWITH 'e'", EXACT),
    (StringEndsWith((P, "region"), "u"), "region ENDSWITH 'u'", EXACT),
    (StringContains((P, "region"), "u"), "region CONTAINS 'u'", EXACT),
    (StringContains((P, "region"), ""), None, NONE),  # '' is FALSE in SQL92, TRUE in Spark
    (Not(StringStartsWith((P, "region"), "e")), None, NONE),
    (GreaterThan((P, "region"), "m"), None, NONE),  # SQL92 does not order strings
    (EqualTo((P, "amount"), 30), "amount = 30.0", SUPERSET),
    (GreaterThan((P, "amount"), 30), "amount >= 31.0", SUPERSET),
    (GreaterThanOrEqual((P, "amount"), 30), "amount >= 30.0", SUPERSET),
    (LessThan((P, "amount"), -3), "amount <= -3.0", SUPERSET),
    (LessThanOrEqual((P, "amount"), 2**62), "amount <= 4.611686018427388e+18", SUPERSET),
    (GreaterThan((P, "small"), 0), "small >= 1.0", SUPERSET),
    (In((P, "amount"), (1, 2)), "amount = 1.0 OR amount = 2.0", SUPERSET),
    (IsNotNull((P, "amount")), "amount IS NOT NULL", SUPERSET),
    (IsNull((P, "amount")), None, NONE),  # null also for a text that is not a number
    (Not(EqualTo((P, "amount"), 30)), None, NONE),
    (GreaterThan((P, "price"), 9.5), "price >= 9.5", SUPERSET),
    (GreaterThan((P, "price"), 9.0), "price >= 9.0", SUPERSET),  # not 10: a double
    (LessThan((P, "price"), 1e-7), "price <= 1.0e-07", SUPERSET),
    (EqualTo((P, "price"), math.inf), None, NONE),
    (EqualTo((P, "price"), True), None, NONE),
    (EqualTo(("tags",), "paid"), "TAGS = 'paid'", EXACT),
    (Not(EqualTo(("tags",), "paid")), "NOT (TAGS = 'paid')", EXACT),
    (Not(In(("tags",), ("a", "b"))), "TAGS NOT IN ('a', 'b')", EXACT),
    (IsNull(("tags",)), "TAGS IS NULL", EXACT),
    (StringStartsWith(("tags",), "pa"), "TAGS STARTSWITH 'pa'", EXACT),
    (EqualTo(("keys",), "k"), None, NONE),
    (EqualTo((P, "unknown"), "x"), None, NONE),  # not a field of the struct
    (EqualTo((P,), "x"), None, NONE),
    (IsNotNull((P,)), None, NONE),  # what Spark pushes for properties['k'] = 'v' (a map)
    (EqualTo(("queueId",), 3), None, NONE),
]


@pytest.mark.parametrize(("item", "condition", "answers"), CASES)
def test_each_filter(item, condition, answers):
    found = translate([item], property_types=TYPES)
    assert found.conditions == ([] if condition is None else [condition])
    assert found.exact == ([item] if answers == EXACT else [])
    assert found.rest == ([] if answers == EXACT else [item])
    assert found.selector == (None if condition is None else f"({condition})")


def test_a_map_column_pushes_nothing():
    assert translate([EqualTo((P, "region"), "eu")]).selector is None


def test_property_names_sql92_cannot_spell_stay_with_spark():
    types = {"a-b": "string", "and": "string", "Ok_1$": "string"}
    filters = [EqualTo((P, "a-b"), "x"), EqualTo((P, "and"), "x"), EqualTo((P, "Ok_1$"), "x")]
    found = translate(filters, property_types=types)
    assert found.selector == "(Ok_1$ = 'x')"
    assert found.rest == filters[:2]


def test_columns_named_by_the_user_schema():
    columns = {"Props": "properties", "T": "tags"}
    found = translate(
        [EqualTo(("Props", "region"), "eu"), IsNotNull(("T",))], columns, {"region": "string"}
    )
    assert found.selector == "(region = 'eu') AND (TAGS IS NOT NULL)"


def test_and_selectors():
    assert and_selectors(None, "a = 'x'") == "a = 'x'"
    assert and_selectors("b = 'y'", None) == "b = 'y'"
    both = and_selectors("b = 'y' -- c", "a = 'x'")
    assert both == "(b = 'y' -- c\n) AND (a = 'x')"
    assert compile_selector(both).matches({"a": "x", "b": "y"})


# -- the translations against Spark's answers, message by message ------------------------

VALUES = {
    "region": [None, "eu", "us", "", "e", "EU", "it's", "u"],
    "amount": [None, "30", "31", "29", "-3", "+30", "030", " 30", "3e1", "30.0", "abc",
               "4611686018427387904", "9223372036854775808", "-4"],
    "small": [None, "0", "1", "-1", "2147483648", "x"],
    "price": [None, "9.5", "9.0", "10", "1e-8", "0.00000001", ".5", "x", "NaN", "9.50001"],
    "TAGS": [None, "paid", "a", "b", "pa", ""],
}  # fmt: skip


def messages() -> list[dict[str, str]]:
    out = []
    width = max(len(v) for v in VALUES.values())
    for i in range(width * 3):
        props = {}
        for j, (name, values) in enumerate(VALUES.items()):
            value = values[(i + j * (i // width + 1)) % len(values)]
            if value is not None:
                props[name] = value
        out.append(props)
    return out


def spark_value(props: dict[str, str], attribute: tuple[str, ...]):
    """The value Spark sees: tags, or the field of the properties struct."""
    if attribute == ("tags",):
        return props.get("TAGS")
    name = attribute[1]
    mapped = pa.array([list(props.items())], pa.map_(pa.string(), pa.string()))
    return property_struct(mapped, ((name, TYPES[name]),)).to_pylist()[0][name]


def spark_keeps(item, props) -> bool:
    """Whether Spark keeps a row under ``item`` (null is not kept)."""
    if isinstance(item, Not):
        inner = spark_keeps_or_null(item.child, props)
        return inner is not None and not inner
    return spark_keeps_or_null(item, props) is True


def spark_keeps_or_null(item, props):
    value = spark_value(props, item.attribute)
    if isinstance(item, IsNull):
        return value is None
    if isinstance(item, IsNotNull):
        return value is not None
    if isinstance(item, EqualNullSafe):
        return value == item.value
    if value is None:
        return None
    if isinstance(item, In):
        return value in item.value
    test = {
        EqualTo: lambda v, x: v == x,
        GreaterThan: lambda v, x: v > x,
        GreaterThanOrEqual: lambda v, x: v >= x,
        LessThan: lambda v, x: v < x,
        LessThanOrEqual: lambda v, x: v <= x,
        StringStartsWith: lambda v, x: v.startswith(x),
        StringEndsWith: lambda v, x: v.endswith(x),
        StringContains: lambda v, x: x in v,
    }[type(item)]
    return test(value, item.value)


@pytest.mark.parametrize(("item", "answers"), [(c[0], c[2]) for c in CASES if c[2] is not None])
def test_the_broker_picks_what_spark_keeps(item, answers):
    selector = compile_selector(translate([item], property_types=TYPES).selector)
    for props in messages():
        kept, picked = spark_keeps(item, props), selector.matches(props)
        if answers == EXACT:
            assert picked == kept, (props, item)
        else:
            assert picked or not kept, (props, item)  # never drops a row Spark keeps
