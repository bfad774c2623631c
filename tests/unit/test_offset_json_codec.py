"""The consumerOffset.json codec, against literal strings (no files)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rmq_spark.errors import CorruptDataError, InvalidArgumentError, InvalidNameError
from rmq_spark.offsets.json_codec import (
    MAX_OFFSET,
    decode_offset_table,
    encode_offset_table,
    offset_table_from_json,
)


def test_encode_matches_rocketmq_shape_with_sorted_keys() -> None:
    table = {
        ("TopicB", "GroupA"): {1: 88528, 0: 88526},
        ("TopicA", "GroupZ"): {10: 5, 2: 7},
    }
    assert encode_offset_table(table) == (
        '{"offsetTable": {'
        '"TopicA@GroupZ": {"2": 7, "10": 5}, '  # queues in numeric order, not "10" < "2"
        '"TopicB@GroupA": {"0": 88526, "1": 88528}}}'
    )


def test_encode_empty_table() -> None:
    assert encode_offset_table({}) == '{"offsetTable": {}}'


def test_decode_literal() -> None:
    text = '{"offsetTable": {"TopicA@GroupA": {"0": 88526, "1": 88528}}}'
    assert decode_offset_table(text) == {("TopicA", "GroupA"): {0: 88526, 1: 88528}}


def test_decode_accepts_bytes_and_retry_topics() -> None:
    text = b'{"offsetTable": {"%RETRY%GroupA@GroupA": {"0": 3}}}'
    assert decode_offset_table(text) == {("%RETRY%GroupA", "GroupA"): {0: 3}}


def test_decode_a_pretty_printed_rocketmq_5_file_ignoring_extra_fields() -> None:
    text = """{
        "dataVersion": {"counter": 12, "timestamp": 1700000000000},
        "offsetTable": {
            "TopicTest@please_rename_unique_group_name_4": {"0": 250, "3": 249}
        }
    }"""
    assert decode_offset_table(text) == {
        ("TopicTest", "please_rename_unique_group_name_4"): {0: 250, 3: 249}
    }


def test_round_trip_of_a_literal_is_exact() -> None:
    text = '{"offsetTable": {"t@g": {"0": 0, "7": 9223372036854775807}}}'
    assert encode_offset_table(decode_offset_table(text)) == text


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ('{"offsetTable": {"t@g": {"0": 1}', "not valid JSON"),
        ("[]", "offsetTable"),
        ('{"offsets": {}}', "offsetTable"),
        ('{"offsetTable": []}', "offsetTable"),
        ('{"offsetTable": {"topicgroup": {"0": 1}}}', "'topicgroup'"),
        ('{"offsetTable": {"t@g@h": {"0": 1}}}', "'t@g@h'"),
        ('{"offsetTable": {"@g": {"0": 1}}}', "'@g'"),
        ('{"offsetTable": {"t@": {"0": 1}}}', "'t@'"),
        ('{"offsetTable": {"bad topic@g": {"0": 1}}}', "'bad topic@g'"),
        ('{"offsetTable": {"t@g": [1, 2]}}', "[1, 2]"),
        ('{"offsetTable": {"t@g": {"-1": 1}}}', "'-1'"),
        ('{"offsetTable": {"t@g": {"01": 1}}}', "'01'"),
        ('{"offsetTable": {"t@g": {"x": 1}}}', "'x'"),
        ('{"offsetTable": {"t@g": {" 1": 1}}}', "' 1'"),
        ('{"offsetTable": {"t@g": {"2147483648": 1}}}', "2147483648"),
        ('{"offsetTable": {"t@g": {"0": -1}}}', "offset -1"),
        ('{"offsetTable": {"t@g": {"0": "5"}}}', "offset '5'"),
        ('{"offsetTable": {"t@g": {"0": 1.5}}}', "offset 1.5"),
        ('{"offsetTable": {"t@g": {"0": true}}}', "offset True"),
        ('{"offsetTable": {"t@g": {"0": null}}}', "offset None"),
        ('{"offsetTable": {"t@g": {"0": 9223372036854775808}}}', "9223372036854775808"),
    ],
)
def test_decode_rejects_bad_input_naming_the_bad_part(text: str, named: str) -> None:
    with pytest.raises(CorruptDataError) as info:
        decode_offset_table(text)
    assert named in str(info.value)


def test_decode_rejects_bad_utf8() -> None:
    with pytest.raises(CorruptDataError, match="not valid JSON"):
        decode_offset_table(b'{"offsetTable": {"\xff@g": {}}}')


@pytest.mark.parametrize(
    ("table", "error", "named"),
    [
        ({("t", "g"): {-1: 5}}, InvalidArgumentError, "queue id -1"),
        ({("t", "g"): {0: -5}}, InvalidArgumentError, "offset -5"),
        ({("t", "g"): {0: MAX_OFFSET + 1}}, InvalidArgumentError, str(MAX_OFFSET + 1)),
        ({("t@x", "g"): {0: 1}}, InvalidNameError, "'t@x'"),
        ({("t", "g@x"): {0: 1}}, InvalidNameError, "'g@x'"),
    ],
)
def test_encode_refuses_values_it_could_not_read_back(
    table: dict, error: type[Exception], named: str
) -> None:
    with pytest.raises(error) as info:
        encode_offset_table(table)
    assert named in str(info.value)


def test_from_json_takes_the_parsed_form() -> None:
    assert offset_table_from_json({"offsetTable": {"t@g": {"3": 4}}}) == {("t", "g"): {3: 4}}


_names = st.text(alphabet="abcXYZ019_-|%", min_size=1, max_size=20)
_tables = st.dictionaries(
    st.tuples(_names, _names),
    st.dictionaries(st.integers(0, 2**31 - 1), st.integers(0, MAX_OFFSET), max_size=5),
    max_size=5,
)


@given(_tables)
def test_any_valid_table_survives_a_round_trip(table: dict) -> None:
    # Reserved prefixes are fine here: %RETRY%/%DLQ% topics have offsets too.
    assert decode_offset_table(encode_offset_table(table)) == table


def test_fastjsons_numeric_queue_keys_are_read():
    # what fastjson.loads gives for Apache RocketMQ's {"offsetTable":{"T@g":{0:213664}}}
    assert offset_table_from_json({"offsetTable": {"T@g": {0: 213664, 1: 5}}}) == {
        ("T", "g"): {0: 213664, 1: 5}
    }
