"""Reading the JSON dialect RocketMQ's Java side writes with fastjson.

fastjson writes maps with non-string keys without quotes (``{0:"10.0.0.5:10911"}`` in a
route's broker addresses, ``{0:213664}`` in offset tables) and maps keyed by objects with
the object itself as the key (``{{"brokerName":"b","queueId":0,"topic":"T"}:{...}}`` in
consume statistics). Neither is JSON, so :func:`loads` reads what :func:`json.loads` reads
plus these: a number key becomes an int, an object key becomes a tuple of its sorted
(name, value) pairs (hashable, so it can stay a dict key).

>>> loads('{"brokerAddrs":{0:"10.0.0.5:10911"}}')
{'brokerAddrs': {0: '10.0.0.5:10911'}}
>>> loads('{{"queueId":1,"topic":"T"}:5}')
{(('queueId', 1), ('topic', 'T')): 5}
"""

from __future__ import annotations

import json
import re
from json.decoder import scanstring  # type: ignore[attr-defined]

_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][-+]?\d+)?")
_SPACE = re.compile(r"\s*")
_CONSTANTS = {"true": True, "false": False, "null": None}
#: nesting deeper than this is refused (Java's parser would overflow long before)
MAX_DEPTH = 200


def loads(text: str | bytes | bytearray | memoryview) -> object:
    """Parse ``text``; ValueError (json.JSONDecodeError) saying where it went wrong."""
    if not isinstance(text, str):
        text = bytes(text).decode("utf-8")
    value, end = _value(text, _skip(text, 0), 0)
    end = _skip(text, end)
    if end != len(text):
        raise json.JSONDecodeError("extra data after the value", text, end)
    return value


def _skip(text: str, pos: int) -> int:
    match = _SPACE.match(text, pos)
    return match.end() if match else pos


def _value(text: str, pos: int, depth: int) -> tuple[object, int]:
    if depth > MAX_DEPTH:
        raise json.JSONDecodeError("nested too deeply", text, pos)
    if pos >= len(text):
        raise json.JSONDecodeError("a value is missing", text, pos)
    char = text[pos]
    if char == "{":
        return _object(text, pos + 1, depth + 1)
    if char == "[":
        return _array(text, pos + 1, depth + 1)
    if char == '"':
        return scanstring(text, pos + 1)
    for word, constant in _CONSTANTS.items():
        if text.startswith(word, pos):
            return constant, pos + len(word)
    match = _NUMBER.match(text, pos)
    if match is None:
        raise json.JSONDecodeError("not a value", text, pos)
    number = match.group()
    return (float(number) if any(c in number for c in ".eE") else int(number)), match.end()


def _object(text: str, pos: int, depth: int) -> tuple[dict, int]:
    result: dict = {}
    pos = _skip(text, pos)
    if text.startswith("}", pos):
        return result, pos + 1
    while True:
        key, pos = _value(text, pos, depth)
        if isinstance(key, dict):
            key = _frozen(key)
        elif isinstance(key, list):
            raise json.JSONDecodeError("a list cannot be a key", text, pos)
        pos = _skip(text, pos)
        if not text.startswith(":", pos):
            raise json.JSONDecodeError("':' expected after a key", text, pos)
        value, pos = _value(text, _skip(text, pos + 1), depth)
        result[key] = value
        pos = _skip(text, pos)
        if text.startswith(",", pos):
            pos = _skip(text, pos + 1)
            continue
        if text.startswith("}", pos):
            return result, pos + 1
        raise json.JSONDecodeError("',' or '}' expected", text, pos)


def _array(text: str, pos: int, depth: int) -> tuple[list, int]:
    result: list = []
    pos = _skip(text, pos)
    if text.startswith("]", pos):
        return result, pos + 1
    while True:
        value, pos = _value(text, pos, depth)
        result.append(value)
        pos = _skip(text, pos)
        if text.startswith(",", pos):
            pos = _skip(text, pos + 1)
            continue
        if text.startswith("]", pos):
            return result, pos + 1
        raise json.JSONDecodeError("',' or ']' expected", text, pos)


def _frozen(value: object) -> object:
    if isinstance(value, dict):
        return tuple(sorted((str(k), _frozen(v)) for k, v in value.items()))
    if isinstance(value, list):
        return tuple(_frozen(v) for v in value)
    return value
