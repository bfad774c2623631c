"""A consumer group's offsets moved to a point in time (``mqadmin resetOffsetByTime``),
for every front-end: where each queue of the topic is to restart, then committed.

Each readable queue of the topic restarts at its first message stored at or after the time
(its max offset when every message is older), or at its max offset for the time ``NOW``
(-1, RocketMQ's ``now``). Without ``force`` a queue whose committed offset is already lower
keeps it (RocketMQ's rule: a reset without force only moves a group back); a queue the
group never committed on takes the found offset.
"""

from __future__ import annotations

from rmq_spark.broker.core.messaging import MessagingCore
from rmq_spark.errors import NotFoundError

#: the time that stands for "now": every queue restarts at its max offset
NOW = -1


def offsets_at_time(
    core: MessagingCore, group: str, topic: str, timestamp_ms: int, *, force: bool
) -> dict[int, int]:
    """The offset each queue of ``topic`` restarts at for ``group`` (blocking: the store's
    queues are searched). NotFoundError when the broker has no such topic."""
    config = core.topic(topic)
    if config is None:
        raise NotFoundError(
            f"[reset-offset] reset offset failed, no topic in this broker. topic={topic}"
        )
    table = {}
    for queue_id in range(config.read_queue_nums):
        if timestamp_ms == NOW:
            found = core.max_offset(topic, queue_id)
        else:
            found = core.offset_at(topic, queue_id, timestamp_ms)
        committed = core.committed(group, topic, queue_id)
        keep = committed is not None and not force and committed <= found
        table[queue_id] = committed if keep and committed is not None else found
    return table


def reset_to_time(
    core: MessagingCore, group: str, topic: str, timestamp_ms: int, *, force: bool
) -> dict[int, int]:
    """:func:`offsets_at_time`, committed for ``group`` (a lower offset replaces a higher
    one); returns the offsets committed."""
    table = offsets_at_time(core, group, topic, timestamp_ms, force=force)
    core.commit_offsets(group, topic, table, increase_only=False)
    return table
