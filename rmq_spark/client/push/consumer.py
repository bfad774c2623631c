"""The push consumer: a group member that pulls its share of the queues and calls a listener.

RocketMQ's DefaultMQPushConsumer on the rocketlite protocol:

- **Membership.** Heartbeats go to every broker; one watch stream per broker reports the
  group's members (and stands for this member's connection).
- **Rebalance** per topic at start, on every membership change and every
  ``rebalance_interval_ms``: the allocate strategy splits the sorted queues among the sorted
  member ids, and a changed result is logged as ``rebalance result changed. ...``.
- **Queue ownership leases (beyond RocketMQ).** A member reads a queue only while it holds
  that queue's lease on the broker (LockQueues, renewed every third of
  ``queue_lease_ms``). A member that loses a queue stops pulling it, lets the messages
  already pulled finish (up to ``drain_timeout_ms``), commits the queue's offset
  synchronously and only then releases the lease; the member that gains the queue cannot
  get the lease before that, and reads the committed offset after it. So a graceful
  membership change delivers nothing twice. The remaining duplicates: a member killed
  without releasing redelivers what it consumed after its last offset persist (at most
  ``persist_interval_ms`` of messages) once its lease expires (``queue_lease_ms``), and a
  drain that times out redelivers what was still in flight.
- **Offsets**: :class:`~rmq_spark.offsets.remote_broker.RemoteBrokerOffsetStore`
  (CLUSTERING) or :class:`~rmq_spark.offsets.local_file.LocalFileOffsetStore`
  (BROADCASTING), updated from each queue's :class:`ProcessQueue` and persisted every
  ``persist_interval_ms``, on release and on shutdown.

Threads: one pull thread (long polls run as gRPC futures), one housekeeping thread
(heartbeats, rebalance, leases, drains, persists), one watch thread per broker, one timer
thread, and the listener's pool.

This module is the facade; the parts it wires together, one job each: ``state.py`` (what
they share), ``queue_phase.py`` (a queue's phases and the rebalance and shutdown plans, pure),
``fetcher.py`` (the pull thread), ``coordinator.py`` (membership, rebalance, housekeeping),
``ownership.py`` (leases, start offsets, hand-over) and ``consume.py`` (the listener's pool).
"""

from __future__ import annotations

import itertools
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from rmq_spark.allocate import AllocateMessageQueueStrategy, get_strategy
from rmq_spark.client.cluster import Cluster
from rmq_spark.client.consumer import READ_ALL, ReadFilter
from rmq_spark.client.endpoints import Endpoints
from rmq_spark.client.groups import unregister
from rmq_spark.client.offsets import ClusterOffsets
from rmq_spark.client.push.config import MessageModel, PushConsumerConfig
from rmq_spark.client.push.consume import ConcurrentService, OrderlyService
from rmq_spark.client.push.coordinator import Coordinator
from rmq_spark.client.push.fetcher import Fetcher
from rmq_spark.client.push.ownership import Ownership
from rmq_spark.client.push.queue_phase import Phase, plan_shutdown
from rmq_spark.client.push.state import MemberState, Timers
from rmq_spark.errors import FilterNotSupportedError, InvalidArgumentError
from rmq_spark.names import retry_topic, validate_group, validate_topic
from rmq_spark.offsets.local_file import LocalFileOffsetStore
from rmq_spark.offsets.remote_broker import RemoteBrokerOffsetStore
from rmq_spark.offsets.store import OffsetStore
from rmq_spark.structs import MessageQueue

__all__ = ["PushConsumer"]

log = logging.getLogger("rmq_spark.client.push")

_instances = itertools.count(1)


def _local_ip() -> str:
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


