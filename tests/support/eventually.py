"""One way for a test to wait for something that happens in another thread or process.

``eventually(check, what=...)`` calls ``check()`` again and again until it passes, then
returns what it returned. ``check`` passes when it returns a truthy value without raising
AssertionError. So a check is either a predicate (``lambda: len(rows) == 3``, falsy means
"not yet") or a block of asserts that ends with ``return True`` (a failed assert means "not
yet", and its message is kept for the report). Any other exception ends the wait at once:
raise one (or call ``pytest.fail``) when waiting longer cannot help, e.g. the process that
should act has exited.

On timeout it raises AssertionError naming ``what``, the timeout, and the last value the
check returned or the last assertion message it raised.

``await eventually_async(check, what=...)`` is the same wait for a test that runs inside an
event loop: between two checks it awaits ``asyncio.sleep``, so the loop's other tasks run.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

#: how long a test waits by default: long enough for a loaded two-core machine
DEFAULT_TIMEOUT_S = 10.0
#: how often the check runs by default
DEFAULT_INTERVAL_S = 0.05


def eventually(
    check: Callable[[], T],
    *,
    what: str,
    timeout: float = DEFAULT_TIMEOUT_S,
    interval: float = DEFAULT_INTERVAL_S,
) -> T:
    """``check()``'s first truthy result, calling it every ``interval`` seconds; raises
    AssertionError once ``timeout`` seconds passed without one. The check runs at least
    once, and the last wait before the deadline is cut short so that one call falls on it."""
    if timeout < 0 or interval <= 0:
        raise ValueError(
            f"eventually({what!r}): timeout {timeout} must be >= 0 and interval {interval} > 0"
        )
    deadline = time.monotonic() + timeout
    while True:
        value: object = None
        last_error: AssertionError | None = None
        try:
            result = check()
        except AssertionError as error:
            last_error = error
        else:
            if result:
                return result
            value = result
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(
                f"timed out after {timeout:g} s waiting for {what}; {last(value, last_error)}"
            ) from last_error
        time.sleep(min(interval, left))


async def eventually_async(
    check: Callable[[], T],
    *,
    what: str,
    timeout: float = DEFAULT_TIMEOUT_S,
    interval: float = 0.0,
) -> T:
    """:func:`eventually` inside an event loop: ``check()``'s first truthy result, awaiting
    ``asyncio.sleep(interval)`` between two calls (0, the default: one turn of the loop, in
    which every task that is ready runs)."""
    if timeout < 0 or interval < 0:
        raise ValueError(
            f"eventually_async({what!r}): timeout {timeout} and interval {interval} must be >= 0"
        )
    deadline = time.monotonic() + timeout
    while True:
        value: object = None
        last_error: AssertionError | None = None
        try:
            result = check()
        except AssertionError as error:
            last_error = error
        else:
            if result:
                return result
            value = result
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(
                f"timed out after {timeout:g} s waiting for {what}; {last(value, last_error)}"
            ) from last_error
        await asyncio.sleep(min(interval, left))


def last(value: object, error: AssertionError | None) -> str:
    """How a timeout report shows the check's last answer: its failed assert (the message is
    read only here, so a costly one is built once), or else the falsy value it returned."""
    if error is None:
        return f"last value: {value!r}"
    message = str(error)
    return f"last assertion: {message}" if message else "last assertion had no message"
