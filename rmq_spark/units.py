"""Sizes and durations written as text: one grammar for Spark options, broker flags and
the ``rocketlite`` command.

Sizes are case-insensitive, with optional space between number and unit: a whole number
of bytes (``1048576``, ``512b``), or a whole number with a binary unit: ``k``, ``kb`` or
``KiB`` (2**10); ``m``, ``mb`` or ``MiB`` (2**20); ``g``, ``gb`` or ``GiB`` (2**30);
``t``, ``tb`` or ``TiB`` (2**40). ``64m``, ``64MB`` and ``64MiB`` are all 67108864 bytes.

Durations are a whole number with a unit, case-insensitive: ``ms``, ``s``, ``m`` or
``min`` (minutes), ``h``, ``d``. A bare number takes the caller's default unit
(milliseconds for the flags named ``--*-ms``); where there is none, the unit is required.

Errors are :class:`~rmq_spark.errors.InvalidArgumentError` naming the setting, the bad
value and examples of good ones; :func:`flag_type` turns a parser into an argparse type.

>>> parse_size("64MiB", what="--max-pull-bytes") == parse_size("64m", what="x") == 64 << 20
True
>>> parse_duration_ms("2min", what="x"), parse_duration_ms("1500", what="x", default_unit="ms")
(120000, 1500)
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable

from rmq_spark.errors import InvalidArgumentError

__all__ = [
    "UNITS_HELP",
    "GiB",
    "KiB",
    "MiB",
    "duration_ms_flag",
    "flag_type",
    "parse_duration_ms",
    "parse_size",
    "size_flag",
]

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30

#: the power of two of each size unit's first letter ("": bytes)
_SIZE_SHIFTS = {"": 0, "k": 10, "m": 20, "g": 30, "t": 40}
#: milliseconds per duration unit
_UNITS_MS = {
    "ms": 1,
    "s": 1000,
    "m": 60_000,
    "min": 60_000,
    "h": 3_600_000,
    "d": 86_400_000,
}
_UNIT_NAMES = {"ms": "milliseconds", "s": "seconds", "m": "minutes", "min": "minutes"}
_UNIT_NAMES |= {"h": "hours", "d": "days"}

_SIZE = re.compile(r"(\d+)\s*(?:([kmgt])(?:i?b)?|(b))?", re.IGNORECASE)
_DURATION = re.compile(r"(\d+)\s*(ms|s|min|m|h|d)?", re.IGNORECASE)

_SIZE_EXAMPLES = (
    "e.g. 1048576, 512k, 64m or 64MiB (units k, m, g, t, optionally with b, or KiB, MiB, "
    "GiB, TiB; all powers of 1024)"
)
_DURATION_UNITS = "ms, s, m or min, h, d"


def parse_size(text: str, *, what: str, minimum: int = 0, maximum: int | None = None) -> int:
    """The bytes ``text`` means, at least ``minimum`` and at most ``maximum``.

    ``what`` names the setting in errors (``"option maxBytesPerTrigger"``,
    ``"--max-pull-bytes"``; empty where the caller names it itself).

    >>> [parse_size(t, what="x") for t in ("0", "512k", "64 MB", "1GiB", "2T")]
    [0, 524288, 67108864, 1073741824, 2199023255552]
    """
    match = _SIZE.fullmatch(text.strip()) if isinstance(text, str) else None
    value = int(match[1]) << _SIZE_SHIFTS[(match[2] or "").lower()] if match else None
    if value is None or value < minimum:
        raise _invalid(what, text, f"expected {_size_kind(minimum)}, {_SIZE_EXAMPLES}")
    if maximum is not None and value > maximum:
        raise _invalid(what, text, f"expected at most {maximum} bytes")
    return value


def parse_duration_ms(
    text: str, *, what: str, default_unit: str | None = None, minimum: int = 0
) -> int:
    """The milliseconds ``text`` means, at least ``minimum``.

    A bare number is in ``default_unit`` (``"ms"``, ``"s"``, ``"m"``, ``"min"``, ``"h"`` or
    ``"d"``); with None, a unit is required. ``what`` names the setting in errors, as for
    :func:`parse_size`.

    >>> [parse_duration_ms(t, what="x") for t in ("500ms", "30s", "15m", "2 MIN", "1h", "1d")]
    [500, 30000, 900000, 120000, 3600000, 86400000]
    >>> parse_duration_ms("90", what="x", default_unit="s")
    90000
    """
    if default_unit is not None and default_unit not in _UNITS_MS:
        raise ValueError(f"default_unit {default_unit!r} is not one of {_DURATION_UNITS}")
    match = _DURATION.fullmatch(text.strip()) if isinstance(text, str) else None
    unit = (match[2] or default_unit or "").lower() if match else ""
    value = int(match[1]) * _UNITS_MS[unit] if match and unit else None
    if value is None or value < minimum:
        raise _invalid(what, text, _duration_expectation(default_unit, minimum))
    return value


def flag_type(parse: Callable[..., int], **settings: object) -> Callable[[str], int]:
    """An argparse ``type=`` that reads a flag with ``parse`` (and ``settings``, e.g.
    ``default_unit="ms"``); argparse names the flag in front of the message.

    >>> flag_type(parse_size)("4MiB")
    4194304
    """

    def convert(text: str) -> int:
        try:
            return parse(text, what="", **settings)
        except InvalidArgumentError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    convert.__name__ = parse.__name__
    return convert


#: argparse types: a size flag, and a duration flag whose bare numbers are milliseconds
size_flag = flag_type(parse_size)
duration_ms_flag = flag_type(parse_duration_ms, default_unit="ms")
#: how the flags' sizes and durations are written, for --help
UNITS_HELP = (
    "SIZE: bytes, or a number with k, m, g, t (optionally with b) or KiB, MiB, GiB, TiB, all "
    "powers of 1024: 4194304, 512k, 64m, 64MiB. DURATION: milliseconds, or a number with ms, "
    "s, m or min, h, d: 30000, 30s, 2min, 72h."
)


def _size_kind(minimum: int) -> str:
    if minimum <= 0:
        return "a size in bytes"
    if minimum == 1:
        return "a positive size in bytes"
    return f"a size of at least {minimum} bytes"


def _duration_expectation(default_unit: str | None, minimum: int) -> str:
    """What a duration must look like, for the error message."""
    kind = "a positive duration" if minimum == 1 else "a duration"
    if minimum > 1:
        kind = f"a duration of at least {minimum} ms"
    if default_unit is None:
        return f"expected {kind} with a unit ({_DURATION_UNITS}), e.g. 15m, 30s or 500ms"
    return (
        f"expected {kind}: a whole number of {_UNIT_NAMES[default_unit]}, or a whole "
        f"number with a unit ({_DURATION_UNITS}), e.g. 500ms, 30s or 2min"
    )


def _invalid(what: str, value: object, expected: str) -> InvalidArgumentError:
    text = repr(value)
    if len(text) > 120:
        text = text[:117] + "..."
    subject = f"{what}={text}" if what else text
    return InvalidArgumentError(f"{subject} is invalid: {expected}")
