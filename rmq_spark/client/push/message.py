"""The message a push consumer's listener receives (RocketMQ's MessageExt)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa

from rmq_spark.codec.properties import RETRY_TOPIC, UNIQ_KEY
from rmq_spark.structs import MessageQueue

__all__ = ["ReceivedMessage", "messages_from_batch"]


@dataclass(slots=True)
class ReceivedMessage:
    """One delivered message.

    ``topic`` is the topic the consumer subscribed to, also for a message redelivered from
    the group's retry topic; ``message_queue`` is the queue it was read from (the retry
    queue for a redelivery). ``msg_id`` is the client message id (UNIQ_KEY), which stays the
    same across redeliveries and retries: de-duplicate on it. ``reconsume_times`` counts the
    earlier failed deliveries.
    """

    topic: str
    message_queue: MessageQueue
    queue_offset: int
    msg_id: str
    offset_msg_id: str
    tags: str | None
    keys: str | None
    body: bytes
    properties: dict[str, str] = field(repr=False)
    born_timestamp_ms: int
    store_timestamp_ms: int
    born_host: str
    store_host: str
    reconsume_times: int
    commit_log_offset: int
    flag: int

    @property
    def is_retry(self) -> bool:
        """True for a redelivery read from the group's retry topic."""
        return self.message_queue.topic != self.topic


def messages_from_batch(batch: pa.RecordBatch, mq: MessageQueue) -> list[ReceivedMessage]:
    """The rows of a decoded pull batch of ``mq`` as :class:`ReceivedMessage` objects.

    Columns are converted once each (not row by row through Arrow scalars).
    """
    n = batch.num_rows
    if n == 0:
        return []
    cols = {name: batch.column(name).to_pylist() for name in batch.schema.names}
    out: list[ReceivedMessage] = []
    for i in range(n):
        props = dict(cols["properties"][i] or ())
        offset_id = cols["msgId"][i]
        out.append(
            ReceivedMessage(
                topic=props.get(RETRY_TOPIC, cols["topic"][i]),
                message_queue=mq,
                queue_offset=cols["queueOffset"][i],
                msg_id=props.get(UNIQ_KEY) or offset_id,
                offset_msg_id=offset_id,
                tags=cols["tags"][i],
                keys=cols["keys"][i],
                body=cols["body"][i],
                properties=props,
                born_timestamp_ms=cols["bornTimestamp"][i],
                store_timestamp_ms=cols["storeTimestamp"][i],
                born_host=cols["bornHost"][i],
                store_host=cols["storeHost"][i],
                reconsume_times=cols["reconsumeTimes"][i],
                commit_log_offset=cols["commitLogOffset"][i],
                flag=cols["flag"][i],
            )
        )
    return out
