"""RocketMQ's consumer-offset JSON: ``{"offsetTable": {"topic@group": {"0": 88526}}}``.

Pure functions between the in-memory table ``{(topic, group): {queue_id: offset}}`` and its
JSON form (a dict of primitives, or text). The offset is the *next* offset to consume.

>>> encode_offset_table({("TopicA", "GroupA"): {1: 88528, 0: 88526}})
'{"offsetTable": {"TopicA@GroupA": {"0": 88526, "1": 88528}}}'
>>> decode_offset_table('{"offsetTable": {"TopicA@GroupA": {"0": 88526}}}')
{('TopicA', 'GroupA'): {0: 88526}}
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, TypeGuard

from rmq_spark.errors import CorruptDataError, InvalidArgumentError, InvalidNameError
from rmq_spark.names import validate_group, validate_topic

#: ``{(topic, group): {queue_id: next offset to consume}}``
OffsetTable = dict[tuple[str, str], dict[int, int]]

TABLE_FIELD = "offsetTable"
KEY_SEPARATOR = "@"  # neither topic nor group names may contain it, so the split is unique
MAX_QUEUE_ID = 2**31 - 1  # a Java int on the RocketMQ side
MAX_OFFSET = 2**63 - 1  # a Java long


def table_key(topic: str, group: str) -> str:
    """The JSON key of one (topic, group) entry: ``"topic@group"``."""
    return f"{topic}{KEY_SEPARATOR}{group}"


def is_valid_queue_id(value: object) -> TypeGuard[int]:
    """True for an int (not a bool) in ``0..MAX_QUEUE_ID``."""
    return _is_int_in(value, MAX_QUEUE_ID)


def is_valid_offset(value: object) -> TypeGuard[int]:
    """True for an int (not a bool) in ``0..MAX_OFFSET``."""
    return _is_int_in(value, MAX_OFFSET)


def offset_table_to_json(table: Mapping[tuple[str, str], Mapping[int, int]]) -> dict[str, Any]:
    """The JSON-able form, entries sorted by key and queues by number for stable output."""
    entries: dict[str, dict[str, int]] = {}
    for (topic, group), queues in sorted(table.items()):
        _check_names_for_encode(topic, group)
        entries[table_key(topic, group)] = {
            str(queue_id): _check_pair_for_encode(topic, group, queue_id, offset)
            for queue_id, offset in sorted(queues.items())
        }
    return {TABLE_FIELD: entries}


def offset_table_from_json(obj: Any) -> OffsetTable:
    """Validate and convert the JSON form; raises CorruptDataError naming the bad part.

    Other top-level fields (RocketMQ 5 adds ``dataVersion``) are ignored.
    """
    if not isinstance(obj, dict) or not isinstance(obj.get(TABLE_FIELD), dict):
        raise CorruptDataError(
            f'expected a JSON object with an "{TABLE_FIELD}" object inside, got {_short(obj)}'
        )
    table: OffsetTable = {}
    for key, queues in obj[TABLE_FIELD].items():
        table[split_table_key(key)] = _queues_from_json(key, queues)
    return table


def encode_offset_table(table: Mapping[tuple[str, str], Mapping[int, int]]) -> str:
    """The table as one line of JSON text (see the module example)."""
    return json.dumps(offset_table_to_json(table))


def decode_offset_table(text: str | bytes) -> OffsetTable:
    """Parse and validate JSON text; raises CorruptDataError on bad JSON or a bad entry."""
    try:
        obj = json.loads(text)
    except (ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError is a ValueError
        raise CorruptDataError(f"consumer offsets are not valid JSON: {exc}") from exc
    return offset_table_from_json(obj)


def split_table_key(key: str) -> tuple[str, str]:
    """``"topic@group"`` to ``(topic, group)``; raises CorruptDataError when malformed."""
    parts = key.split(KEY_SEPARATOR)
    if len(parts) != 2:
        raise CorruptDataError(
            f"offsetTable key {key!r} must be 'topic{KEY_SEPARATOR}group' with exactly one "
            f"'{KEY_SEPARATOR}'"
        )
    topic, group = parts
    try:
        validate_topic(topic, allow_system=True)
        validate_group(group)
    except InvalidNameError as exc:
        raise CorruptDataError(f"offsetTable key {key!r}: {exc}") from exc
    return topic, group


def _queues_from_json(key: str, queues: Any) -> dict[int, int]:
    if not isinstance(queues, dict):
        raise CorruptDataError(
            f"offsetTable[{key!r}] must be an object of queue id -> offset, got {_short(queues)}"
        )
    result: dict[int, int] = {}
    for queue_key, offset in queues.items():
        # fastjson (Apache RocketMQ's files) writes the queue ids as bare numbers
        queue_text = str(queue_key) if type(queue_key) is int else queue_key
        if not _is_canonical_number(queue_text):
            raise CorruptDataError(
                f"offsetTable[{key!r}]: queue id {queue_text!r} is not a non-negative integer"
            )
        queue_id = int(queue_text)
        if not is_valid_queue_id(queue_id):
            raise CorruptDataError(
                f"offsetTable[{key!r}]: queue id {queue_text} is above {MAX_QUEUE_ID}"
            )
        if not is_valid_offset(offset):
            raise CorruptDataError(
                f"offsetTable[{key!r}][{queue_text!r}]: offset {offset!r} is not an integer "
                f"in 0..{MAX_OFFSET}"
            )
        result[queue_id] = offset
    return result


def _check_names_for_encode(topic: object, group: object) -> None:
    # Names decide the key format, so a bad one would write a file we could not read back.
    validate_topic(topic, allow_system=True)
    validate_group(group)


def _check_pair_for_encode(topic: str, group: str, queue_id: object, offset: object) -> int:
    if not is_valid_queue_id(queue_id):
        raise InvalidArgumentError(
            f"{table_key(topic, group)}: queue id {queue_id!r} is not an integer "
            f"in 0..{MAX_QUEUE_ID}"
        )
    if not is_valid_offset(offset):
        raise InvalidArgumentError(
            f"{table_key(topic, group)} queue {queue_id}: offset {offset!r} is not an integer "
            f"in 0..{MAX_OFFSET}"
        )
    return offset


def _is_canonical_number(text: str) -> bool:
    # Only the canonical ASCII spelling ("7", not "07" or "+7"): two keys never mean one queue.
    return text.isascii() and text.isdigit() and str(int(text)) == text


def _is_int_in(value: object, maximum: int) -> TypeGuard[int]:
    # bool is an int subclass; True as an offset is a caller bug, not offset 1.
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= maximum


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
