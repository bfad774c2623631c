"""The tests' one polling helper: what it returns, how often it retries, how it reports."""

from __future__ import annotations

import asyncio
import itertools
import time

import pytest

from tests.support.eventually import eventually, eventually_async


def test_returns_the_first_truthy_value():
    assert eventually(lambda: {"a": 1}, what="a dict") == {"a": 1}


def test_retries_a_falsy_value_until_it_turns_truthy():
    answers = iter([0, [], None, "", "done"])
    assert eventually(lambda: next(answers), what="done", interval=0.001) == "done"
    assert next(answers, "used up") == "used up"  # it stopped at the first truthy one


def test_retries_a_failed_assert_until_the_check_passes():
    calls = itertools.count(1)

    def check():
        n = next(calls)
        assert n >= 3, f"call {n}"
        return n

    assert eventually(check, what="the third call", interval=0.001) == 3


def test_a_timeout_names_what_was_awaited_and_the_last_assertion():
    calls = itertools.count(1)

    def check():
        n = next(calls)
        assert n < 0, f"still {n} calls in"

    with pytest.raises(AssertionError) as caught:
        eventually(check, what="a negative count", timeout=0.05, interval=0.01)
    message = str(caught.value)
    assert message.startswith("timed out after 0.05 s waiting for a negative count;")
    last = next(calls) - 1
    # the check's message, then (pytest rewrites the asserts of test modules) its operands
    assert f"; last assertion: still {last} calls in\nassert {last} < 0" in message, message
    assert isinstance(caught.value.__cause__, AssertionError)  # the check's own traceback


def test_a_timeout_shows_the_last_falsy_value():
    with pytest.raises(AssertionError, match=r"waiting for rows; last value: \[\]$"):
        eventually(lambda: [], what="rows", timeout=0.02, interval=0.005)


def test_an_assertion_error_without_a_message_is_reported_as_such():
    def check():
        raise AssertionError

    with pytest.raises(AssertionError, match="last assertion had no message"):
        eventually(check, what="nothing", timeout=0, interval=0.01)


def test_the_last_assertion_message_is_built_once_for_the_report():
    built = []

    class Costly(AssertionError):
        def __str__(self) -> str:
            built.append(1)
            return "a long log tail"

    def check():
        raise Costly

    with pytest.raises(AssertionError, match=r"last assertion: a long log tail$"):
        eventually(check, what="a line", timeout=0.05, interval=0.005)
    assert built == [1]


@pytest.mark.parametrize("timeout", [0.0, 0.1, 0.3])
def test_gives_up_at_the_timeout_having_checked_at_the_deadline(timeout):
    calls = []
    started = time.monotonic()
    with pytest.raises(AssertionError):
        eventually(lambda: calls.append(time.monotonic()), what="never", timeout=timeout)
    took = time.monotonic() - started
    assert timeout <= took < timeout + 0.2, took
    assert calls[-1] - started >= timeout  # the last call is not an interval early


def test_another_exception_ends_the_wait_at_once():
    calls = []

    def check():
        calls.append(1)
        raise RuntimeError("the process exited")

    with pytest.raises(RuntimeError, match="the process exited"):
        eventually(check, what="a line", timeout=5)
    assert calls == [1]


@pytest.mark.parametrize(("timeout", "interval"), [(-1, 0.05), (1, 0), (1, -0.1)])
def test_a_negative_timeout_or_a_non_positive_interval_is_refused(timeout, interval):
    with pytest.raises(ValueError, match=f"timeout {timeout} must be >= 0 and interval"):
        eventually(lambda: True, what="x", timeout=timeout, interval=interval)


# --- inside an event loop -------------------------------------------------------------------


def test_async_waits_while_the_loops_other_tasks_run():
    async def scenario():
        done = []

        async def worker():
            for step in range(3):
                await asyncio.sleep(0)
                done.append(step)

        task = asyncio.create_task(worker())
        assert await eventually_async(lambda: len(done) == 3 and done, what="3 steps") == [0, 1, 2]
        await task

    asyncio.run(scenario())


def test_async_timeout_names_what_was_awaited_and_the_last_assertion():
    def check():
        raise AssertionError("not there")

    with pytest.raises(AssertionError, match=r"after 0.05 s waiting for x; last assertion: not"):
        asyncio.run(eventually_async(check, what="x", timeout=0.05, interval=0.01))


@pytest.mark.parametrize(("timeout", "interval"), [(-1, 0), (1, -0.1)])
def test_async_refuses_a_negative_timeout_or_interval(timeout, interval):
    with pytest.raises(ValueError, match="must be >= 0"):
        asyncio.run(eventually_async(lambda: True, what="x", timeout=timeout, interval=interval))
