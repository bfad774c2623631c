"""AVG: each consumer takes one contiguous block of the sorted queues (RocketMQ's default)."""

from __future__ import annotations

from rmq_spark.allocate.base import AllocateMessageQueueStrategy
from rmq_spark.structs import MessageQueue


class AllocateMessageQueueAveragely(AllocateMessageQueueStrategy):
    """Contiguous blocks; the first ``len(mq_all) % len(cid_all)`` consumers get one extra.

    With ``m`` queues and ``n`` consumers, consumer ``i`` (position in the sorted ids) gets
    ``m // n`` queues, plus one if ``i < m % n``; blocks follow each other in consumer order.
    With more consumers than queues, the first ``m`` consumers get one queue each and the
    rest get nothing. This is RocketMQ's exact index arithmetic, so the block boundaries
    match Java consumers of the same group.

    8 queues, 3 consumers -> ``[0, 1, 2]``, ``[3, 4, 5]``, ``[6, 7]``:

    >>> mqs = [MessageQueue("t", "broker-a", i) for i in range(8)]
    >>> [mq.queue_id for mq in AllocateMessageQueueAveragely().allocate(
    ...     "g", "c3", mqs, ["c1", "c2", "c3"])]
    [6, 7]
    """

    name = "avg"
    aliases = ("AVG", "averagely", "AllocateMessageQueueAveragely")

    def allocate_sorted(
        self,
        consumer_group: str,
        current_cid: str,
        mq_all: tuple[MessageQueue, ...],
        cid_all: tuple[str, ...],
    ) -> list[MessageQueue]:
        m, n = len(mq_all), len(cid_all)
        index = cid_all.index(current_cid)
        mod = m % n
        gets_extra = mod > 0 and index < mod
        # with m <= n every block is one queue
        size = 1 if m <= n else m // n + (1 if gets_extra else 0)
        # consumers before a non-extra one each took one extra queue, mod of them in all
        start = index * size if gets_extra else index * size + mod
        # with m < n, consumers at index >= m start past the end: count <= 0, nothing
        count = min(size, m - start)
        return list(mq_all[start : start + max(count, 0)])
