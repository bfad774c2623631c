"""Offsets on the broker, for CLUSTERING consumers (RocketMQ's RemoteBrokerOffsetStore).

Queues move between the consumers of a group at every rebalance, so progress lives on the
broker that serves each queue (its ``consumerOffset.json``). The store keeps the offsets in
memory and :meth:`RemoteBrokerOffsetStore.persist_all` sends them, one
``UpdateConsumerOffsets`` per broker; :meth:`~OffsetStore.read_offset` with
``READ_FROM_STORE`` asks the broker, and a queue the group never committed reads ``-1``.

Improvements over RocketMQ:

- Commits go to the broker increase-only by default (``increase_only_on_broker``): a
  consumer that lost a queue in a rebalance and persists late cannot roll back the progress
  its successor already committed (RocketMQ overwrites, one source of duplicates).
- One broker failing does not stop the commits to the others: every broker is tried, then
  the first error is raised.
- Errors other than "never committed" are raised, not answered as -2 / -1, so a broker
  that cannot be reached is not mistaken for a queue without progress.

The store reaches the brokers through :class:`BrokerOffsets`, the two calls it needs; the
client provides them (:class:`rmq_spark.client.offsets.ClusterOffsets`, over a
``Cluster``), so this package does not import the client.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import NamedTuple, Protocol

from rmq_spark.errors import RocketliteError
from rmq_spark.names import validate_group
from rmq_spark.offsets.store import OffsetStore
from rmq_spark.structs import MessageQueue

__all__ = ["BrokerOffsets", "CommittedOffset", "RemoteBrokerOffsetStore"]

log = logging.getLogger("rmq_spark.offsets")


class CommittedOffset(NamedTuple):
    """The offset committed after an update; ``updated`` False when increase-only kept a
    higher one."""

    offset: int
    updated: bool


class BrokerOffsets(Protocol):
    """A group's committed offsets on the brokers that serve its queues.

    Both calls take queues of any brokers; an unknown broker name or an unreachable broker
    raises a :class:`~rmq_spark.errors.RocketliteError`.
    """

    def query_committed(
        self, group: str, queues: Iterable[MessageQueue]
    ) -> Mapping[MessageQueue, int]:
        """The committed offsets of ``queues``; a queue never committed is absent."""
        ...

    def commit(
        self, group: str, offsets: Mapping[MessageQueue, int], *, increase_only: bool
    ) -> Mapping[MessageQueue, CommittedOffset]:
        """Commit ``offsets`` (a lower one is kept out when ``increase_only``); returns what
        each broker now holds per queue."""
        ...


class RemoteBrokerOffsetStore(OffsetStore):
    """A group's offsets in memory, persisted to and read from ``brokers``."""

    def __init__(
        self, brokers: BrokerOffsets, group: str, *, increase_only_on_broker: bool = True
    ) -> None:
        super().__init__()
        self.brokers = brokers
        self.group = validate_group(group)
        self.increase_only_on_broker = increase_only_on_broker

    def load(self) -> None:
        """Nothing to load: offsets are read from the broker queue by queue when needed."""

    def _read_from_store(self, mq: MessageQueue) -> int | None:
        return self.brokers.query_committed(self.group, [mq]).get(mq)

    def _persist_reset(self, mq: MessageQueue, offset: int) -> None:
        self.brokers.commit(self.group, {mq: offset}, increase_only=False)

    def persist_all(
        self, mqs: Iterable[MessageQueue] | None = None
    ) -> dict[MessageQueue, CommittedOffset]:
        """Send the memory offsets of ``mqs`` (all when None): one request per broker.

        Returns what each broker now holds per queue (``updated`` False when the broker kept
        a higher offset). Every broker is tried; the first error is raised afterwards.
        """
        by_broker: dict[str, dict[MessageQueue, int]] = defaultdict(dict)
        for mq, offset in self._snapshot(mqs).items():
            by_broker[mq.broker_name][mq] = offset
        result: dict[MessageQueue, CommittedOffset] = {}
        errors: list[RocketliteError] = []
        for broker_name, offsets in sorted(by_broker.items()):
            try:
                result.update(
                    self.brokers.commit(
                        self.group, offsets, increase_only=self.increase_only_on_broker
                    )
                )
            except RocketliteError as exc:
                log.warning(
                    "cannot persist %d offsets of group %r to broker %r: %s",
                    len(offsets),
                    self.group,
                    broker_name,
                    exc,
                )
                errors.append(exc)
        if errors:
            raise errors[0]
        return result
