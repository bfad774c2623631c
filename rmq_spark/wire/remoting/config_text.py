"""The body of GET_BROKER_CONFIG and UPDATE_BROKER_CONFIG: settings as Java's
``Properties`` text (RocketMQ's ``MixAll.properties2String`` writes it, ``string2Properties``
reads it with ``Properties.load``).

Written: one ``key=value`` line per setting, in key order. Read: ``Properties.load``'s
lines as a tool writes them: blank lines and comments (``#``, ``!``) skipped, the key ending
at the first ``=``, ``:`` or white space, white space around the separator dropped, and the
escapes ``\\t \\n \\r \\f \\=`` ``\\:`` ``\\\\`` and ``\\uXXXX``; a line ending in a backslash
goes on on the next line.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from rmq_spark.errors import InvalidArgumentError, shown

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_ESCAPE = re.compile(r"\\(u[0-9a-fA-F]{4}|.)", re.DOTALL)


def write_properties(settings: Mapping[str, str]) -> bytes:
    """``key=value`` lines, in key order, UTF-8.

    >>> write_properties({"b": "2", "a": "x y"})
    b'a=x y\\nb=2\\n'
    """
    return "".join(f"{key}={_escape(settings[key])}\n" for key in sorted(settings)).encode()


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")


def _unescape(text: str) -> str:
    def one(match: re.Match[str]) -> str:
        code = match.group(1)
        if len(code) == 5:
            return chr(int(code[1:], 16))
        return _ESCAPES.get(code, code)

    return _ESCAPE.sub(one, text)


def _logical_lines(text: str) -> list[str]:
    lines: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.lstrip(" \t\f") if pending else raw
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:  # an odd run of backslashes: the line goes on
            pending += line[:-1]
            continue
        lines.append(pending + line)
        pending = ""
    if pending:
        lines.append(pending)
    return lines


def read_properties(body: bytes | bytearray | memoryview) -> dict[str, str]:
    """The settings of a Properties text; InvalidArgumentError when it is not UTF-8 or a
    line has no key.

    >>> read_properties(b"# a comment\\nbrokerPermission=4\\n autoCreateTopicEnable : true\\n")
    {'brokerPermission': '4', 'autoCreateTopicEnable': 'true'}
    """
    try:
        text = bytes(body).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidArgumentError(
            f"the settings are not UTF-8 text (byte {exc.start}); send key=value lines"
        ) from None
    settings: dict[str, str] = {}
    for line in _logical_lines(text):
        stripped = line.lstrip(" \t\f")
        if not stripped or stripped[0] in "#!":
            continue
        key_end = _key_end(stripped)
        key = _unescape(stripped[:key_end])
        rest = stripped[key_end:].lstrip(" \t\f")
        if rest[:1] in ("=", ":"):
            rest = rest[1:].lstrip(" \t\f")
        if not key:
            raise InvalidArgumentError(f"the settings line {shown(line)} has no key")
        settings[key] = _unescape(rest)
    return settings


def _key_end(line: str) -> int:
    index = 0
    while index < len(line):
        char = line[index]
        if char == "\\":
            index += 2
            continue
        if char in "=: \t\f":
            return index
        index += 1
    return len(line)
