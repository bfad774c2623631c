"""AVG_BY_CIRCLE: deal the sorted queues out to the consumers like cards, round robin."""

from __future__ import annotations

from rmq_spark.allocate.base import AllocateMessageQueueStrategy
from rmq_spark.structs import MessageQueue


class AllocateMessageQueueAveragelyByCircle(AllocateMessageQueueStrategy):
    """Consumer ``i`` (position in the sorted ids) takes queues ``i, i+n, i+2n, ...``.

    Counts are as even as AVG's (the first ``m % n`` consumers get one extra), but each
    consumer's queues are spread over the whole sorted list, so with queues sorted by broker
    every consumer reads from every broker instead of one consumer owning a whole broker.

    8 queues, 3 consumers -> ``[0, 3, 6]``, ``[1, 4, 7]``, ``[2, 5]``:

    >>> mqs = [MessageQueue("t", "broker-a", i) for i in range(8)]
    >>> [mq.queue_id for mq in AllocateMessageQueueAveragelyByCircle().allocate(
    ...     "g", "c1", mqs, ["c1", "c2", "c3"])]
    [0, 3, 6]
    """

    name = "avgByCircle"
    aliases = ("AVG_BY_CIRCLE", "circle", "AllocateMessageQueueAveragelyByCircle")

    def allocate_sorted(
        self,
        consumer_group: str,
        current_cid: str,
        mq_all: tuple[MessageQueue, ...],
        cid_all: tuple[str, ...],
    ) -> list[MessageQueue]:
        index = cid_all.index(current_cid)
        return list(mq_all[index :: len(cid_all)])
