"""The decisions of auto batching (rmq_spark.client.auto_batch): when a held batch goes out,
when the flusher wakes, and how big a message counts."""

from __future__ import annotations

import pytest

from rmq_spark.client import Message
from rmq_spark.client.auto_batch import (
    MESSAGE_OVERHEAD_BYTES,
    is_due,
    message_bytes,
    next_wake,
)

MAX_BYTES = 32 * 1024
DELAY = 0.010


@pytest.mark.parametrize(
    ("held_bytes", "since", "now", "in_flight", "due", "why"),
    [
        (100, 0.0, 0.0, 0, True, "nothing in flight: it goes at once"),
        (100, 0.0, 0.0, 1, False, "a batch in flight: wait for its answer"),
        (100, 0.0, 0.009, 1, False, "still within the delay"),
        (100, 0.0, 0.010, 1, True, "the first message has waited the whole delay"),
        (100, 5.0, 5.011, 3, True, "late, whatever is in flight"),
        (MAX_BYTES - 1, 0.0, 0.0, 1, False, "one byte under the size"),
        (MAX_BYTES, 0.0, 0.0, 1, True, "full: it goes without waiting"),
        (10 * MAX_BYTES, 0.0, 0.0, 2, True, "over full"),
    ],
)
def test_is_due(held_bytes, since, now, in_flight, due, why) -> None:
    assert is_due(held_bytes, since, now, in_flight, MAX_BYTES, DELAY) is due, why


@pytest.mark.parametrize(
    ("since_times", "wake"),
    [
        ([], None),
        ([2.0], 2.0 + DELAY),
        ([3.0, 1.0, 2.0], 1.0 + DELAY),
    ],
)
def test_next_wake_is_the_oldest_batch_deadline(since_times, wake) -> None:
    assert next_wake(iter(since_times), DELAY) == wake


def test_message_bytes_counts_everything_the_request_carries() -> None:
    bare = Message(b"x" * 100)
    assert message_bytes(bare) == MESSAGE_OVERHEAD_BYTES + 100 + len(bare.unique_key)
    full = Message(b"x" * 100, tags="TagA", keys=["k1", "k2"], properties={"a": "bc"})
    # tags, each key and a separator, each property name and value plus its framing
    assert message_bytes(full) == message_bytes(bare) + 4 + 6 + (1 + 2 + 4)
    assert message_bytes(Message(b"x" * 1000)) > message_bytes(bare)
