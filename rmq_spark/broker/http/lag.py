"""How far each consumer group is behind, per queue: what ``/metrics`` exports and the
console shows, worked out once.

For a group's queue, with ``committed`` its committed (next) offset, ``newest`` the queue's
max offset and ``read_to`` where the group's reads have got to:

* **lag**: messages stored and not yet committed (``newest - committed``);
* **lag ms**: how long ago the oldest uncommitted message was stored (0 without lag);
* **in flight**: handed to the group, not yet committed;
* **ready**: stored, not yet handed to the group.

In flight plus ready is the lag.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from rmq_spark.broker.core.messaging import MessagingCore

__all__ = ["QueueLag", "group_lags", "queue_lag"]


@dataclass(frozen=True)
class QueueLag:
    topic: str
    group: str
    queue_id: int
    committed: int
    max_offset: int
    lag: int
    lag_ms: int
    inflight: int
    ready: int


def queue_lag(
    committed: int, newest: int, read_to: int | None, stored_ms: int | None, now_ms: int
) -> tuple[int, int, int, int]:
    """(lag, lag ms, in flight, ready) of one queue. ``read_to`` is where the group's reads
    have got to (None: it read none since the broker started), ``stored_ms`` when the
    message at ``committed`` was stored (None: no message there).

    >>> queue_lag(committed=10, newest=15, read_to=12, stored_ms=1_000, now_ms=3_000)
    (5, 2000, 2, 3)
    >>> queue_lag(committed=10, newest=10, read_to=None, stored_ms=None, now_ms=3_000)
    (0, 0, 0, 0)
    >>> queue_lag(committed=10, newest=8, read_to=20, stored_ms=None, now_ms=3_000)
    (0, 0, 0, 0)
    """
    behind = max(0, newest - committed)
    age = 0 if not behind or stored_ms is None else max(0, now_ms - stored_ms)
    reads = committed if read_to is None else read_to
    handed = max(committed, min(reads, newest))
    return behind, age, handed - committed, max(0, newest - handed)


def group_lags(
    core: MessagingCore,
    read_to: dict[tuple[str, str, int], int],
    now_ms: int,
    wanted: Callable[[str, str], bool],
) -> Iterator[QueueLag]:
    """The lag of every queue a group committed an offset of, for the (topic, group) pairs
    ``wanted`` keeps, sorted by topic, group and queue (blocking: store reads)."""
    for (topic, group), queues in sorted(core.offsets.snapshot().items()):
        if not wanted(topic, group):
            continue
        for queue_id, committed in sorted(queues.items()):
            newest = core.max_offset(topic, queue_id)
            stored = (
                core.queue_store_timestamp(topic, queue_id, committed)
                if newest > committed
                else None
            )
            behind, age, inflight, ready = queue_lag(
                committed, newest, read_to.get((group, topic, queue_id)), stored, now_ms
            )
            yield QueueLag(topic, group, queue_id, committed, newest, behind, age, inflight, ready)
