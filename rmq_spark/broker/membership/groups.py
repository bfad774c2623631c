"""Consumer-group membership: who is in each group, and who is told when that changes.

The broker side of RocketMQ's ConsumerManager. Members join and stay by heartbeat and leave
by unregistering, by going silent for ``session_timeout_ms``, or when their watch stream
ends (the stream stands for the client's connection, as a channel does in RocketMQ). Every
change gives the group a new, larger membership version and sends each watcher of the group
one event with the full sorted member list (rebalance's ``cidAll``), so watchers never need
a follow-up query.

A member that leaves without unregistering (its last stream closed and was not reopened
within ``reconnect_grace_ms``, or its session timed out with no stream open) is reported to
``on_departure`` before the group is told, so the broker can end its queue leases first and
the remaining members can lock the freed queues as soon as they rebalance.

Versions come from one counter shared by all groups, so a group's version never goes back,
even when an empty group is forgotten and later comes back.

Each member's subscriptions are kept read once (:mod:`.filters`: the tags' hash codes, a
compiled SQL92 selector, or why it cannot be used), whichever protocol its heartbeat came
by, and :meth:`ConsumerRegistry.group_filter` says what the group reads a topic with when a
pull does not carry its own subscription: the live members' newest subscription. It goes
with the members: a group whose last member left filters by nothing.

>>> registry = ConsumerRegistry(session_timeout_ms=120_000, sweep_interval_ms=0)
>>> registry.heartbeat("10.0.0.2@7", "GroupA", [("TopicA", "*")])
True
>>> registry.members("GroupA")
['10.0.0.2@7']
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import functools
import logging
import threading
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from rmq_spark.broker.membership import filters
from rmq_spark.broker.membership.filters import (
    TAG,
    Subscribed,
    SubscriptionFilter,
    SubscriptionTooLongError,
    TopicFilter,
    check_selectors,
    labelled,
    newest,
)
from rmq_spark.clock import monotonic_ms, now_ms
from rmq_spark.errors import InvalidArgumentError, ResourceExhaustedError, RocketliteError
from rmq_spark.log_limit import LogLimiter

log = logging.getLogger("rmq_spark.broker")

MessageModel = Literal["CLUSTERING", "BROADCASTING"]
ConsumeType = Literal["PULL", "PUSH"]
ConsumeFromWhere = Literal["LAST_OFFSET", "FIRST_OFFSET", "TIMESTAMP"]
#: why a member left its group
DepartureReason = Literal["unregistered", "stream_closed", "session_expired"]
#: reads a subscription's expression of a type (MessagingCore.read_filter)
ReadFilter = Callable[[str, str], SubscriptionFilter]

#: events a slow watcher may fall behind by; older ones are dropped (each event is a full
#: snapshot, so the latest one alone is enough to rebalance correctly)
MAX_PENDING_EVENTS = 64
#: how long the broker's registry keeps a member whose last watch stream closed: a client
#: that reopens its stream within this time (a push consumer retries after 0.5 s) stays a
#: member with its leases, and one that closes its stream just before it unregisters (an
#: orderly shutdown) leaves as unregistered
RECONNECT_GRACE_MS = 1000


def ends_leases(reason: DepartureReason, live_streams: int) -> bool:
    """Whether a member that left its group for ``reason`` loses its queue leases now.

    An unregistered member keeps them: an orderly leaver commits its offsets and then
    unlocks its queues itself, and ending its leases earlier would let the next owner start
    from an older offset. A member that vanished (stream closed, session expired) loses them,
    unless it still has ``live_streams`` watch streams open on the group: a client whose
    connection is alive must not lose queues it may be consuming.
    """
    return reason != "unregistered" and live_streams == 0


@dataclass(frozen=True)
class ConsumerInfo:
    """What one member said in its last heartbeat."""

    client_id: str
    #: sorted (topic, expression) pairs
    subscriptions: tuple[tuple[str, str], ...]
    message_model: MessageModel
    consume_type: ConsumeType
    consume_from_where: ConsumeFromWhere
    consume_timestamp_ms: int
    #: sorted (topic, expression type) of the subscriptions that are not tag expressions
    #: (e.g. "SQL92"); a topic not here subscribes by tag
    expression_types: tuple[tuple[str, str], ...] = ()
    #: each subscription read once, by topic
    topic_filters: Mapping[str, TopicFilter] = field(
        default_factory=dict, compare=False, repr=False
    )

    @property
    def filters(self) -> tuple[tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]]:
        """What the member reads: its subscriptions and their expression types."""
        return self.subscriptions, self.expression_types

    def expression_type(self, topic: str) -> str:
        """The kind of ``topic``'s expression: "TAG", or "SQL92" for a SQL92 selector."""
        return dict(self.expression_types).get(topic, TAG)


