"""Reading one option's text as a typed value, with errors that name the option.

:class:`RawOptions` holds a source's options after their keys were made canonical; each
getter parses one option (a count, a size in bytes, a duration, a flag) and raises
:class:`~rmq_spark.errors.InvalidArgumentError` naming the option, the bad value and what
is allowed.
"""

from __future__ import annotations

from rmq_spark.errors import InvalidArgumentError
from rmq_spark.offsets.json_codec import MAX_OFFSET
from rmq_spark.units import parse_duration_ms, parse_size

__all__ = ["RawOptions", "bad"]


class RawOptions:
    """The options after key normalisation, with typed getters that name the option."""

    def __init__(self, values: dict[str, str], streaming: bool) -> None:
        self.values = values
        self.streaming = streaming

    def has(self, name: str) -> bool:
        return name in self.values

    def get(self, name: str) -> str | None:
        return self.values.get(name)

    def count(
        self,
        name: str,
        maximum: int,
        *,
        minimum: int = 1,
        default: int | None = None,
        expected: str | None = None,
    ) -> int | None:
        text = self.get(name)
        if text is None:
            return default
        stripped = text.strip()
        if not (stripped.isascii() and stripped.isdigit() and minimum <= int(stripped) <= maximum):
            what = f"{expected}: " if expected else ""
            raise bad(name, text, f"expected {what}a whole number in {minimum}..{maximum}")
        return int(stripped)

    def setting(self, name: str, maximum: int, minimum: int, default: int) -> int:
        value = self.count(name, maximum, minimum=minimum, default=default)
        assert value is not None
        return value

    def timestamp_ms(self, name: str) -> int | None:
        return self.count(
            name, MAX_OFFSET, minimum=0, expected="milliseconds since the epoch, e.g. 1700000000000"
        )

    def size_bytes(self, name: str) -> int | None:
        text = self.get(name)
        if text is None:
            return None
        return parse_size(text, what=f"option {name}", minimum=1, maximum=MAX_OFFSET)

    def duration_ms(self, name: str, default: int) -> int:
        text = self.get(name)
        if text is None:
            return default
        return parse_duration_ms(text, what=f"option {name}", minimum=1)

    def flag(self, name: str, default: bool) -> bool:
        text = self.get(name)
        if text is None:
            return default
        if text.strip().lower() not in ("true", "false"):
            raise bad(name, text, "expected true or false")
        return text.strip().lower() == "true"


def bad(name: str, value: object, expected: str) -> InvalidArgumentError:
    """The error for one option with a bad value."""
    return InvalidArgumentError(f"option {name}={_short(value)} is invalid: {expected}")


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."
