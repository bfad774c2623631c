"""The source's :class:`~rmq_spark.source.access.BrokerAccess` over a store directory (option
``storePath``): a backup, the disk of a dead broker, rocketlite's or Apache RocketMQ's,
read without any broker.

Planning asks it what brokers would be asked: the queues of the source's topics with their
offset ranges, a group's committed offsets (from the store's ``consumerOffset.json`` and
journal), the first offset stored at or after a time (a binary search over the store times
of the queue's records). The directory is opened read-only (:class:`StoreView`: nothing is
written, no lock is taken); one that a running broker holds is refused unless the option
``allowLiveStore`` says a snapshot of a moving store is fine. Committing offsets is refused:
the store is never written.
"""

from __future__ import annotations

from collections.abc import Mapping

from rmq_spark.client.offsets import QueueOffsets
from rmq_spark.codec import record as rec
from rmq_spark.errors import InvalidArgumentError, NotFoundError, StoreLockedError
from rmq_spark.source.discovery import BrokerSnapshot, Snapshot
from rmq_spark.source.key_lookup import MAX_PER_BROKER
from rmq_spark.source.options import SourceOptions
from rmq_spark.store.index_builder import matching_key
from rmq_spark.store.offline import StoreView
from rmq_spark.structs import MessageQueue, Permission

__all__ = ["StoreAccess", "open_store_view"]


def open_store_view(options: SourceOptions) -> StoreView:
    """The store of option ``storePath``; errors name the path and what to do."""
    assert options.store_path is not None
    try:
        return StoreView.open(options.store_path, allow_live=options.allow_live_store)
    except StoreLockedError as exc:
        raise StoreLockedError(
            f"{exc}. Reading it gives a snapshot of a store that keeps changing: set the "
            "option allowLiveStore=true if that is what you want, or read through the broker "
            "(option endpoints)"
        ) from None


class StoreAccess:
    def __init__(self, options: SourceOptions) -> None:
        self.view = open_store_view(options)
        self.broker_name = options.store_broker_name
        self.where = f"store directory {options.store_path}"

    def snapshot(self, options: SourceOptions) -> Snapshot:
        """Every queue of the topics the options read (topics that are not readable, perm
        without 4, are skipped as a broker would), with its offset range."""
        queues: dict[MessageQueue, QueueOffsets] = {}
        for topic, stored in sorted(self.view.topics().items()):
            if not options.subscribes(topic):
                continue
            if stored.perm is not None and not stored.perm & Permission.READ:
                continue
            for queue_id in self.view.queues(topic):
                low, high = self.view.queue_range(topic, queue_id)
                queues[MessageQueue(topic, self.broker_name, queue_id)] = QueueOffsets(low, high)
        broker = BrokerSnapshot(self.broker_name, self.where, queues)
        return Snapshot({self.broker_name: broker}, {})

    def committed(self, group: str, queues: list[MessageQueue]) -> dict[MessageQueue, int]:
        table = self.view.consumer_offsets().get(group, {})
        return {
            mq: table[(mq.topic, mq.queue_id)] for mq in queues if (mq.topic, mq.queue_id) in table
        }

    def offsets_at(self, timestamps: dict[MessageQueue, int]) -> dict[MessageQueue, int]:
        return {mq: self._offset_at(mq, stamp) for mq, stamp in timestamps.items()}

    def _offset_at(self, mq: MessageQueue, timestamp_ms: int) -> int:
        """The first offset stored at or after ``timestamp_ms``, else the max (RocketMQ's
        search by time, over the store times of the records)."""
        lo, hi = self.view.queue_range(mq.topic, mq.queue_id)
        while lo < hi:
            mid = (lo + hi) // 2
            if self._store_time(mq, mid) < timestamp_ms:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def _store_time(self, mq: MessageQueue, offset: int) -> int:
        found = self.view.read_records(mq.topic, mq.queue_id, offset, offset + 1, 1)
        stamp = rec.store_timestamp_in(bytes(found.buffer[: rec.STORE_TIMESTAMP_HEAD]))
        if stamp is None:
            raise NotFoundError(
                f"no record at offset {offset} of {mq.topic!r} queue {mq.queue_id} in "
                f"{self.where}; the store is damaged"
            )
        return stamp

    def commit(self, group: str, offsets: Mapping[MessageQueue, int]) -> None:
        raise InvalidArgumentError(
            f"offsets cannot be committed to {self.where}: a store directory is only read; "
            "remove the option commitOffsets"
        )

    def endpoint_of(self, broker_name: str) -> str:
        return self.where

    max_key_matches = MAX_PER_BROKER

    def offsets_by_key(self, topic: str, key: str, max_count: int) -> dict[MessageQueue, list[int]]:
        """Queue offsets of the messages the store's ``index/`` names for ``key``, each
        record checked (different keys may share a hash)."""
        found: dict[MessageQueue, list[int]] = {}
        for physical in self.view.key_offsets(topic, key, min(max_count, self.max_key_matches)):
            raw = self.view.record_at(physical)
            if raw is None:
                continue  # deleted by retention, or past a crash's cut
            record = rec.decode_record(raw, check_crc=False)
            if matching_key(record, topic, key):
                mq = MessageQueue(topic, self.broker_name, record.queue_id)
                found.setdefault(mq, []).append(record.queue_offset)
        return found

    def sql92_refusals(self, selector: str, at: Mapping[MessageQueue, int]) -> dict[str, str]:
        """None: the tasks apply a selector to every record they read from the directory."""
        return {}

    def close(self) -> None:
        self.view.close()
