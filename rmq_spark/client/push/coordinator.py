"""Group membership and rebalance of a push consumer, and its housekeeping thread.

- **Membership.** Heartbeats go to every broker; one watch stream per broker reports the
  group's members (and stands for this member's connection).
- **Rebalance** per topic at start, on every membership change and every
  ``rebalance_interval_ms``: the allocate strategy splits the sorted queues among the sorted
  member ids, and a changed result is logged as ``rebalance result changed. ...``. What it
  means for the owned and pending queues is decided by the pure plans of
  :mod:`~rmq_spark.client.push.queue_phase`; :class:`Ownership` carries them out.
- **Housekeeping**: heartbeats, rebalances, taking and renewing queue leases, finishing
  hand-overs and persisting offsets, on one thread woken by :attr:`MemberState.wake`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable

from rmq_spark.allocate import AllocateMessageQueueStrategy
from rmq_spark.client.groups import (
    ConsumerWatch,
    HeartbeatInfo,
    Subscription,
    consumer_list,
    heartbeat,
)
from rmq_spark.client.push.ownership import Ownership
from rmq_spark.client.push.queue_phase import plan_topic, plan_unsubscribed
from rmq_spark.client.push.state import MemberState
from rmq_spark.errors import RocketliteError
from rmq_spark.retry import backoff_delays

__all__ = ["Coordinator"]

log = logging.getLogger("rmq_spark.client.push")


class Coordinator:
    """Keeps ``member`` in its group and its share of the queues up to date."""

    def __init__(
        self, member: MemberState, ownership: Ownership, strategy: AllocateMessageQueueStrategy
    ) -> None:
        self.member = member
        self.ownership = ownership
        self.strategy = strategy
        self.rebalance_requested = threading.Event()
        self.heartbeat_requested = threading.Event()
        self.renew_requested = threading.Event()
        self.watches: dict[str, ConsumerWatch] = {}
        self._members: dict[str, list[str]] = {}
        self._heartbeat_interval_s = 10.0

    def request(
        self, *, heartbeat: bool = False, rebalance: bool = False, renew: bool = False
    ) -> None:
        """Ask the housekeeping thread for a heartbeat, a rebalance and/or a renewal of the
        queue leases now."""
        if heartbeat:
            self.heartbeat_requested.set()
        if renew:
            self.renew_requested.set()
        if rebalance:
            self.rebalance_requested.set()
        self.member.wake.set()

    # --- membership ----------------------------------------------------------------------

    def _heartbeat_info(self) -> HeartbeatInfo:
        member = self.member
        with member.lock:
            subs = tuple(
                Subscription(topic, f.expression, f.expression_type)
                for topic, f in sorted(member.subscriptions.items())
            )
        stamp = member.config.consume_timestamp_ms or 0
        return HeartbeatInfo(
            member.client_id,
            member.group,
            subs,
            member.message_model,
            True,
            member.config.consume_from,
            stamp,
        )

    def send_heartbeats(self) -> dict[str, RocketliteError]:
        """A heartbeat to every broker; the errors of those that failed, by endpoint
        (each logged)."""
        member = self.member
        config = member.config
        info = self._heartbeat_info()
        answers = member.cluster.fan_out(lambda conn: heartbeat(conn, info))
        failed = {}
        for endpoint, answer in answers.items():
            if isinstance(answer, RocketliteError):
                log.warning("group %r: heartbeat to %s failed: %s", member.group, endpoint, answer)
                failed[endpoint] = answer
            elif config.heartbeat_interval_ms == 0 and answer.session_timeout_ms > 0:
                self._heartbeat_interval_s = answer.session_timeout_ms / 3000
        if config.heartbeat_interval_ms:
            self._heartbeat_interval_s = config.heartbeat_interval_ms / 1000
        return failed

    def watch_loop(self, endpoint: str) -> None:
        """One broker's membership stream, reopened when it ends (a watch thread)."""
        member = self.member
        conn = member.cluster.connection(endpoint)
        # the first wait stays under the broker's 1 s reconnect grace: a stream reopened
        # within it keeps this member's leases
        waits = backoff_delays(0.5, 5.0)
        while not member.stopping.is_set():
            watch = ConsumerWatch(conn, member.group, member.client_id)
            self.watches[endpoint] = watch
            try:
                for ids, _version in watch:
                    waits = backoff_delays(0.5, 5.0)
                    if self._members.get(endpoint) != ids:
                        self._members[endpoint] = ids
                        self.request(rebalance=True)
            except RocketliteError as exc:
                if not member.stopping.is_set():
                    log.info(
                        "group %r: membership stream of %s ended: %s", member.group, endpoint, exc
                    )
            if member.stopping.wait(next(waits)):
                return
            # The broker may have dropped us with the stream, and ended our leases if it
            # stayed closed for a second: heartbeat, and renew at once, so queues another
            # member took meanwhile stop here now rather than at the next renewal.
            self.request(heartbeat=True, renew=True)

    def cancel_watches(self) -> None:
        for watch in list(self.watches.values()):
            watch.cancel()

    # --- housekeeping ---------------------------------------------------------------------

    def housekeeping_loop(self) -> None:
        member = self.member
        config = member.config
        ownership = self.ownership
        now = time.monotonic()
        next_heartbeat = now + self._heartbeat_interval_s
        next_rebalance = now
        next_persist = now + config.persist_interval_ms / 1000
        next_renew = now + config.queue_lease_ms / 3000
        next_acquire = now
        while not member.stopping.is_set():
            now = time.monotonic()
            try:
                if self.heartbeat_requested.is_set() or now >= next_heartbeat:
                    self.heartbeat_requested.clear()
                    self.send_heartbeats()
                    next_heartbeat = now + self._heartbeat_interval_s
                if self.rebalance_requested.is_set() or now >= next_rebalance:
                    self.rebalance_requested.clear()
                    self._rebalance()
                    next_rebalance = now + config.rebalance_interval_ms / 1000
                    next_acquire = now
                if member.pending and now >= next_acquire:
                    ownership.acquire()
                    next_acquire = now + 0.25
                if self.renew_requested.is_set() or now >= next_renew:
                    self.renew_requested.clear()
                    ownership.renew_leases()
                    next_renew = now + config.queue_lease_ms / 3000
                ownership.finish_drains(time.monotonic())
                if now >= next_persist:
                    ownership.persist_all()
                    next_persist = now + config.persist_interval_ms / 1000
            except Exception:
                log.exception("group %r: housekeeping failed; trying again", member.group)
            member.wake.wait(0.1 if member.pending or member.draining() else 1.0)
            member.wake.clear()

    # --- rebalance -----------------------------------------------------------------------

    def _rebalance(self) -> None:
        member = self.member
        with member.lock:
            topics = sorted(member.subscriptions)
        members: dict[str, list[str]] = {}  # broker -> member ids, asked once per rebalance
        for topic in topics:
            try:
                self._rebalance_topic(topic, members)
            except RocketliteError as exc:
                log.warning("group %r: rebalance of topic %r failed: %s", member.group, topic, exc)
        with member.lock:  # queues of topics no longer subscribed
            plan = plan_unsubscribed(
                frozenset(member.subscriptions), member.phases(), frozenset(member.pending)
            )
            self.ownership.carry_out(plan)
            for topic in list(member.allocation):
                if topic not in member.subscriptions:
                    del member.allocation[topic]
        member.unlock_quietly(plan.pending_drop)

    def _find_cid_all(
        self, brokers: Iterable[str], members: dict[str, list[str]]
    ) -> list[str] | None:
        """The group's member ids from the first broker of ``brokers`` that answers
        (``members`` caches the answers of this rebalance)."""
        member = self.member
        cluster = member.cluster
        for broker in sorted(brokers):
            if broker in members:
                return members[broker]
            try:
                conn = cluster.connection(cluster.endpoint_of(broker))
                ids, _ = consumer_list(conn, member.group)
            except RocketliteError as exc:
                log.info("group %r: no member list from broker %r: %s", member.group, broker, exc)
                continue
            if member.client_id not in ids:  # our heartbeat has not reached it yet
                self.send_heartbeats()
                ids, _ = consumer_list(conn, member.group)
            members[broker] = ids
            return ids
        return None

    def _rebalance_topic(self, topic: str, members: dict[str, list[str]]) -> None:
        member = self.member
        route = member.cluster.route(topic)
        mq_all = sorted(route.readable)
        if member.message_model == "BROADCASTING":
            cid_all = [member.client_id]
            allocated = frozenset(mq_all)
        else:
            found = self._find_cid_all(route.brokers, members)
            if found is None:
                log.warning(
                    "group %r: no broker of topic %r answered; keeping its queues",
                    member.group,
                    topic,
                )
                return
            cid_all = found
            if not mq_all or not cid_all:
                allocated = frozenset()
            else:
                allocated = frozenset(
                    self.strategy.allocate(member.group, member.client_id, mq_all, cid_all)
                )
        with member.lock:
            if member.allocation.get(topic) != allocated:
                log.info(
                    "rebalance result changed. allocateMessageQueueStrategyName=%s, group=%s, "
                    "topic=%s, clientId=%s, mqAllSize=%d, cidAllSize=%d, rebalanceResultSize=%d, "
                    "rebalanceResultSet=%s",
                    self.strategy.name,
                    member.group,
                    topic,
                    member.client_id,
                    len(mq_all),
                    len(cid_all),
                    len(allocated),
                    sorted(allocated),
                )
                member.allocation[topic] = allocated
            plan = plan_topic(
                topic,
                allocated,
                member.phases(),
                frozenset(member.pending),
                member.stopping.is_set(),
            )
            self.ownership.carry_out(plan)
        # a lease may have been granted while it waited
        member.unlock_quietly(plan.pending_drop)
        if member.pending:
            self.ownership.acquire()