@dataclass(frozen=True)
class MembershipEvent:
    """A group's membership at one moment: sorted client ids and the version they belong to."""

    group: str
    consumer_ids: tuple[str, ...]
    version: int


class _LoopWakeup:
    """An asyncio event that any thread may set (heartbeats run on worker threads)."""

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._event = asyncio.Event()

    def set(self) -> None:
        try:
            self._loop.call_soon_threadsafe(self._event.set)
        except RuntimeError:  # the loop is closed: the stream is gone with it
            pass

    def clear(self) -> None:
        self._event.clear()  # only the stream's own task clears it, on the loop

    async def wait(self) -> None:
        await self._event.wait()


class _Watcher:
    """One open watch stream: a queue of events and a way to wake its reader."""

    def __init__(self, group: str, client_id: str) -> None:
        self.group = group
        self.client_id = client_id
        self.events: collections.deque[MembershipEvent] = collections.deque(
            maxlen=MAX_PENDING_EVENTS
        )
        self.closed = False
        self.wakeup = _LoopWakeup()


class _Group:
    __slots__ = ("filters", "last_seen_ms", "leaving", "members", "version", "watchers")

    def __init__(self, version: int) -> None:
        self.members: dict[str, ConsumerInfo] = {}
        #: topic -> the members' newest subscription to it (found at the first pull that
        #: asks, forgotten when a member's subscription to the topic changes or it leaves)
        self.filters: dict[str, TopicFilter] = {}
        self.last_seen_ms: dict[str, int] = {}
        self.version = version
        self.watchers: list[_Watcher] = []
        #: members whose last watch stream closed -> when they leave unless they reopen one
        self.leaving: dict[str, int] = {}

    def streams_of(self, client_id: str) -> int:
        return sum(1 for w in self.watchers if w.client_id == client_id)


