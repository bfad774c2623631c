"""The name server's route table, as RocketMQ's RouteInfoManager keeps it: pure, no I/O.

Four tables, kept together by :class:`RouteTable`:

- topic -> broker name -> its queue data (read and write queue counts, perm, sys flag);
- broker name -> its cluster and addresses by broker id (0 is the master);
- cluster -> broker names;
- broker address -> when it last registered, the DataVersion of its topics, the connection
  it registered on, its HA address (the live-broker table).

A broker registers every 30 s with its whole topic table. A master's topics replace what the
table held for its broker name when their DataVersion moved (or on its first registration);
topics it no longer has leave the route then. A slave's registration only keeps its address
live (a broker group's topics are its master's). A broker that unregisters, that has not
registered for :data:`EXPIRY_MS`, or whose connection closed, leaves: its address goes, and
when it was the last address of its broker name, the name's queue data goes with it.

A registration may be *pinned*: the name server's own broker, whose topics it reads
itself, never expires, and no other broker may take its name and id.

Times are milliseconds given by the caller; the caller serialises calls (the event loop).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field

from rmq_spark.errors import InvalidArgumentError

#: RocketMQ's BROKER_CHANNEL_EXPIRED_TIME: a broker silent this long leaves the routes
EXPIRY_MS = 120_000
#: MixAll.MASTER_ID
MASTER_ID = 0


@dataclass(frozen=True)
class QueueData:
    """One broker name's share of a topic."""

    broker_name: str
    read_queues: int
    write_queues: int
    perm: int
    sys_flag: int = 0


@dataclass(frozen=True)
class TopicEntry:
    """One topic of a broker's registration."""

    topic: str
    read_queues: int
    write_queues: int
    perm: int
    sys_flag: int = 0


@dataclass(frozen=True)
class Registration:
    """What a REGISTER_BROKER says. ``topics`` is None when it carried no body (the
    broker's topics stay as they were); ``version`` is its DataVersion."""

    cluster: str
    broker_name: str
    broker_id: int
    address: str
    ha_address: str = ""
    version: tuple[int, int] = (0, 0)
    topics: tuple[TopicEntry, ...] | None = None


@dataclass(frozen=True)
class BrokerData:
    cluster: str
    broker_name: str
    #: broker id -> address (0 is the master)
    addresses: dict[int, str]


@dataclass(frozen=True)
class TopicRoute:
    queues: tuple[QueueData, ...]
    brokers: tuple[BrokerData, ...]


@dataclass(frozen=True)
class Registered:
    """The answer to a registration: a slave learns its master's address and HA address."""

    master_address: str | None = None
    ha_address: str | None = None
    #: the address that held this broker name and id until now, while it was still live
    #: (two brokers configured alike take turns; the name server says so)
    replaced: str | None = None


@dataclass
class _Broker:
    cluster: str
    addresses: dict[int, str] = field(default_factory=dict)


@dataclass
class _Live:
    last_ms: int
    version: tuple[int, int]
    channel: Hashable | None
    ha_address: str
    pinned: bool


