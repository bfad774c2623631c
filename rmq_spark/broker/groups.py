"""Consumer-group membership: who is in each group, and who is told when that changes.

The broker side of RocketMQ's ConsumerManager. Members join and stay by heartbeat and leave
by unregistering, by going silent for ``session_timeout_ms``, or when their watch stream
ends (the stream stands for the client's connection, as a channel does in RocketMQ). Every
change gives the group a new, larger membership version and sends each watcher of the group
one event with the full sorted member list (rebalance's ``cidAll``), so watchers never need
a follow-up query.

Versions come from one counter shared by all groups, so a group's version never goes back,
even when an empty group is forgotten and later comes back.

>>> registry = ConsumerRegistry(session_timeout_ms=120_000, sweep_interval_ms=0)
>>> registry.heartbeat("10.0.0.2@7", "GroupA", [("TopicA", "*")])
True
>>> registry.members("GroupA")
['10.0.0.2@7']
"""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from typing import Literal

from rmq_spark.errors import InvalidArgumentError, ResourceExhaustedError

log = logging.getLogger("rmq_spark.broker")

MessageModel = Literal["CLUSTERING", "BROADCASTING"]
ConsumeType = Literal["PULL", "PUSH"]
ConsumeFromWhere = Literal["LAST_OFFSET", "FIRST_OFFSET", "TIMESTAMP"]

#: events a slow watcher may fall behind by; older ones are dropped (each event is a full
#: snapshot, so the latest one alone is enough to rebalance correctly)
MAX_PENDING_EVENTS = 64


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


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
    __slots__ = ("last_seen_ms", "members", "version", "watchers")

    def __init__(self, version: int) -> None:
        self.members: dict[str, ConsumerInfo] = {}
        self.last_seen_ms: dict[str, int] = {}
        self.version = version
        self.watchers: list[_Watcher] = []


class ConsumerRegistry:
    """Members of every consumer group on this broker; thread-safe.

    A daemon thread drops members silent for ``session_timeout_ms``, checking every
    ``sweep_interval_ms`` (default: a tenth of the timeout, between 50 ms and 1 s); pass
    ``sweep_interval_ms=0`` to run no thread and call :meth:`expire_silent` yourself (tests
    with a fake ``clock``, which returns milliseconds). Reads of one group also drop its
    silent members first, so answers are never stale by more than a sweep.
    """

    def __init__(
        self,
        session_timeout_ms: int,
        *,
        clock: Callable[[], int] = monotonic_ms,
        sweep_interval_ms: int | None = None,
        max_groups: int = 10_000,
    ) -> None:
        if session_timeout_ms <= 0:
            raise InvalidArgumentError(f"session_timeout_ms={session_timeout_ms!r} must be > 0")
        self.session_timeout_ms = session_timeout_ms
        self.max_groups = max_groups
        self._clock = clock
        self._lock = threading.Lock()
        self._groups: dict[str, _Group] = {}
        self._version = 0
        self._closed = False
        self._stop = threading.Event()
        self._sweeper: threading.Thread | None = None
        if sweep_interval_ms is None:
            sweep_interval_ms = min(1000, max(50, session_timeout_ms // 10))
        if sweep_interval_ms > 0:
            self._sweeper = threading.Thread(
                target=self._sweep_loop,
                args=(sweep_interval_ms / 1000,),
                name="rmq-consumer-expiry",
                daemon=True,
            )
            self._sweeper.start()

    # -- membership --------------------------------------------------------------------------

    def heartbeat(
        self,
        client_id: str,
        group: str,
        subscriptions: Iterable[tuple[str, str]] = (),
        message_model: MessageModel = "CLUSTERING",
        consume_type: ConsumeType = "PUSH",
        consume_from_where: ConsumeFromWhere = "LAST_OFFSET",
        consume_timestamp_ms: int = 0,
    ) -> bool:
        """Add or refresh a member. True when the group changed: a new member, or a member's
        subscription set changed (RocketMQ notifies rebalance for both)."""
        info = ConsumerInfo(
            client_id,
            tuple(sorted(set(subscriptions))),
            message_model,
            consume_type,
            consume_from_where,
            consume_timestamp_ms,
        )
        with self._lock:
            now = self._clock()
            self._expire_locked(group, now)
            state = self._group_locked(group)
            previous = state.members.get(client_id)
            state.members[client_id] = info
            state.last_seen_ms[client_id] = now
            changed = previous is None or previous.subscriptions != info.subscriptions
            if changed:
                self._changed_locked(group, state)
                if previous is None:
                    log.info("consumer %s joined group %s", client_id, group)
            return changed

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
        """Drop members silent for ``session_timeout_ms``; returns (group, client id) pairs."""
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
        member's connection: when it ends, the member is dropped at once and the others are
        told, unless the same client still has another watch stream open on the group.
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
        with self._lock:
            state = self._groups.get(watcher.group)
            if state is None:
                return
            if watcher in state.watchers:
                state.watchers.remove(watcher)
            others = any(w.client_id == watcher.client_id for w in state.watchers)
            dropped = (
                self._remove_locked(watcher.group, [watcher.client_id])
                if watcher.client_id and not others and not self._closed
                else []
            )
            self._forget_if_unused_locked(watcher.group, state)
        if dropped:
            log.info(
                "consumer %s dropped from group %s: its watch stream ended",
                watcher.client_id,
                watcher.group,
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
        if self._sweeper is not None and self._sweeper is not threading.current_thread():
            self._sweeper.join()

    def _sweep_loop(self, interval_s: float) -> None:
        while not self._stop.wait(interval_s):
            try:
                self.expire_silent()
            except Exception:  # the thread must survive; a bug here is logged, not fatal
                log.exception("consumer expiry sweep failed")

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
        removed = [cid for cid in client_ids if state.members.pop(cid, None) is not None]
        for cid in removed:
            del state.last_seen_ms[cid]
        if removed:
            self._changed_locked(group, state)
        self._forget_if_unused_locked(group, state)
        return removed

    def _expire_locked(self, group: str, now: int) -> list[str]:
        state = self._groups.get(group)
        if state is None:
            return []
        deadline = now - self.session_timeout_ms
        silent = [cid for cid, seen in state.last_seen_ms.items() if seen <= deadline]
        if silent:
            log.info(
                "consumers %s of group %s expired: no heartbeat for %d ms",
                ", ".join(silent),
                group,
                self.session_timeout_ms,
            )
        return self._remove_locked(group, silent) if silent else []

    def _forget_if_unused_locked(self, group: str, state: _Group) -> None:
        # An absent group reports the shared counter as its version, which is >= any
        # version it had, so forgetting it never makes its version go back.
        if not state.members and not state.watchers and self._groups.get(group) is state:
            del self._groups[group]
