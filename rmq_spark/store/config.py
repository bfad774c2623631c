"""Store configuration: one dataclass, validated once, units in the names."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from rmq_spark.codec.record import parse_host
from rmq_spark.errors import InvalidArgumentError
from rmq_spark.units import GiB, MiB

FlushMode = Literal["ASYNC", "SYNC"]


@dataclass
class StoreConfig:
    """Everything a :class:`~rmq_spark.store.MessageStore` needs to open a directory.

    >>> StoreConfig("/tmp/store", flush_mode="SYNC").commitlog_segment_bytes
    1073741824
    """

    store_dir: str | Path
    broker_name: str = "broker-a"
    #: the "ip:port" stamped into records as STOREHOST (and so into offset message ids)
    store_host: str = "127.0.0.1:10911"
    commitlog_segment_bytes: int = GiB
    consumequeue_entries_per_file: int = 300_000
    flush_mode: FlushMode = "ASYNC"
    flush_interval_ms: int = 500
    sync_flush_timeout_ms: int = 5_000
    #: how often consume queues are flushed and the checkpoint is written
    checkpoint_interval_ms: int = 1_000
    max_message_bytes: int = 4 * MiB
    #: commit-log segments whose last write is older than this are deleted
    file_reserved_ms: int = 72 * 3_600_000
    cleanup_interval_ms: int = 10_000
    #: refuse writes when the disk holding the store is fuller than this fraction
    disk_max_used_ratio: float = 0.95
    offsets_persist_interval_ms: int = 5_000
    #: start with an empty consumer-offset table when both offset files are unreadable
    force_empty_offsets: bool = False
    #: delay of each level (level 1 first): recovery rewrites schedule-topic entries with
    #: the delivery time (store time + the level's delay), as the broker wrote them
    schedule_delays_ms: tuple[int, ...] = ()
    #: keep RocketMQ's message index (``index/``: messages by KEYS and UNIQ_KEY)
    message_index: bool = True
    #: the index files' geometry: RocketMQ's maxHashSlotNum and maxIndexNum (a store's
    #: index must be opened with the sizes it was made with, by rocketlite and RocketMQ);
    #: None: the sizes recorded for the store, else RocketMQ's (5,000,000 and 20,000,000)
    index_hash_slots: int | None = None
    index_max_entries: int | None = None
    #: how many descriptors the store's files (commit-log segments, consume-queue files)
    #: may hold at once (one or two each: see rmq_spark.store.mapped_file); the least
    #: recently used close when more are needed. None: derived from the process's file
    #: limit when the store opens (see rmq_spark.store.mapped_file.open_files_limit)
    max_open_descriptors: int | None = None

    def __post_init__(self) -> None:
        self.store_dir = Path(self.store_dir)
        self.flush_mode = str(self.flush_mode).upper()  # type: ignore[assignment]
        if self.flush_mode not in ("ASYNC", "SYNC"):
            raise InvalidArgumentError(f"flush_mode {self.flush_mode!r} is not one of ASYNC, SYNC")
        parse_host(self.store_host)
        minimums = {
            "commitlog_segment_bytes": 4096,
            "consumequeue_entries_per_file": 16,
            "flush_interval_ms": 1,
            "sync_flush_timeout_ms": 1,
            "checkpoint_interval_ms": 1,
            "max_message_bytes": 1,
            "file_reserved_ms": 1,
            "cleanup_interval_ms": 1,
            "offsets_persist_interval_ms": 1,
            "index_hash_slots": 1,
            "index_max_entries": 2,
            "max_open_descriptors": 4,
        }
        optional = ("index_hash_slots", "index_max_entries", "max_open_descriptors")
        for name, minimum in minimums.items():
            value = getattr(self, name)
            if value is None and name in optional:
                continue
            if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
                raise InvalidArgumentError(
                    f"{name}={value!r} is invalid: use a whole number >= {minimum}"
                )
        if not 0 < self.disk_max_used_ratio <= 1:
            raise InvalidArgumentError(
                f"disk_max_used_ratio={self.disk_max_used_ratio!r} must be in (0, 1]"
            )

    @property
    def commitlog_dir(self) -> Path:
        return Path(self.store_dir) / "commitlog"

    @property
    def consumequeue_dir(self) -> Path:
        return Path(self.store_dir) / "consumequeue"

    @property
    def config_dir(self) -> Path:
        return Path(self.store_dir) / "config"
