"""The producer's settings."""

from __future__ import annotations

from dataclasses import dataclass

from rmq_spark.client.connection import ClientConfig
from rmq_spark.errors import InvalidArgumentError
from rmq_spark.units import KiB, MiB

__all__ = ["ProducerConfig"]


@dataclass
class ProducerConfig(ClientConfig):
    """Producer settings (plus the shared :class:`ClientConfig` ones)."""

    #: extra attempts of a round-robin send on other brokers (RocketMQ's default is 2)
    retry_times_when_send_failed: int = 2
    #: how long a broker that was unreachable or too slow to answer is left out of round
    #: robin (after a retriable error)
    unavailable_broker_backoff_ms: int = 5_000
    #: largest encoded batch in one SendMessages request; bigger batches are split
    max_batch_bytes: int = 63 * MiB
    #: threads running send_async calls
    async_workers: int = 4
    #: sends of at least this many messages go as columns (MessageColumns), which costs
    #: both sides far less per message; smaller ones as one Message each; 0 = never columns
    columns_min_batch: int = 16
    #: hold single sends for a moment and send them together (RocketMQ's autoBatch); see
    #: :mod:`rmq_spark.client.auto_batch`
    auto_batch: bool = False
    #: the longest a held message waits for others (RocketMQ's batchMaxDelayMs), 1..30,000
    batch_max_delay_ms: int = 10
    #: held bytes for one topic that send its batch at once (batchMaxBytes), 1 B..2 MiB
    batch_max_bytes: int = 32 * KiB
    #: held and in-flight bytes above which sends go on their own (totalBatchMaxBytes)
    total_batch_max_bytes: int = 32 * MiB

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.retry_times_when_send_failed < 0:
            raise InvalidArgumentError(
                f"retry_times_when_send_failed={self.retry_times_when_send_failed!r} must be >= 0"
            )
        if not 1 <= self.max_batch_bytes <= self.max_grpc_message_bytes - 64 * 1024:
            raise InvalidArgumentError(
                f"max_batch_bytes={self.max_batch_bytes!r} must be between 1 and "
                f"max_grpc_message_bytes - 64 KiB ({self.max_grpc_message_bytes - 64 * 1024})"
            )
        if self.columns_min_batch < 0:
            raise InvalidArgumentError(
                f"columns_min_batch={self.columns_min_batch!r} must be >= 0 (0 = never)"
            )
        if not 1 <= self.batch_max_delay_ms <= 30_000:
            raise InvalidArgumentError(
                f"batch_max_delay_ms={self.batch_max_delay_ms!r} must be between 1 and 30000 "
                "(how long a held message may wait for others, in ms)"
            )
        if not 1 <= self.batch_max_bytes <= 2 * MiB:
            raise InvalidArgumentError(
                f"batch_max_bytes={self.batch_max_bytes!r} must be between 1 and {2 * MiB} "
                "(2 MiB: the held bytes of one topic that send its batch at once)"
            )
        if self.total_batch_max_bytes < self.batch_max_bytes:
            raise InvalidArgumentError(
                f"total_batch_max_bytes={self.total_batch_max_bytes!r} must be at least "
                f"batch_max_bytes ({self.batch_max_bytes})"
            )
        if self.async_workers < 1 or self.unavailable_broker_backoff_ms < 0:
            raise InvalidArgumentError(
                f"async_workers={self.async_workers!r} must be >= 1 and "
                f"unavailable_broker_backoff_ms={self.unavailable_broker_backoff_ms!r} >= 0"
            )
