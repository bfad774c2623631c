"""Push consumer settings. Units are in the names; defaults are RocketMQ's where it has one."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from rmq_spark.client.consumer import ConsumerConfig
from rmq_spark.errors import InvalidArgumentError, check_whole_numbers

__all__ = ["MessageModel", "PushConsumerConfig"]

#: CLUSTERING: each message goes to one member of the group (queues are shared out, offsets
#: live on the broker). BROADCASTING: every member gets every message (offsets in a file).
MessageModel = Literal["CLUSTERING", "BROADCASTING"]

_POSITIVE = (
    "consume_thread_count",
    "consume_message_batch_max_size",
    "pull_threshold_for_queue",
    "pull_threshold_size_for_queue_mb",
    "rebalance_interval_ms",
    "persist_interval_ms",
    "max_reconsume_times",
    "queue_lease_ms",
)
_NON_NEGATIVE = (
    "long_poll_ms",
    "pull_interval_ms",
    "pull_retry_delay_ms",
    "send_back_retry_delay_ms",
    "suspend_current_queue_time_ms",
    "drain_timeout_ms",
    "heartbeat_interval_ms",
)


@dataclass
class PushConsumerConfig(ConsumerConfig):
    """Push consumer settings (plus the pull consumer's and the shared client ones)."""

    #: most messages one pull of one queue returns. RocketMQ's pullBatchSize is 32; 256
    #: costs little memory and gives several times the throughput (bench/push_throughput.py)
    pull_batch_size: int = 256
    #: threads that run the listener (RocketMQ's consumeThreadMin/Max)
    consume_thread_count: int = 20
    #: most messages handed to one listener call
    consume_message_batch_max_size: int = 1
    #: pulling a queue pauses while this many of its messages wait to be consumed
    pull_threshold_for_queue: int = 1_000
    #: ... or while their bodies take this many MiB
    pull_threshold_size_for_queue_mb: int = 100
    #: how long the broker holds a pull when nothing is new (long polling)
    long_poll_ms: int = 15_000
    #: pause between two pulls of a queue (0 = pull again at once)
    pull_interval_ms: int = 0
    #: pause before pulling a queue again after a pull failed
    pull_retry_delay_ms: int = 3_000
    #: full rebalance at least this often, besides membership notifications
    rebalance_interval_ms: int = 20_000
    #: consumed offsets are sent to the broker (or the local file) this often
    persist_interval_ms: int = 5_000
    #: heartbeat period; 0 = a third of the broker's session timeout
    heartbeat_interval_ms: int = 0
    #: a failed message goes to the dead-letter queue after this many redeliveries
    max_reconsume_times: int = 16
    #: RocketMQ's behaviour: RECONSUME_LATER retries the whole batch, ignoring ack_index
    retry_whole_batch_on_failure: bool = False
    #: when giving a failed message back to the broker fails, consume it again locally after
    send_back_retry_delay_ms: int = 5_000
    #: orderly listeners: pause before retrying after SUSPEND_CURRENT_QUEUE_A_MOMENT
    suspend_current_queue_time_ms: int = 1_000
    #: lease on each owned queue held on its broker, renewed every third of it; a member
    #: killed without releasing blocks its queues for at most this long
    queue_lease_ms: int = 30_000
    #: a queue handed to another member waits this long for messages being consumed, then
    #: commits what is done and lets go (later messages may then be delivered twice)
    drain_timeout_ms: int = 30_000
    #: BROADCASTING: where offsets files go (None = $ROCKETLITE_OFFSETS_DIR or
    #: ~/.rocketlite_offsets)
    offsets_dir: str | Path | None = None
    #: this member's id in the group; None = "ip@pid@n" (unique per consumer object)
    client_id: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        check_whole_numbers(self, _POSITIVE, 1)
        check_whole_numbers(self, _NON_NEGATIVE, 0)
        if self.client_id is not None and (
            not isinstance(self.client_id, str) or not self.client_id.strip()
        ):
            raise InvalidArgumentError(f"client_id={self.client_id!r} must be a non-empty string")