class ConsumerRegistry:
    """Members of every consumer group on this broker; thread-safe.

    A daemon thread drops members silent for ``session_timeout_ms``, checking every
    ``sweep_interval_ms`` (default: a tenth of the timeout, between 50 ms and 1 s), and
    members whose last watch stream closed ``reconnect_grace_ms`` ago (0: at once, when it
    closes), on time; pass ``sweep_interval_ms=0`` to run no thread and call
    :meth:`expire_silent` yourself (tests with a fake ``clock``, which returns milliseconds).
    Reads of one group also drop its departed members first, so answers are never stale by
    more than a sweep.

    ``on_departure(group, client_id)`` is called when a member leaves without unregistering
    and :func:`ends_leases` says its leases end. It runs under the registry's lock, before
    any watcher can read the change, so it must be quick and must not call the registry.

    ``read_filter(expression_type, expression)`` reads a subscription (the broker passes
    ``MessagingCore.read_filter``, with its limits and ``--no-property-filter``); one
    heartbeat compiles at most ``max_selectors`` different SQL92 selectors.
    """

    def __init__(
        self,
        session_timeout_ms: int,
        *,
        clock: Callable[[], int] = monotonic_ms,
        sweep_interval_ms: int | None = None,
        max_groups: int = 10_000,
        reconnect_grace_ms: int = 0,
        on_departure: Callable[[str, str], object] | None = None,
        read_filter: ReadFilter | None = None,
        max_selectors: int = 32,
    ) -> None:
        if session_timeout_ms <= 0:
            raise InvalidArgumentError(f"session_timeout_ms={session_timeout_ms!r} must be > 0")
        if reconnect_grace_ms < 0:
            raise InvalidArgumentError(f"reconnect_grace_ms={reconnect_grace_ms!r} must be >= 0")
        self.session_timeout_ms = session_timeout_ms
        self.reconnect_grace_ms = reconnect_grace_ms
        self.max_groups = max_groups
        self.max_selectors = max_selectors
        self._on_departure = on_departure
        self._read_filter: ReadFilter = read_filter or functools.partial(
            filters.read_filter, max_chars=1 << 62
        )
        self._unusable = LogLimiter(log)
        self._clock = clock
        self._lock = threading.Lock()
        self._groups: dict[str, _Group] = {}
        self._version = 0
        self._closed = False
        self._stop = threading.Event()
        #: set when a departure is scheduled (or at close): the sweeper looks again
        self._wake = threading.Event()
        self._sweeper: threading.Thread | None = None
        if sweep_interval_ms is None:
            sweep_interval_ms = min(1000, max(50, session_timeout_ms // 10))
        if sweep_interval_ms > 0:
            self._sweeper = threading.Thread(
                target=self._sweep_loop,
                args=(sweep_interval_ms,),
                name="rmq-consumer-expiry",
                daemon=True,
            )
            self._sweeper.start()

    # -- membership --------------------------------------------------------------------------

    def read_subscriptions(
        self,
        client_id: str,
        groups: Iterable[tuple[str, Iterable[Subscribed]]],
        *,
        keep_errors: bool = False,
    ) -> dict[str, list[TopicFilter]]:
        """Read what a heartbeat of ``client_id`` subscribes to in each group, for
        :meth:`heartbeat`: per group and topic the newest subscription only (the first of
        equal versions), at most :attr:`max_selectors` different SQL92 selectors in all (else
        InvalidArgumentError naming the limit, before any is compiled), each read once: a
        subscription the member's last heartbeat already gave is taken as it was read then.
        Blocking (a selector is compiled here): call it on a worker, not under a lock.

        A subscription that cannot be read raises its error, naming the topic; with
        ``keep_errors`` (RocketMQ's heartbeats always succeed) one that is not a tag
        expression is kept with its error instead, for the group's pulls to answer with,
        unless it is longer than the broker takes."""
        wanted: dict[str, list[Subscribed]] = {}
        for group, subscriptions in groups:
            wanted[group] = newest(subscriptions)
        check_selectors(
            (sub for subs in wanted.values() for sub in subs), self.max_selectors, "a heartbeat"
        )
        with self._lock:
            known = {}
            for group in wanted:
                state = self._groups.get(group)
                info = state.members.get(client_id) if state is not None else None
                known[group] = info.topic_filters if info is not None else {}
        read = self._read
        return {
            group: [read(group, sub, known[group].get(sub.topic), keep_errors) for sub in subs]
            for group, subs in wanted.items()
        }

    def _read(
        self, group: str, sub: Subscribed, old: TopicFilter | None, keep_errors: bool
    ) -> TopicFilter:
        kind = (sub.kind or TAG).upper()
        if old is not None and (old.kind, old.expression) == (kind, sub.expression):
            version = old.version if sub.version is None else sub.version
            return old if version == old.version else dataclasses.replace(old, version=version)
        version = now_ms() if sub.version is None else sub.version
        try:
            read = self._read_filter(kind, sub.expression)
        except RocketliteError as exc:
            error = labelled(exc, f"the subscription to {sub.topic!r}")
            if not keep_errors or kind == TAG or isinstance(exc, SubscriptionTooLongError):
                raise error from None
            self._unusable.warning(
                group,
                "group %r subscribes to %r with a %s expression that cannot be used: %s",
                group,
                sub.topic,
                kind,
                exc,
            )
            return TopicFilter(sub.topic, kind, sub.expression, version, error=exc)
        return TopicFilter(
            sub.topic, read.kind, read.expression, version, read.tag_codes, read.selector
        )

    def heartbeat(
        self,
        client_id: str,
        group: str,
        subscriptions: Iterable[tuple[str, str] | TopicFilter] = (),
        message_model: MessageModel = "CLUSTERING",
        consume_type: ConsumeType = "PUSH",
        consume_from_where: ConsumeFromWhere = "LAST_OFFSET",
        consume_timestamp_ms: int = 0,
        expression_types: Mapping[str, str] | None = None,
    ) -> bool:
        """Add or refresh a member. True when the group changed: a new member, or a member's
        subscription set changed (RocketMQ notifies rebalance for both).

        ``subscriptions`` are what :meth:`read_subscriptions` read of the heartbeat, or
        (topic, expression) pairs, read here, with ``expression_types`` mapping a topic
        whose expression is not a tag expression to its type (e.g. "SQL92")."""
        given = list(subscriptions)
        read = [s for s in given if isinstance(s, TopicFilter)]
        pairs = [s for s in given if not isinstance(s, TopicFilter)]
        if pairs:
            types = expression_types or {}
            wanted = [Subscribed(t, e, types.get(t, TAG)) for t, e in pairs]
            read += self.read_subscriptions(client_id, [(group, wanted)], keep_errors=True)[group]
        by_topic = {f.topic: f for f in read}
        info = ConsumerInfo(
            client_id,
            tuple(sorted((f.topic, f.expression) for f in by_topic.values())),
            message_model,
            consume_type,
            consume_from_where,
            consume_timestamp_ms,
            tuple(sorted((f.topic, f.kind) for f in by_topic.values() if f.kind != TAG)),
            by_topic,
        )
        with self._lock:
            now = self._clock()
            self._expire_locked(group, now)
            state = self._group_locked(group)
            previous = state.members.get(client_id)
            state.members[client_id] = info
            state.last_seen_ms[client_id] = now
            before = previous.topic_filters if previous is not None else {}
            for topic, topic_filter in by_topic.items():
                if before.get(topic) is not topic_filter:
                    state.filters.pop(topic, None)
            for topic in before:
                if topic not in by_topic:
                    state.filters.pop(topic, None)
            changed = previous is None or previous.filters != info.filters
            if changed:
                self._changed_locked(group, state)
                if previous is None:
                    log.info("consumer %s joined group %s", client_id, group)
            return changed

    def group_filter(self, group: str, topic: str) -> TopicFilter | None:
        """What ``group`` reads ``topic`` with when a pull does not carry its subscription:
        its live members' newest subscription to it (the first member's of equal
        versions); None when no live member subscribes to it."""
        with self._lock:
            self._expire_locked(group, self._clock())
            state = self._groups.get(group)
            if state is None:
                return None
            found = state.filters.get(topic)
            if found is None:
                for info in state.members.values():
                    read = info.topic_filters.get(topic)
                    if read is not None and (found is None or read.version > found.version):
                        found = read
                if found is not None:
                    state.filters[topic] = found
            return found

    def unregister(self, client_id: str, group: str) -> bool:
        """Remove a member now; True if it was one (leaving a group one is not in is a no-op)."""
        with self._lock:
            removed = self._remove_locked(group, [client_id])
        if removed:
            log.info("consumer %s left group %s", client_id, group)
        return bool(removed)

    def members(self, group: str) -> list[str]:
        """Sorted client ids of the group's live members (``cidAll``); [] for no members."""
        return list(self.snapshot(group).consumer_ids)

    def snapshot(self, group: str) -> MembershipEvent:
        """The group's live members and their membership version, read together."""
        with self._lock:
            self._expire_locked(group, self._clock())
            state = self._groups.get(group)
            if state is None:
                return MembershipEvent(group, (), self._version)
            return self._event_locked(group, state)

    def consumer_info(self, group: str, client_id: str) -> ConsumerInfo | None:
        """The member's last heartbeat, or None if it is not a live member."""
        with self._lock:
            state = self._groups.get(group)
            return None if state is None else state.members.get(client_id)

    def watch_streams(self) -> int:
        """How many watch streams are open right now (for statistics)."""
        with self._lock:
            return sum(len(state.watchers) for state in self._groups.values())

    def groups(self) -> list[str]:
        """Groups with at least one member, sorted."""
        with self._lock:
            return sorted(name for name, state in self._groups.items() if state.members)

    def expire_silent(self) -> list[tuple[str, str]]:
        """Drop members silent for ``session_timeout_ms`` and members whose last watch stream
        closed ``reconnect_grace_ms`` ago; returns (group, client id) pairs."""
        expired = []
        with self._lock:
            now = self._clock()
            for group in list(self._groups):
                expired += [(group, cid) for cid in self._expire_locked(group, now)]
        return expired

    # -- watching ----------------------------------------------------------------------------

    async def watch(self, group: str, client_id: str = "") -> AsyncIterator[MembershipEvent]:
        """Events for ``group``: the current membership first, then one per change.

        An asynchronous generator, run on the server's event loop: a waiting stream holds
        no thread. It ends when its task is cancelled (the gRPC call ended), when it is
        closed, or at :meth:`close`. With a ``client_id`` the stream stands for that
        member's connection: when it ends and the same client has no other watch stream open
        on the group, the member leaves ``reconnect_grace_ms`` later (and the others are
        told) unless it opens a new stream before then.
        """
        watcher = self._add_watcher(group, client_id)
        try:
            while True:
                event = self._next_event(watcher)
                if event is not None:
                    yield event
                elif watcher.closed:
                    return
                else:
                    await watcher.wakeup.wait()
        finally:
            self._remove_watcher(watcher)

    def _add_watcher(self, group: str, client_id: str) -> _Watcher:
        watcher = _Watcher(group, client_id)
        with self._lock:
            if self._closed:
                watcher.closed = True
                return watcher
            self._expire_locked(group, self._clock())
            state = self._group_locked(group)
            # Queued under the lock, so no change can slip in between the first event and
            # the registration.
            watcher.events.append(self._event_locked(group, state))
            state.watchers.append(watcher)
            returned = bool(client_id) and state.leaving.pop(client_id, None) is not None
        if returned:
            log.info("consumer %s of group %s reopened its watch stream in time", client_id, group)
        return watcher

    def _next_event(self, watcher: _Watcher) -> MembershipEvent | None:
        """The next pending event, or None (then the wakeup is armed for the next one)."""
        with self._lock:
            if watcher.events:
                return watcher.events.popleft()
            # Cleared under the lock: a change queued after this sets it again.
            watcher.wakeup.clear()
            return None

    def _remove_watcher(self, watcher: _Watcher) -> None:
        group, client_id = watcher.group, watcher.client_id
        with self._lock:
            state = self._groups.get(group)
            if state is None:
                return
            if watcher in state.watchers:
                state.watchers.remove(watcher)
            last = (
                bool(client_id)
                and client_id in state.members
                and not state.streams_of(client_id)
                and not self._closed
            )
            dropped = []
            if last and self.reconnect_grace_ms:
                state.leaving[client_id] = self._clock() + self.reconnect_grace_ms
                self._wake.set()
            elif last:
                dropped = self._depart_locked(group, state, {client_id: "stream_closed"})
            self._forget_if_unused_locked(group, state)
        if dropped:
            log.info("consumer %s dropped from group %s: its watch stream ended", client_id, group)
        elif last:
            log.info(
                "consumer %s of group %s closed its last watch stream; it leaves in %d ms "
                "unless it opens a new one",
                client_id,
                group,
                self.reconnect_grace_ms,
            )

    # -- lifecycle ---------------------------------------------------------------------------

    def close(self) -> None:
        """End every watch stream promptly and stop the expiry thread."""
        with self._lock:
            self._closed = True
            for state in self._groups.values():
                for watcher in state.watchers:
                    watcher.closed = True
                    watcher.wakeup.set()
        self._stop.set()
        self._wake.set()
        if self._sweeper is not None and self._sweeper is not threading.current_thread():
            self._sweeper.join()

    def _sweep_loop(self, interval_ms: int) -> None:
        while not self._stop.is_set():
            # Cleared before looking: a departure scheduled from here on sets it again.
            self._wake.clear()
            try:
                self.expire_silent()
            except Exception:  # the thread must survive; a bug here is logged, not fatal
                log.exception("consumer expiry sweep failed")
            self._wake.wait(max(1, min(interval_ms, self._ms_to_next_departure())) / 1000)

    def _ms_to_next_departure(self) -> int:
        with self._lock:
            due = [d for state in self._groups.values() for d in state.leaving.values()]
            return min(due) - self._clock() if due else self.session_timeout_ms

    # -- internals (caller holds self._lock) -------------------------------------------------

    def _group_locked(self, group: str) -> _Group:
        state = self._groups.get(group)
        if state is None:
            if len(self._groups) >= self.max_groups:
                raise ResourceExhaustedError(
                    f"this broker already tracks {len(self._groups):,} consumer groups, its "
                    f"limit (--max-consumer-groups); group {group!r} cannot join until "
                    "another group's members leave"
                )
            state = self._groups[group] = _Group(self._version)
        return state

    def _event_locked(self, group: str, state: _Group) -> MembershipEvent:
        return MembershipEvent(group, tuple(sorted(state.members)), state.version)

    def _changed_locked(self, group: str, state: _Group) -> None:
        self._version += 1
        state.version = self._version
        event = self._event_locked(group, state)
        for watcher in state.watchers:
            watcher.events.append(event)
            watcher.wakeup.set()

    def _remove_locked(self, group: str, client_ids: Iterable[str]) -> list[str]:
        state = self._groups.get(group)
        if state is None:
            return []
        removed = []
        for cid in client_ids:
            info = state.members.pop(cid, None)
            if info is None:
                continue
            removed.append(cid)
            del state.last_seen_ms[cid]
            state.leaving.pop(cid, None)
            for topic in info.topic_filters:
                state.filters.pop(topic, None)
        if removed:
            self._changed_locked(group, state)
        self._forget_if_unused_locked(group, state)
        return removed

    def _expire_locked(self, group: str, now: int) -> list[str]:
        state = self._groups.get(group)
        if state is None:
            return []
        deadline = now - self.session_timeout_ms
        reasons: dict[str, DepartureReason] = {
            cid: "stream_closed" for cid, due in state.leaving.items() if due <= now
        }
        silent = [cid for cid, seen in state.last_seen_ms.items() if seen <= deadline]
        reasons.update((cid, "session_expired") for cid in silent)
        if silent:
            log.info(
                "consumers %s of group %s expired: no heartbeat for %d ms",
                ", ".join(silent),
                group,
                self.session_timeout_ms,
            )
        gone = [cid for cid, why in reasons.items() if why == "stream_closed"]
        if gone:
            log.info(
                "consumers %s of group %s left: their watch streams closed and were not "
                "reopened within %d ms",
                ", ".join(gone),
                group,
                self.reconnect_grace_ms,
            )
        return self._depart_locked(group, state, reasons) if reasons else []

    def _depart_locked(
        self, group: str, state: _Group, reasons: dict[str, DepartureReason]
    ) -> list[str]:
        """Members leave without unregistering: the ones whose leases end are reported to
        ``on_departure`` first, then the group is told once."""
        if self._on_departure is not None:
            for cid, reason in reasons.items():
                if cid in state.members and ends_leases(reason, state.streams_of(cid)):
                    try:
                        self._on_departure(group, cid)
                    except Exception:  # the member still leaves; the leases then run out
                        log.exception("on_departure(%r, %r) failed", group, cid)
        return self._remove_locked(group, reasons)

    def _forget_if_unused_locked(self, group: str, state: _Group) -> None:
        # An absent group reports the shared counter as its version, which is >= any
        # version it had, so forgetting it never makes its version go back.
        if not state.members and not state.watchers and self._groups.get(group) is state:
            del self._groups[group]