class PushConsumer:
    """A member of a consumer group that pulls its queues and hands messages to a listener.

    >>> consumer = PushConsumer("orders-app", "127.0.0.1:10911")          # doctest: +SKIP
    >>> consumer.subscribe("orders", "TagA || TagB")                       # doctest: +SKIP
    >>> def on_messages(messages, context):                                # doctest: +SKIP
    ...     for m in messages:
    ...         handle(m.body)
    ...     return ConsumeStatus.CONSUME_SUCCESS
    >>> consumer.register_listener(on_messages)                            # doctest: +SKIP
    >>> consumer.start()                                                   # doctest: +SKIP
    >>> ...
    >>> consumer.shutdown()                                                # doctest: +SKIP

    ``strategy`` is an allocate strategy name (``avg``, ``avgByCircle``, ``consistentHash``,
    ``machineRoom``, ``config``) or an :class:`AllocateMessageQueueStrategy`. CLUSTERING
    members subscribe to their group's retry topic by themselves.
    """

    def __init__(
        self,
        group: str,
        endpoints: str | Iterable[str] | Endpoints,
        strategy: str | AllocateMessageQueueStrategy = "avg",
        message_model: MessageModel = "CLUSTERING",
        config: PushConsumerConfig | None = None,
    ) -> None:
        self.group = validate_group(group)
        if message_model not in ("CLUSTERING", "BROADCASTING"):
            raise InvalidArgumentError(
                f"message_model={message_model!r} must be 'CLUSTERING' or 'BROADCASTING'"
            )
        self.message_model: MessageModel = message_model
        if isinstance(strategy, str):
            strategy = get_strategy(strategy)
        elif not isinstance(strategy, AllocateMessageQueueStrategy):
            raise InvalidArgumentError(
                f"strategy={strategy!r} must be a strategy name such as 'avg' or an "
                "AllocateMessageQueueStrategy"
            )
        self.strategy = strategy
        self.config = config or PushConsumerConfig()
        if self.config.client_id is not None:
            self.client_id = self.config.client_id
        elif message_model == "BROADCASTING":
            # stable across restarts: the offsets file is found by it
            self.client_id = f"{_local_ip()}@DEFAULT"
        else:
            self.client_id = f"{_local_ip()}@{os.getpid()}@{next(_instances)}"
        cluster = Cluster(endpoints, self.config)
        self._listener: Callable[..., Any] | None = None
        self._orderly = False
        offsets: OffsetStore
        if message_model == "CLUSTERING":
            offsets = RemoteBrokerOffsetStore(ClusterOffsets(cluster), self.group)
        else:
            offsets = LocalFileOffsetStore(self.config.offsets_dir, self.client_id, group)
        self._member = MemberState(
            self.group, self.client_id, message_model, self.config, cluster, offsets
        )
        self._fetcher = Fetcher(self._member)
        self._ownership = Ownership(self._member, self._fetcher)
        self._coordinator = Coordinator(self._member, self._ownership, strategy)
        self._started = False
        self._threads: list[threading.Thread] = []
        self._service: ConcurrentService | OrderlyService | None = None

    # --- set-up ---------------------------------------------------------------------------

    def subscribe(self, topic: str, expression: str = "*", *, sql: str | None = None) -> None:
        """Consume ``topic``'s messages whose tag matches ``expression`` ("*" = all,
        "TagA || TagB"), or, with ``sql``, those RocketMQ's SQL92 selector picks by their
        properties (``sql="region = 'eu' AND amount > 100"``; the brokers filter, exactly).
        A malformed selector raises ``SelectorError`` here, naming the column and why.
        May be called while running; the next rebalance picks it up.

        Messages of the group's retry topic are not filtered: they are the ones this
        group's listener failed, which passed its filter when first delivered (RocketMQ
        delivers them so too)."""
        validate_topic(topic)
        read_filter = ReadFilter.of(expression, sql)
        member = self._member
        with member.lock:
            member.subscriptions[topic] = read_filter
        if self._started:
            self._coordinator.request(heartbeat=True, rebalance=True)

    def unsubscribe(self, topic: str) -> None:
        """Stop consuming ``topic`` (its queues are handed back at the next rebalance)."""
        member = self._member
        with member.lock:
            member.subscriptions.pop(topic, None)
        if self._started:
            self._coordinator.request(heartbeat=True, rebalance=True)

    def register_listener(self, listener: Callable[..., Any], *, orderly: bool = False) -> None:
        """Set the function called with each batch of messages (before :meth:`start`).

        Concurrent (default): ``listener(messages, ConsumeContext) -> ConsumeStatus``.
        Orderly: ``listener(messages, OrderlyContext) -> OrderlyStatus``, one call at a
        time per queue, in queue order.
        """
        if not callable(listener):
            raise InvalidArgumentError(f"listener {listener!r} is not callable")
        if self._started:
            raise InvalidArgumentError("register the listener before start()")
        self._listener = listener
        self._orderly = bool(orderly)

    def start(self) -> PushConsumer:
        """Join the group and start consuming. Returns self."""
        member = self._member
        if self._started:
            raise InvalidArgumentError(
                f"consumer {self.client_id} of {self.group!r} already started"
            )
        if self._listener is None:
            raise InvalidArgumentError("no listener; call register_listener(fn) before start()")
        if not member.subscriptions:
            raise InvalidArgumentError("no subscription; call subscribe(topic) before start()")
        if self.message_model == "CLUSTERING":
            retry = retry_topic(self.group)
            with member.lock:
                member.subscriptions.setdefault(retry, READ_ALL)
        self._join()
        member.offsets.load()
        service_cls = OrderlyService if self._orderly else ConcurrentService
        self._service = service_cls(member, self._listener)
        self._fetcher.service = self._service
        member.timers = Timers(f"rmq-push-timers-{self.group}")
        self._started = True
        self._spawn(self._fetcher.run, "pull")
        self._spawn(self._coordinator.housekeeping_loop, "house")
        if self.message_model == "CLUSTERING":
            for endpoint in member.cluster.endpoints:
                self._spawn(self._coordinator.watch_loop, f"watch-{endpoint}", endpoint)
        self._coordinator.request(rebalance=True)
        log.info(
            "push consumer %s of group %r started (%s, %s, strategy %s)",
            self.client_id,
            self.group,
            self.message_model,
            "orderly" if self._orderly else "concurrent",
            self.strategy.name,
        )
        return self

    def _join(self) -> None:
        """The first heartbeats (the retry topic exists once a broker saw one). A broker
        that refuses the subscriptions (a SQL92 selector on a broker that does not filter
        by properties, a subscription over its limits) fails the start, as RocketMQ's
        consumer start fails its broker check: the group is left where it was joined."""
        failed = self._coordinator.send_heartbeats()
        refused = [
            error
            for error in failed.values()
            if getattr(error, "from_broker", False)
            and isinstance(error, InvalidArgumentError | FilterNotSupportedError)
        ]
        if refused:
            unregister(self._member.cluster, self.client_id, self.group)
            raise refused[0]

    def _spawn(self, target: Callable[..., None], name: str, *args: Any) -> None:
        thread = threading.Thread(
            target=target, args=args, name=f"rmq-push-{name}-{self.group}", daemon=True
        )
        thread.start()
        self._threads.append(thread)

    # --- state ---------------------------------------------------------------------------

    def assignment(self) -> list[MessageQueue]:
        """The queues this member is consuming now (lease held, not being handed over)."""
        member = self._member
        with member.lock:
            return sorted(mq for mq, st in member.states.items() if st.phase is Phase.ACTIVE)

    def stats(self) -> dict[str, int]:
        """Counters since start (a counter that never moved is absent): pulled,
        consumed_ok, consumed_failed, sent_back, dead_lettered, send_back_failed,
        local_retries, dropped, offset_illegal, pulls_failed, flow_control (pulls put off because
        too many messages waited)."""
        return self._member.stats()

    # --- shutdown ------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Leave the group cleanly: stop pulling, let in-flight messages finish (up to
        ``drain_timeout_ms``), commit every offset, release the leases. Idempotent."""
        member = self._member
        if member.stopping.is_set():
            return
        if not self._started:
            member.stopping.set()
            member.cluster.close()
            return
        if threading.current_thread().name.startswith("rmq-consume-"):
            # called by the listener: waiting here for in-flight messages would wait for
            # this very call, so the shutdown runs on its own thread
            log.info("group %r: shutdown() called from the listener; shutting down in the "
                     "background", self.group)  # fmt: skip
            threading.Thread(target=self.shutdown, name="rmq-push-shutdown").start()
            return
        member.stopping.set()
        member.wake.set()
        self._fetcher.stop()
        if self.message_model == "CLUSTERING":
            # before the watch streams close: a broker takes a member whose last stream
            # closed without an unregister for crashed, and ends its leases a second later
            unregister(member.cluster, self.client_id, self.group)
        self._coordinator.cancel_watches()
        for thread in self._threads:
            thread.join(10)
        with member.lock:
            plan = plan_shutdown(member.phases(), frozenset(member.pending))
            member.pending -= plan.pending_drop
            to_drain = [member.states[mq] for mq in sorted(plan.to_drain)]
        member.unlock_quietly(plan.pending_drop)  # leases granted to queues not started yet
        now = time.monotonic()
        for st in to_drain:
            self._ownership.drain_for_shutdown(st, now)
        next_renew = now + self.config.queue_lease_ms / 3000
        while member.draining():
            now = time.monotonic()
            if now >= next_renew:
                self._ownership.renew_leases()
                next_renew = now + self.config.queue_lease_ms / 3000
            self._ownership.finish_drains(now)
            time.sleep(0.02)
        member.pool_closed = True
        if member.timers is not None:
            member.timers.stop()
        if self._service is not None:
            self._service.shutdown()
        member.cluster.close()
        log.info("push consumer %s of group %r shut down", self.client_id, self.group)

    def __enter__(self) -> PushConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
