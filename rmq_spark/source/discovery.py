"""What the brokers hold for the source's topics right now: a :class:`Snapshot`.

Every endpoint is probed in parallel with three small calls: ``GetBrokerInfo`` (its name and
permission), ``ListTopics`` (the topics and their read queue counts, so new topics matching
``topicPattern`` and new queues are seen at once) and one ``QueryOffsets`` for the queues the
source reads (min and max offset each). A trigger therefore costs three round trips per
broker however many topics it reads.

An endpoint that does not answer, after the client's retries, is recorded in
``Snapshot.failures``: the caller decides whether that is fatal (planning a batch query,
fixing a query's start) or only means "no news from that broker this trigger" (a running
stream must survive a broker restart).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from rmq_spark.client.cluster import Cluster
from rmq_spark.client.connection import ClientConfig, Connection
from rmq_spark.client.offsets import QueueOffsets, query_queue_offsets
from rmq_spark.errors import InvalidArgumentError, RocketliteError, UnavailableError
from rmq_spark.offsets.spark import Offsets
from rmq_spark.source.options import SourceOptions
from rmq_spark.source.positions import starting_offsets, timestamps_needed
from rmq_spark.spark_options import connect_options
from rmq_spark.structs import MessageQueue, Permission
from rmq_spark.wire.proto_gen.rocketlite.v1 import admin_pb2, messaging_pb2
from rmq_spark.wire.v1 import mq_to_pb

log = logging.getLogger("rmq_spark.source")

__all__ = [
    "BrokerSnapshot",
    "Snapshot",
    "client_config",
    "describe_queues",
    "offsets_at",
    "resolve_start",
    "take_snapshot",
]


def client_config(options: SourceOptions, request_timeout_ms: int | None = None) -> ClientConfig:
    """The client settings of the source (see :func:`connect_options.client_config`)."""
    return connect_options.client_config(
        max_retries=options.max_retries,
        retry_backoff_ms=options.retry_backoff_ms,
        request_timeout_ms=request_timeout_ms or ClientConfig.request_timeout_ms,
        access_key=options.access_key,
        secret_key=options.secret_key,
        **options.tls_settings(),
    )


@dataclass(frozen=True)
class BrokerSnapshot:
    """One broker's readable queues of the source's topics, with their offset ranges."""

    broker_name: str
    endpoint: str
    queues: dict[MessageQueue, QueueOffsets]
    #: which replica of the group answered (0: the master; else a slave, which may be
    #: behind its master: see :attr:`Snapshot.from_slave`)
    broker_id: int = 0
    #: broker id -> address of every replica of the group (nameServer only)
    replicas: dict[int, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Snapshot:
    """Every answering broker by name, and the error of every endpoint that did not answer."""

    brokers: dict[str, BrokerSnapshot] = field(default_factory=dict)
    failures: dict[str, RocketliteError] = field(default_factory=dict)

    @property
    def queues(self) -> dict[MessageQueue, QueueOffsets]:
        merged: dict[MessageQueue, QueueOffsets] = {}
        for broker in self.brokers.values():
            merged.update(broker.queues)
        return dict(sorted(merged.items()))

    @property
    def endpoints(self) -> dict[str, str]:
        """Broker name -> the endpoint that answered for it."""
        return {name: broker.endpoint for name, broker in self.brokers.items()}

    @property
    def replicas(self) -> dict[str, dict[int, str]]:
        """Broker name -> broker id -> address, where the route named replicas."""
        return {name: b.replicas for name, b in self.brokers.items() if b.replicas}

    def answered(self, broker_name: str) -> bool:
        """True when this broker answered, so its queues' absence is real."""
        return broker_name in self.brokers

    def from_slave(self, broker_name: str) -> bool:
        """True when a slave answered for this broker group: its queues may end short of
        where the master's end, which is neither data loss nor a re-created queue."""
        broker = self.brokers.get(broker_name)
        return broker is not None and broker.broker_id != 0

    def describe_failures(self) -> str:
        return "; ".join(f"{ep}: {error}" for ep, error in sorted(self.failures.items()))

    def require_complete(self, what: str) -> None:
        """Raise UnavailableError naming the silent endpoints if any endpoint failed."""
        if self.failures:
            raise UnavailableError(
                f"cannot {what}: {len(self.failures)} of the source's brokers did not answer "
                f"({self.describe_failures()}); check that every broker (option endpoints) "
                "or a replica of every broker group (option nameServer) is running, or "
                "raise maxRetries / retryBackoffMs"
            )


