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
    col = batch.column
    props_col = [dict(p) if p else {} for p in col("properties").to_pylist()]
    topics = col("topic").to_pylist()
    offset_ids = col("msgId").to_pylist()
    # positional arguments in field order: about twice as fast as keywords for 16 fields
    return [
        ReceivedMessage(
            props.get(RETRY_TOPIC, topic),
            mq,
            queue_offset,
            props.get(UNIQ_KEY) or offset_id,
            offset_id,
            tags,
            keys,
            body,
            props,
            born,
            stored,
            born_host,
            store_host,
            reconsume,
            commit_log_offset,
            flag,
        )
        for (
            props,
            topic,
            queue_offset,
            offset_id,
            tags,
            keys,
            body,
            born,
            stored,
            born_host,
            store_host,
            reconsume,
            commit_log_offset,
            flag,
        ) in zip(
            props_col,
            topics,
            col("queueOffset").to_pylist(),
            offset_ids,
            col("tags").to_pylist(),
            col("keys").to_pylist(),
            col("body").to_pylist(),
            col("bornTimestamp").to_pylist(),
            col("storeTimestamp").to_pylist(),
            col("bornHost").to_pylist(),
            col("storeHost").to_pylist(),
            col("reconsumeTimes").to_pylist(),
            col("commitLogOffset").to_pylist(),
            col("flag").to_pylist(),
            strict=True,
        )
    ]
