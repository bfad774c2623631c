"""The web console's pure decisions: what a request's values mean (each bad one refused
naming it), how a message body is shown, and the rates the chart draws. No broker here:
values in, values out."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from rmq_spark.broker.stats import Totals

__all__ = [
    "RESET_TARGETS",
    "BadInput",
    "body_preview",
    "int_value",
    "json_object",
    "rate_series",
    "reset_target",
    "text_value",
]

#: bytes of a body the console shows
PREVIEW_BYTES = 4096
#: where a reset may move a group's offsets
RESET_TARGETS = ("earliest", "latest", "time")
#: the C0 controls a text preview may hold (others make it binary)
_TEXT_CONTROLS = frozenset("\t\n\r")


class BadInput(ValueError):
    """A value of the request is wrong (answered 400 with this text)."""


def text_value(value: object, name: str, *, max_chars: int = 1024) -> str:
    """A non-empty string of at most ``max_chars``."""
    if not isinstance(value, str) or not value.strip():
        raise BadInput(f"{name} must be a non-empty string, not {_shown(value)}")
    if len(value) > max_chars:
        raise BadInput(f"{name} is {len(value)} characters long; at most {max_chars}")
    return value


def int_value(value: object, name: str, low: int, high: int) -> int:
    """An integer in [low, high], given as a number or as decimal text (a query value).

    >>> int_value("7", "queue", 0, 10)
    7
    """
    number: int | None = None
    if isinstance(value, bool):
        number = None
    elif isinstance(value, int):
        number = value
    elif isinstance(value, str) and value.strip().lstrip("-").isdigit():
        number = int(value.strip())
    if number is None:
        raise BadInput(f"{name} must be an integer, not {_shown(value)}")
    if not low <= number <= high:
        raise BadInput(f"{name} must be between {low} and {high}, not {number}")
    return number


def json_object(body: bytes) -> dict[str, Any]:
    """A request body that must be one JSON object."""
    try:
        value = json.loads(body)
    except (UnicodeDecodeError, ValueError) as exc:
        raise BadInput(f"the request body is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise BadInput(f"the request body must be a JSON object, not {type(value).__name__}")
    return value


def body_preview(body: bytes, *, compressed: bool = False, limit: int = PREVIEW_BYTES) -> dict:
    """How the console shows a body: its first ``limit`` bytes as text when they are UTF-8
    without control characters (tabs and line ends aside), else as a hex dump; never as
    markup (the page puts either in as text).

    >>> body_preview(b"hello")
    {'size': 5, 'shown': 5, 'kind': 'text', 'text': 'hello'}
    >>> body_preview(b"\\x00\\xffA")["text"]
    '00000000  00 ff 41                                         ..A'
    """
    head = body[:limit]
    text = None if compressed else _utf8_text(head, cut=len(body) > limit)
    if text is not None:
        return {"size": len(body), "shown": len(head), "kind": "text", "text": text}
    kind = "compressed" if compressed else "binary"
    return {"size": len(body), "shown": len(head), "kind": kind, "text": hex_dump(head)}


def _utf8_text(data: bytes, *, cut: bool) -> str | None:
    # a cut body may end inside a character: drop up to 3 bytes of it
    for drop in range(4 if cut else 1):
        try:
            text = data[: len(data) - drop].decode("utf-8")
        except UnicodeDecodeError:
            continue
        if any((ch < " " and ch not in _TEXT_CONTROLS) or ch == "\x7f" for ch in text):
            return None
        return text
    return None


def hex_dump(data: bytes) -> str:
    """16 bytes a line: offset, hex bytes, and the printable ASCII ones ('.' for others)."""
    lines = []
    for start in range(0, len(data), 16):
        chunk = data[start : start + 16]
        shown = "".join(chr(b) if 0x20 <= b < 0x7F else "." for b in chunk)
        lines.append(f"{start:08x}  {chunk.hex(' '):<47}  {shown}")
    return "\n".join(lines)


def rate_series(
    samples: Iterable[Totals],
    since_s: float,
    topic_shown: Callable[[str], bool],
    group_shown: Callable[[str, str], bool],
) -> list[list[float]]:
    """[time s, messages in per s, messages out per s] between consecutive samples taken
    after ``since_s``, counting only the topics (and group, topic pairs) shown.

    >>> a = Totals(0.0, {"t": (10, 0), "u": (5, 0)}, {("g", "t"): (0, 0)})
    >>> b = Totals(10.0, {"t": (30, 0), "u": (99, 0)}, {("g", "t"): (10, 0)})
    >>> rate_series([a, b], 0.0, lambda t: t == "t", lambda g, t: True)
    [[10.0, 2.0, 1.0]]
    """
    points = []
    kept = [s for s in samples if s.at_s >= since_s]
    for before, after in itertools.pairwise(kept):
        span = after.at_s - before.at_s
        if span <= 0:
            continue
        moved_in = _moved(before.messages_in, after.messages_in, topic_shown)
        moved_out = _moved(
            before.messages_out, after.messages_out, lambda key: group_shown(key[0], key[1])
        )
        points.append([after.at_s, moved_in / span, moved_out / span])
    return points


def _moved(
    before: Mapping[Any, tuple[int, int]],
    after: Mapping[Any, tuple[int, int]],
    shown: Callable[[Any], bool],
) -> int:
    total = 0
    for key, (count, _) in after.items():
        if shown(key):
            # a topic deleted and made again starts from zero: count no negative move
            total += max(0, count - before.get(key, (0, 0))[0])
    return total


def reset_target(value: object) -> str:
    """Where a reset moves a group's offsets: one of :data:`RESET_TARGETS`."""
    if value not in RESET_TARGETS:
        raise BadInput(f"to must be one of {', '.join(RESET_TARGETS)}, not {_shown(value)}")
    return str(value)


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