def describe_queues(queues: list[MessageQueue]) -> str:
    """Queues as messages name them, by topic: "queues 0, 1, 3 of topic 'T'".

    >>> describe_queues([MessageQueue("T", "b", 1), MessageQueue("T", "b", 0)])
    "queues 0, 1 of topic 'T'"
    """
    by_topic: dict[str, list[int]] = {}
    for mq in queues:
        by_topic.setdefault(mq.topic, []).append(mq.queue_id)
    return "; ".join(
        f"queues {', '.join(map(str, sorted(ids)))} of topic {topic!r}"
        for topic, ids in sorted(by_topic.items())
    )


def take_snapshot(cluster: Cluster, options: SourceOptions) -> Snapshot:
    """Probe every endpoint in parallel (see the module doc)."""
    answers = cluster.fan_out(lambda conn: _probe(conn, options))
    brokers: dict[str, BrokerSnapshot] = {}
    failures: dict[str, RocketliteError] = {}
    for endpoint, answer in sorted(answers.items()):
        if isinstance(answer, RocketliteError):
            failures[endpoint] = answer
            continue
        other = brokers.get(answer.broker_name)
        if other is not None:
            raise InvalidArgumentError(
                f"endpoints {other.endpoint} and {endpoint} both report broker name "
                f"{answer.broker_name!r}; every broker needs its own name (option endpoints)"
            )
        cluster.note_broker(answer.broker_name, endpoint)
        brokers[answer.broker_name] = answer
    for endpoint, error in failures.items():
        log.warning("broker %s did not answer: %s", endpoint, error)
    return Snapshot(brokers, failures)


def _probe(conn: Connection, options: SourceOptions) -> BrokerSnapshot:
    info = conn.call(conn.admin.GetBrokerInfo, admin_pb2.GetBrokerInfoRequest())
    listing = conn.call(
        conn.admin.ListTopics, admin_pb2.ListTopicsRequest(include_system_topics=True)
    )
    name = info.broker_name
    readable_broker = bool(info.broker_perm & Permission.READ)
    wanted: list[MessageQueue] = []
    for config in listing.topics:
        if readable_broker and config.perm & Permission.READ and options.subscribes(config.topic):
            wanted += [MessageQueue(config.topic, name, i) for i in range(config.read_queue_nums)]
    return BrokerSnapshot(name, conn.endpoint, _query_offsets(conn, wanted))


def _query_offsets(
    conn: Connection, queues: list[MessageQueue]
) -> dict[MessageQueue, QueueOffsets]:
    if not queues:
        return {}
    request = messaging_pb2.QueryOffsetsRequest(
        queries=[messaging_pb2.QueueOffsetsQuery(queue=mq_to_pb(mq)) for mq in queues]
    )
    response = conn.call(conn.messaging.QueryOffsets, request)
    return {
        mq: QueueOffsets(answer.min_offset, answer.max_offset)
        for mq, answer in zip(queues, response.offsets, strict=True)
    }


def offsets_at(cluster: Cluster, timestamps: dict[MessageQueue, int]) -> dict[MessageQueue, int]:
    """The first offset stored at or after each queue's timestamp (broker's clock), or the
    queue's max offset when every message is older: RocketMQ's search by timestamp."""
    by_time: dict[int, list[MessageQueue]] = {}
    for mq, stamp in timestamps.items():
        by_time.setdefault(stamp, []).append(mq)
    found: dict[MessageQueue, int] = {}
    for stamp, queues in sorted(by_time.items()):
        for mq, answer in query_queue_offsets(cluster, queues, stamp).items():
            stamped = answer.timestamp_offset
            found[mq] = answer.max_offset if stamped is None else stamped
    return found


class StartLookups(Protocol):
    """What finding a query's start asks the brokers, as a
    :class:`~rmq_spark.source.access.BrokerAccess` answers it."""

    def committed(self, group: str, queues: list[MessageQueue]) -> dict[MessageQueue, int]: ...

    def offsets_at(self, timestamps: dict[MessageQueue, int]) -> dict[MessageQueue, int]: ...


def resolve_start(
    access: StartLookups, options: SourceOptions, queues: Mapping[MessageQueue, QueueOffsets]
) -> Offsets:
    """The starting offsets the options ask for, fetching the group's committed offsets and
    searching by time where needed (see :func:`~rmq_spark.source.positions.starting_offsets`).
    """
    position = options.starting
    committed: dict[MessageQueue, int] = {}
    if position.kind == "group" and queues:
        assert options.group is not None
        committed = access.committed(options.group, list(queues))
    needed = timestamps_needed(position, queues, committed)
    at_time = access.offsets_at(needed) if needed else {}
    return starting_offsets(position, queues, committed=committed, at_time=at_time)
