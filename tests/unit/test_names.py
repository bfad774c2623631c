"""RocketMQ's naming rule for topics and groups."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rmq_spark.errors import InvalidArgumentError, InvalidNameError
from rmq_spark.names import (
    MAX_GROUP_LENGTH,
    MAX_TOPIC_LENGTH,
    dlq_topic,
    retry_topic,
    validate_group,
    validate_topic,
)

ALPHABET = "%|abcxyzABCXYZ0189_-"


@pytest.mark.parametrize(
    "name", ["TopicA", "topic_a-1", "a|b", "a%b", "_", "-", "9", "x" * MAX_TOPIC_LENGTH]
)
def test_valid_topic_names_are_returned_unchanged(name: str) -> None:
    assert validate_topic(name) == name


def test_group_names_may_be_longer_than_topics() -> None:
    assert validate_group("g" * MAX_GROUP_LENGTH) == "g" * MAX_GROUP_LENGTH
    with pytest.raises(InvalidNameError, match="127"):
        validate_topic("t" * (MAX_TOPIC_LENGTH + 1))


def test_too_long_names_report_length_and_limit() -> None:
    with pytest.raises(InvalidNameError) as info:
        validate_group("g" * (MAX_GROUP_LENGTH + 1))
    assert "256 characters" in str(info.value) and "255" in str(info.value)


@pytest.mark.parametrize("name", ["a b", "a.b", "a@b", "a/b", "a:b", "主题", "a\tb"])
def test_names_with_other_characters_are_refused_naming_them(name: str) -> None:
    for validate in (validate_topic, validate_group):
        with pytest.raises(InvalidNameError) as info:
            validate(name)
        assert repr(name) in str(info.value)
        assert "[%|a-zA-Z0-9_-]" in str(info.value)


@pytest.mark.parametrize("name", ["", None, 5, b"topic"])
def test_empty_or_non_string_names_are_refused(name: object) -> None:
    with pytest.raises(InvalidNameError, match="non-empty string"):
        validate_topic(name)
    with pytest.raises(InvalidNameError, match="non-empty string"):
        validate_group(name)


def test_invalid_name_errors_are_invalid_argument_errors() -> None:
    # Callers (and the gRPC boundary) can catch every bad input with one class.
    with pytest.raises(InvalidArgumentError):
        validate_topic("a b")


@pytest.mark.parametrize("name", ["%RETRY%GroupA", "%DLQ%GroupA"])
def test_reserved_prefixes_need_allow_system(name: str) -> None:
    with pytest.raises(InvalidNameError, match="reserved prefix"):
        validate_topic(name)
    assert validate_topic(name, allow_system=True) == name


def test_retry_and_dlq_topic_names_follow_the_group() -> None:
    assert retry_topic("GroupA") == "%RETRY%GroupA"
    assert dlq_topic("GroupA") == "%DLQ%GroupA"
    assert validate_topic(retry_topic("GroupA"), allow_system=True) == "%RETRY%GroupA"


@given(st.text(alphabet=ALPHABET, min_size=1, max_size=MAX_TOPIC_LENGTH))
def test_every_name_from_the_alphabet_is_a_valid_group(name: str) -> None:
    assert validate_group(name) == name
    assert validate_topic(name, allow_system=True) == name


def _is_foreign(char: str) -> bool:
    # "\n" is left out while the trailing-newline bug below is open (it passes at the end).
    allowed = char.isascii() and (char.isalnum() or char in "%|_-")
    return not allowed and char != "\n"


@given(
    st.text(alphabet=ALPHABET, max_size=10),
    st.characters().filter(_is_foreign),
    st.text(alphabet=ALPHABET, max_size=10),
)
def test_one_foreign_character_anywhere_makes_a_name_invalid(
    before: str, bad: str, after: str
) -> None:
    with pytest.raises(InvalidNameError):
        validate_group(before + bad + after)


@pytest.mark.parametrize("name", ["TopicA\n", "GroupA\n"])
def test_a_trailing_newline_is_refused(name: str) -> None:
    with pytest.raises(InvalidNameError):
        validate_group(name)