class RouteTable:
    def __init__(self, expiry_ms: int = EXPIRY_MS) -> None:
        self.expiry_ms = expiry_ms
        self._topics: dict[str, dict[str, QueueData]] = {}
        self._brokers: dict[str, _Broker] = {}
        self._clusters: dict[str, set[str]] = {}
        self._live: dict[str, _Live] = {}

    # -- changes ------------------------------------------------------------------------------

    def register(
        self,
        registration: Registration,
        now_ms: int,
        *,
        channel: Hashable | None = None,
        pinned: bool = False,
    ) -> Registered:
        """Take a broker's registration (see the module doc). InvalidArgumentError when it
        claims the broker name and id of a pinned broker at another address."""
        reg = registration
        broker = self._brokers.get(reg.broker_name)
        held = None if broker is None else broker.addresses.get(reg.broker_id)
        if held is not None and held != reg.address and self._is_pinned(held):
            raise InvalidArgumentError(
                f"broker {reg.broker_name!r} id {reg.broker_id} is this name server's own "
                f"broker at {held}; {reg.address} must register under another --name or id"
            )
        self._clusters.setdefault(reg.cluster, set()).add(reg.broker_name)
        first = broker is None
        if broker is None:
            broker = self._brokers[reg.broker_name] = _Broker(reg.cluster)
        elif broker.cluster != reg.cluster:
            # the broker group moved to another cluster: it leaves the old one
            self._leave_cluster(broker.cluster, reg.broker_name)
            broker.cluster = reg.cluster
        # one address has one id: a slave promoted to master drops its old id first
        for broker_id in [i for i, a in broker.addresses.items() if a == reg.address]:
            if broker_id != reg.broker_id:
                del broker.addresses[broker_id]
        old = broker.addresses.get(reg.broker_id)
        broker.addresses[reg.broker_id] = reg.address
        replaced = None
        if old is not None and old != reg.address:
            # the id moved to a new address: the old one is gone
            replaced = old if self._live.pop(old, None) is not None else None
        first = first or old is None
        previous = self._live.get(reg.address)
        changed = previous is None or previous.version != reg.version
        # the pinned broker registering with itself (its own address among its name
        # servers) stays pinned
        pinned = pinned or (previous is not None and previous.pinned)
        if reg.broker_id == MASTER_ID and reg.topics is not None and (changed or first):
            self._replace_topics(reg.broker_name, reg.topics)
        self._live[reg.address] = _Live(now_ms, reg.version, channel, reg.ha_address, pinned)
        if reg.broker_id != MASTER_ID:
            master = broker.addresses.get(MASTER_ID)
            live = None if master is None else self._live.get(master)
            if live is not None:
                return Registered(master, live.ha_address, replaced)
        return Registered(replaced=replaced)

    def unregister(self, cluster: str, broker_name: str, broker_id: int, address: str) -> bool:
        """A broker leaving cleanly; False when the table did not hold it. The pinned
        broker does not leave."""
        if self._is_pinned(address):
            return False
        known = self._live.pop(address, None) is not None
        broker = self._brokers.get(broker_name)
        if broker is not None and broker.addresses.get(broker_id) == address:
            del broker.addresses[broker_id]
            known = True
            if not broker.addresses:
                self._forget_broker(broker_name)
        return known

    def expire(self, now_ms: int) -> list[str]:
        """Drop the brokers that have not registered for ``expiry_ms``; their addresses."""
        gone = [
            address
            for address, live in self._live.items()
            if not live.pinned and live.last_ms + self.expiry_ms < now_ms
        ]
        for address in gone:
            self._drop_address(address)
        return gone

    def channel_closed(self, channel: Hashable | None) -> list[str]:
        """Drop the brokers that registered on ``channel`` (their connection closed, as when
        the process died); their addresses."""
        if channel is None:
            return []
        gone = [a for a, live in self._live.items() if live.channel is channel]
        for address in gone:
            self._drop_address(address)
        return gone

    def delete_topic(self, topic: str, cluster: str | None = None) -> None:
        """Forget ``topic`` (on the brokers of ``cluster`` only, when given)."""
        queues = self._topics.get(topic)
        if queues is None:
            return
        if cluster is None:
            del self._topics[topic]
            return
        for name in self._clusters.get(cluster, ()):
            queues.pop(name, None)
        if not queues:
            del self._topics[topic]

    # -- questions ----------------------------------------------------------------------------

    def route(self, topic: str) -> TopicRoute | None:
        """The topic's queue data and the brokers holding it; None when no broker does."""
        queues = self._topics.get(topic)
        if not queues:
            return None
        brokers = tuple(self._broker_data(name) for name in sorted(queues) if name in self._brokers)
        if not brokers:
            return None
        return TopicRoute(tuple(queues[name] for name in sorted(queues)), brokers)

    def brokers(self) -> list[BrokerData]:
        """Every broker group, by name (ClusterInfo's brokerAddrTable)."""
        return [self._broker_data(name) for name in sorted(self._brokers)]

    def clusters(self) -> dict[str, list[str]]:
        """Broker names by cluster (ClusterInfo's clusterAddrTable)."""
        return {cluster: sorted(names) for cluster, names in sorted(self._clusters.items())}

    def topics(self) -> list[str]:
        return sorted(self._topics)

    def topics_of_cluster(self, cluster: str) -> list[str]:
        names = self._clusters.get(cluster, set())
        return sorted(t for t, queues in self._topics.items() if names.intersection(queues))

    def system_topics(self) -> list[str]:
        """RocketMQ's system topic list: every cluster name and broker name."""
        found: set[str] = set()
        for cluster, names in self._clusters.items():
            found.add(cluster)
            found.update(names)
        return sorted(found)

    def live_addresses(self) -> list[str]:
        return sorted(self._live)

    # -- inside -------------------------------------------------------------------------------

    def _is_pinned(self, address: str) -> bool:
        live = self._live.get(address)
        return live is not None and live.pinned

    def _broker_data(self, name: str) -> BrokerData:
        broker = self._brokers[name]
        return BrokerData(broker.cluster, name, dict(sorted(broker.addresses.items())))

    def _replace_topics(self, broker_name: str, entries: Iterable[TopicEntry]) -> None:
        kept: set[str] = set()
        for entry in entries:
            kept.add(entry.topic)
            self._topics.setdefault(entry.topic, {})[broker_name] = QueueData(
                broker_name, entry.read_queues, entry.write_queues, entry.perm, entry.sys_flag
            )
        for topic in [t for t, queues in self._topics.items() if broker_name in queues]:
            if topic not in kept:
                self._drop_queue_data(topic, broker_name)

    def _drop_queue_data(self, topic: str, broker_name: str) -> None:
        queues = self._topics[topic]
        queues.pop(broker_name, None)
        if not queues:
            del self._topics[topic]

    def _drop_address(self, address: str) -> None:
        self._live.pop(address, None)
        for name, broker in list(self._brokers.items()):
            ids = [i for i, a in broker.addresses.items() if a == address]
            if not ids:
                continue
            for broker_id in ids:
                del broker.addresses[broker_id]
            if not broker.addresses:
                self._forget_broker(name)
            return

    def _forget_broker(self, name: str) -> None:
        broker = self._brokers.pop(name)
        self._leave_cluster(broker.cluster, name)
        for topic in [t for t, queues in self._topics.items() if name in queues]:
            self._drop_queue_data(topic, name)

    def _leave_cluster(self, cluster: str, name: str) -> None:
        names = self._clusters.get(cluster)
        if names is not None:
            names.discard(name)
            if not names:
                del self._clusters[cluster]
