"""Message properties: UTF-8 ``name\\x01value\\x02`` repeated, at most 32767 bytes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rmq_spark.codec.properties import (
    MAX_PROPERTIES_BYTES,
    decode_properties,
    encode_properties,
)
from rmq_spark.errors import InvalidArgumentError

# Text without the two separators and without lone surrogates (not encodable as UTF-8).
CHARS = st.characters(blacklist_categories=("Cs",), blacklist_characters="\x01\x02")
NAMES = st.text(CHARS, min_size=1, max_size=12)
VALUES = st.text(CHARS, max_size=40)


def test_exact_bytes() -> None:
    data = encode_properties({"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "é"})
    assert data == (
        b"TAGS" + b"\x01" + b"TagA" + b"\x02"
        b"KEYS" + b"\x01" + b"k1 k2" + b"\x02"
        b"UNIQ_KEY" + b"\x01" + b"\xc3\xa9" + b"\x02"  # "é" in UTF-8
    )


def test_empty_value_is_kept() -> None:
    assert encode_properties({"WAIT": ""}) == b"WAIT\x01\x02"
    assert decode_properties(b"WAIT\x01\x02") == {"WAIT": ""}


@pytest.mark.parametrize("empty", [None, {}])
def test_no_properties_encode_to_nothing(empty) -> None:
    assert encode_properties(empty) == b""
    assert decode_properties(b"") == {}


def test_decode_literal() -> None:
    assert decode_properties(b"TAGS\x01TagA\x02KEYS\x01k1 k2\x02DELAY\x013\x02") == {
        "TAGS": "TagA",
        "KEYS": "k1 k2",
        "DELAY": "3",
    }


def test_decode_accepts_bytearray_and_memoryview() -> None:
    data = b"TAGS\x01TagA\x02"
    assert decode_properties(bytearray(data)) == {"TAGS": "TagA"}
    assert decode_properties(memoryview(b"xx" + data)[2:]) == {"TAGS": "TagA"}


def test_decode_tolerates_a_missing_trailing_separator() -> None:
    assert decode_properties(b"TAGS\x01TagA\x02KEYS\x01k1") == {"TAGS": "TagA", "KEYS": "k1"}
    assert decode_properties(b"TAGS\x01TagA") == {"TAGS": "TagA"}


def test_round_trip_keeps_order() -> None:
    props = {"UNIQ_KEY": "AC1100", "TAGS": "日本語", "KEYS": "a b c", "RECONSUME_TIME": "2"}
    decoded = decode_properties(encode_properties(props))
    assert decoded == props
    assert list(decoded) == list(props)


@given(st.dictionaries(NAMES, VALUES, max_size=8))
def test_round_trip_random(props: dict[str, str]) -> None:
    assert decode_properties(encode_properties(props)) == props


@pytest.mark.parametrize("sep", ["\x01", "\x02"])
@pytest.mark.parametrize("where", ["name", "value"])
def test_separators_in_names_or_values_are_rejected(sep: str, where: str) -> None:
    name, value = ("TA" + sep + "GS", "TagA") if where == "name" else ("TAGS", "Tag" + sep)
    with pytest.raises(InvalidArgumentError, match="separator") as info:
        encode_properties({name: value})
    assert repr(name) in str(info.value)


def test_empty_name_is_rejected() -> None:
    with pytest.raises(InvalidArgumentError, match="must not be empty"):
        encode_properties({"": "x"})


@pytest.mark.parametrize("props", [{"DELAY": 3}, {1: "x"}, {"TAGS": None}])
def test_non_string_names_or_values_are_rejected(props) -> None:
    with pytest.raises(InvalidArgumentError, match="must be strings"):
        encode_properties(props)


def test_exactly_32767_bytes_is_accepted() -> None:
    # "TAGS" \x01 value \x02 = 6 + len(value) bytes
    data = encode_properties({"TAGS": "v" * (MAX_PROPERTIES_BYTES - 6)})
    assert len(data) == MAX_PROPERTIES_BYTES == 32767


def test_over_32767_bytes_is_rejected_with_the_size() -> None:
    with pytest.raises(InvalidArgumentError, match=r"take 32768 bytes.*limit is 32767"):
        encode_properties({"TAGS": "v" * (MAX_PROPERTIES_BYTES - 5)})


def test_the_limit_counts_utf8_bytes_not_characters() -> None:
    value = "é" * 16381  # 16381 characters, 32762 bytes; + 6 = 32768 bytes
    with pytest.raises(InvalidArgumentError, match="32768 bytes"):
        encode_properties({"TAGS": value})


def test_unencodable_text_is_an_invalid_argument() -> None:
    with pytest.raises(InvalidArgumentError):
        encode_properties({"TAGS": "\udcff"})
