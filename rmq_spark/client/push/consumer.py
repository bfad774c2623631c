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
"""

from __future__ import annotations

import collections
import heapq
import itertools
import logging
import os
import queue
import socket
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from rmq_spark.allocate import AllocateMessageQueueStrategy, get_strategy
from rmq_spark.client import offsets as offset_rpc
from rmq_spark.client.cluster import Cluster
from rmq_spark.client.connection import PendingCall
from rmq_spark.client.consumer import keep_subscribed_tags, subscribed_tag_values
from rmq_spark.client.endpoints import Endpoints
from rmq_spark.client.groups import (
    ConsumerWatch,
    HeartbeatInfo,
    Subscription,
    consumer_list,
    heartbeat,
    lock_queues,
    unlock_queues,
    unregister,
)
from rmq_spark.client.process_queue import ProcessQueue
from rmq_spark.client.push.config import MessageModel, PushConsumerConfig
from rmq_spark.client.push.consume import ConcurrentService, OrderlyService
from rmq_spark.client.push.message import messages_from_batch
from rmq_spark.codec.subscription import parse_subscription
from rmq_spark.errors import InvalidArgumentError, RocketliteError
from rmq_spark.names import RETRY_PREFIX, retry_topic, validate_group, validate_topic
from rmq_spark.offsets.store import OffsetStore, ReadOffsetType
from rmq_spark.proto_gen.rocketlite.v1 import messaging_pb2
from rmq_spark.pull_wire import decode_pull_response
from rmq_spark.structs import MessageQueue, PullStatus
from rmq_spark.wire import mq_to_pb, pull_status_from_pb

__all__ = ["PushConsumer"]

log = logging.getLogger("rmq_spark.client.push")

_instances = itertools.count(1)

ACTIVE, DRAINING, RELEASED = "ACTIVE", "DRAINING", "RELEASED"


def _local_ip() -> str:
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


class _QueueState:
    """One owned queue: its ProcessQueue, pull position, lease and phase."""

    def __init__(self, mq: MessageQueue, lease_deadline: float) -> None:
        self.mq = mq
        self.pq = ProcessQueue()
        self.next_offset = 0
        self.phase = ACTIVE
        self.lease_deadline = lease_deadline  # monotonic seconds; inf without leases
        self.drain_deadline = 0.0
        # released, but the final commit and unlock still to do (a commit failed)
        self.release_pending = False
        self.release_give_up_at = 0.0
        self.release_retry_at = 0.0
        self.call: PendingCall | None = None
        self.lock = threading.RLock()
        # orderly consumption
        self.pending: collections.deque = collections.deque()
        self.running = False
        self.attempts: dict[int, int] = {}
        self.base_reconsume: dict[int, int] = {}

    @property
    def released(self) -> bool:
        return self.phase == RELEASED

    def lease_valid(self) -> bool:
        return time.monotonic() < self.lease_deadline

    def cancel_pull(self) -> None:
        call = self.call
        if call is not None:
            call.cancel()


class _Timers:
    """One thread that runs short callbacks when they are due."""

    def __init__(self, name: str) -> None:
        self._heap: list[tuple[float, int, Callable[..., None], tuple]] = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def call_later(self, delay_s: float, fn: Callable[..., None], *args: Any) -> None:
        with self._cond:
            if self._stopped:
                return
            heapq.heappush(self._heap, (time.monotonic() + delay_s, next(self._seq), fn, args))
            self._cond.notify()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._stopped:
                    now = time.monotonic()
                    if self._heap and self._heap[0][0] <= now:
                        break
                    self._cond.wait(None if not self._heap else self._heap[0][0] - now)
                if self._stopped:
                    return
                _, _, fn, args = heapq.heappop(self._heap)
            try:
                fn(*args)
            except Exception:
                log.exception("push consumer timer callback %r failed", fn)

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._heap.clear()
            self._cond.notify()
        self._thread.join(5)


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
        self._cluster = Cluster(endpoints, self.config)
        self._subscriptions: dict[str, tuple[str, Any]] = {}
        self._listener: Callable[..., Any] | None = None
        self._orderly = False
        # imported here: rmq_spark.offsets.remote_broker imports the client package
        from rmq_spark.offsets.local_file import LocalFileOffsetStore
        from rmq_spark.offsets.remote_broker import RemoteBrokerOffsetStore

        self._offsets: OffsetStore
        if message_model == "CLUSTERING":
            self._offsets = RemoteBrokerOffsetStore(self._cluster, self.group)
        else:
            self._offsets = LocalFileOffsetStore(self.config.offsets_dir, self.client_id, group)
        self._lock = threading.RLock()
        self._states: dict[MessageQueue, _QueueState] = {}
        self._pending: set[MessageQueue] = set()  # allocated, lease not yet obtained
        self._waiting_logged: set[MessageQueue] = set()
        self._allocation: dict[str, frozenset[MessageQueue]] = {}
        self._counts: collections.Counter[str] = collections.Counter()
        self._count_lock = threading.Lock()
        self._started = False
        self._stopping = threading.Event()
        self._pool_closed = False
        self._wake = threading.Event()
        self._rebalance_requested = threading.Event()
        self._heartbeat_requested = threading.Event()
        self._events: queue.Queue = queue.Queue()
        self._threads: list[threading.Thread] = []
        self._watches: dict[str, ConsumerWatch] = {}
        self._members: dict[str, list[str]] = {}
        self._heartbeat_interval_s = 10.0
        self._timers: _Timers | None = None
        self._service: ConcurrentService | OrderlyService | None = None

    # --- set-up ---------------------------------------------------------------------------

    def subscribe(self, topic: str, expression: str = "*") -> None:
        """Consume ``topic``'s messages whose tag matches ``expression`` ("*" = all,
        "TagA || TagB"). May be called while running; the next rebalance picks it up."""
        validate_topic(topic)
        parsed = parse_subscription(expression)
        with self._lock:
            self._subscriptions[topic] = (parsed.expression, subscribed_tag_values(parsed))
        if self._started:
            self._heartbeat_requested.set()
            self._rebalance_requested.set()
            self._wake.set()

    def unsubscribe(self, topic: str) -> None:
        """Stop consuming ``topic`` (its queues are handed back at the next rebalance)."""
        with self._lock:
            self._subscriptions.pop(topic, None)
        if self._started:
            self._heartbeat_requested.set()
            self._rebalance_requested.set()
            self._wake.set()

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
        if self._started:
            raise InvalidArgumentError(
                f"consumer {self.client_id} of {self.group!r} already started"
            )
        if self._listener is None:
            raise InvalidArgumentError("no listener; call register_listener(fn) before start()")
        if not self._subscriptions:
            raise InvalidArgumentError("no subscription; call subscribe(topic) before start()")
        if self.message_model == "CLUSTERING":
            retry = retry_topic(self.group)
            with self._lock:
                self._subscriptions.setdefault(retry, ("*", None))
        self._offsets.load()
        service_cls = OrderlyService if self._orderly else ConcurrentService
        self._service = service_cls(self, self._listener)
        self._timers = _Timers(f"rmq-push-timers-{self.group}")
        self._started = True
        self._send_heartbeats()  # the retry topic exists once a broker saw us
        self._spawn(self._pull_loop, "pull")
        self._spawn(self._housekeeping_loop, "house")
        if self.message_model == "CLUSTERING":
            for endpoint in self._cluster.endpoints:
                self._spawn(self._watch_loop, f"watch-{endpoint}", endpoint)
        self._rebalance_requested.set()
        self._wake.set()
        log.info(
            "push consumer %s of group %r started (%s, %s, strategy %s)",
            self.client_id,
            self.group,
            self.message_model,
            "orderly" if self._orderly else "concurrent",
            self.strategy.name,
        )
        return self

    def _spawn(self, target: Callable[..., None], name: str, *args: Any) -> None:
        thread = threading.Thread(
            target=target, args=args, name=f"rmq-push-{name}-{self.group}", daemon=True
        )
        thread.start()
        self._threads.append(thread)

    # --- state ---------------------------------------------------------------------------

    def assignment(self) -> list[MessageQueue]:
        """The queues this member is consuming now (lease held, not being handed over)."""
        with self._lock:
            return sorted(mq for mq, st in self._states.items() if st.phase == ACTIVE)

    def stats(self) -> dict[str, int]:
        """Counters since start (a counter that never moved is absent): pulled,
        consumed_ok, consumed_failed, sent_back, dead_lettered, send_back_failed,
        local_retries, dropped, offset_illegal, pulls_failed, flow_control (pulls put off because
        too many messages waited)."""
        with self._count_lock:
            return dict(self._counts)

    def _count(self, name: str, n: int = 1) -> None:
        if n:
            with self._count_lock:
                self._counts[name] += n

    def _count_many(self, counts: dict[str, int]) -> None:
        with self._count_lock:
            for name, n in counts.items():
                if n:
                    self._counts[name] += n

    def _later(self, delay_s: float, fn: Callable[..., None], *args: Any) -> None:
        if self._timers is not None:
            self._timers.call_later(delay_s, fn, *args)

    def _consumed(self, st: _QueueState, offsets: list[int]) -> None:
        """Messages of ``st`` are done: move the queue's offset to what is now committable."""
        committable = st.pq.remove_messages(offsets)
        if committable >= 0 and not st.released:
            self._offsets.update_offset(st.mq, committable)
        if st.phase == DRAINING:
            self._wake.set()

    # --- pulling -------------------------------------------------------------------------

    def _schedule_pull(self, st: _QueueState, delay_s: float = 0.0) -> None:
        if delay_s <= 0:
            self._events.put(("pull", st))
        else:
            self._later(delay_s, self._events.put, ("pull", st))

    def _pull_loop(self) -> None:
        while not self._stopping.is_set():
            event = self._events.get()
            if event[0] == "stop":
                return
            try:
                if event[0] == "pull":
                    self._pull(event[1])
                else:
                    self._pulled(*event[1:])
            except Exception:
                log.exception("group %r: pull of %s failed", self.group, event[1].mq)
                self._count("pulls_failed")
                self._schedule_pull(event[1], self.config.pull_retry_delay_ms / 1000)

    def _pull(self, st: _QueueState) -> None:
        if st.phase != ACTIVE or self._stopping.is_set():
            return
        if not st.lease_valid():
            self._schedule_pull(st, 0.2)  # the housekeeping thread renews or drops it
            return
        config = self.config
        if (
            st.pq.msg_count > config.pull_threshold_for_queue
            or st.pq.msg_size > config.pull_threshold_size_for_queue_mb << 20
        ):
            self._count("flow_control")
            self._schedule_pull(st, 0.05)
            return
        with self._lock:  # the filter goes with the answer: subscribe() may change it
            expression, tag_values = self._subscriptions.get(st.mq.topic, ("*", None))
        request = messaging_pb2.PullMessagesRequest(
            consumer_group=self.group,
            queue=mq_to_pb(st.mq),
            queue_offset=st.next_offset,
            max_messages=config.pull_batch_size,
            max_bytes=config.pull_max_bytes,
            subscription_expression=expression,
            suspend_timeout_ms=config.long_poll_ms,
        )
        conn = self._cluster.connection(self._cluster.endpoint_of(st.mq.broker_name))
        timeout_s = (config.long_poll_ms + config.long_poll_margin_ms) / 1000
        call = conn.start(conn.messaging.PullMessages, request, timeout_s=timeout_s)
        st.call = call
        offset = st.next_offset
        call.future.add_done_callback(
            lambda _f: self._events.put(("done", st, call, offset, tag_values))
        )

    def _pulled(self, st: _QueueState, call: PendingCall, offset: int, tag_values: Any) -> None:
        if st.call is call:
            st.call = None
        if call.cancelled() or st.phase != ACTIVE or self._stopping.is_set():
            return
        try:
            response = call.result()
        except RocketliteError as exc:
            self._count("pulls_failed")
            log.warning("group %r: pull of %s at %d failed: %s", self.group, st.mq, offset, exc)
            self._schedule_pull(st, self.config.pull_retry_delay_ms / 1000)
            return
        status = pull_status_from_pb(response.status)
        next_offset = response.next_begin_offset
        if status == PullStatus.FOUND:
            batch = keep_subscribed_tags(decode_pull_response(st.mq, response), tag_values)
            messages = messages_from_batch(batch, st.mq)
            with st.lock:
                if st.phase != ACTIVE or st.next_offset != offset:
                    return
                st.next_offset = next_offset
                if messages:
                    st.pq.put_messages(
                        [m.queue_offset for m in messages], [len(m.body) for m in messages]
                    )
                    self._count("pulled", len(messages))
                    self._service.dispatch(st, messages)  # type: ignore[union-attr]
            if not messages:
                self._skip_filtered(st)
        elif status == PullStatus.OFFSET_ILLEGAL:
            self._offset_illegal(st, offset, response)
            return
        else:  # NO_NEW_MSG, NO_MATCHED_MSG
            with st.lock:
                if st.next_offset == offset:
                    st.next_offset = next_offset
            self._skip_filtered(st)
        self._schedule_pull(st, self.config.pull_interval_ms / 1000)

    def _offset_illegal(self, st: _QueueState, offset: int, response: Any) -> None:
        """The position was deleted (retention) or is past the end (the queue was
        recreated): start the queue over from where the broker says, with a fresh process
        queue, as RocketMQ drops and re-creates it. The new offset is committed also when it
        is lower (an increase-only commit would keep the bad one)."""
        next_offset = response.next_begin_offset
        with st.lock:
            if st.phase != ACTIVE or st.next_offset != offset:
                return  # handed over meanwhile, or a stale pull chain
            st.phase = RELEASED  # messages of the old process queue are not consumed
        st.cancel_pull()
        with self._lock:
            self._states.pop(st.mq, None)
        self._count("offset_illegal")
        log.error(
            "group %r: offset %d of %s is illegal (readable %d..%d): messages were deleted "
            "or the offset is past the end; jumping to %d and persisting it",
            self.group,
            offset,
            st.mq,
            response.min_offset,
            response.max_offset,
            next_offset,
        )
        try:
            self._offsets.reset_offset(st.mq, next_offset)
        except RocketliteError as exc:
            log.warning("group %r: cannot persist the offset of %s: %s", self.group, st.mq, exc)
            self._offsets.update_offset(st.mq, next_offset, increase_only=False)
        if not self._restart_if_allocated(st.mq):  # we still hold its lease
            self._unlock_quietly([st.mq])

    def _restart_if_allocated(self, mq: MessageQueue) -> bool:
        """Queue ``mq`` (whose state was just dropped) for a fresh start when the last
        rebalance gave it to this member; False when it went elsewhere."""
        with self._lock:
            restart = mq in self._allocation.get(mq.topic, ()) and not self._stopping.is_set()
            if restart:
                self._pending.add(mq)
        if restart:
            self._wake.set()
        return restart

    def _skip_filtered(self, st: _QueueState) -> None:
        """Nothing of ``st`` in flight: its offset may move past messages the filter skipped
        (RocketMQ's correctTagsOffset)."""
        if st.pq.msg_count == 0 and not st.released:
            self._offsets.update_offset(st.mq, st.next_offset)

    # --- membership ----------------------------------------------------------------------

    def _heartbeat_info(self) -> HeartbeatInfo:
        with self._lock:
            subs = tuple(Subscription(t, e) for t, (e, _) in sorted(self._subscriptions.items()))
        stamp = self.config.consume_timestamp_ms or 0
        return HeartbeatInfo(
            self.client_id,
            self.group,
            subs,
            self.message_model,
            True,
            self.config.consume_from,
            stamp,
        )

    def _send_heartbeats(self) -> None:
        info = self._heartbeat_info()
        answers = self._cluster.fan_out(lambda conn: heartbeat(conn, info))
        for endpoint, answer in answers.items():
            if isinstance(answer, RocketliteError):
                log.warning("group %r: heartbeat to %s failed: %s", self.group, endpoint, answer)
            elif self.config.heartbeat_interval_ms == 0 and answer.session_timeout_ms > 0:
                self._heartbeat_interval_s = answer.session_timeout_ms / 3000
        if self.config.heartbeat_interval_ms:
            self._heartbeat_interval_s = self.config.heartbeat_interval_ms / 1000

    def _watch_loop(self, endpoint: str) -> None:
        conn = self._cluster.connection(endpoint)
        backoff = 0.5
        while not self._stopping.is_set():
            watch = ConsumerWatch(conn, self.group, self.client_id)
            self._watches[endpoint] = watch
            try:
                for ids, _version in watch:
                    backoff = 0.5
                    if self._members.get(endpoint) != ids:
                        self._members[endpoint] = ids
                        self._rebalance_requested.set()
                        self._wake.set()
            except RocketliteError as exc:
                if not self._stopping.is_set():
                    log.info(
                        "group %r: membership stream of %s ended: %s", self.group, endpoint, exc
                    )
            if self._stopping.wait(backoff):
                return
            backoff = min(backoff * 2, 5.0)
            self._heartbeat_requested.set()  # the broker dropped us with the stream
            self._wake.set()

    # --- housekeeping ---------------------------------------------------------------------

    def _housekeeping_loop(self) -> None:
        now = time.monotonic()
        next_heartbeat = now + self._heartbeat_interval_s
        next_rebalance = now
        next_persist = now + self.config.persist_interval_ms / 1000
        next_renew = now + self.config.queue_lease_ms / 3000
        next_acquire = now
        while not self._stopping.is_set():
            now = time.monotonic()
            try:
                if self._heartbeat_requested.is_set() or now >= next_heartbeat:
                    self._heartbeat_requested.clear()
                    self._send_heartbeats()
                    next_heartbeat = now + self._heartbeat_interval_s
                if self._rebalance_requested.is_set() or now >= next_rebalance:
                    self._rebalance_requested.clear()
                    self._rebalance()
                    next_rebalance = now + self.config.rebalance_interval_ms / 1000
                    next_acquire = now
                if self._pending and now >= next_acquire:
                    self._acquire()
                    next_acquire = now + 0.25
                if now >= next_renew:
                    self._renew_leases()
                    next_renew = now + self.config.queue_lease_ms / 3000
                self._finish_drains(time.monotonic())
                if now >= next_persist:
                    self._persist_all()
                    next_persist = now + self.config.persist_interval_ms / 1000
            except Exception:
                log.exception("group %r: housekeeping failed; trying again", self.group)
            self._wake.wait(0.1 if self._pending or self._draining() else 1.0)
            self._wake.clear()

    def _draining(self) -> list[_QueueState]:
        with self._lock:
            return [
                st for st in self._states.values() if st.phase == DRAINING or st.release_pending
            ]

    def _persist_all(self) -> None:
        with self._lock:
            owned = [mq for mq, st in self._states.items() if not st.released]
        if not owned:
            return
        try:
            self._offsets.persist_all(owned)
        except RocketliteError as exc:
            log.warning("group %r: persisting offsets failed: %s", self.group, exc)

    # --- rebalance -----------------------------------------------------------------------

    def _rebalance(self) -> None:
        with self._lock:
            topics = sorted(self._subscriptions)
        members: dict[str, list[str]] = {}  # broker -> member ids, asked once per rebalance
        for topic in topics:
            try:
                self._rebalance_topic(topic, members)
            except RocketliteError as exc:
                log.warning("group %r: rebalance of topic %r failed: %s", self.group, topic, exc)
        with self._lock:  # queues of topics no longer subscribed
            for mq, st in list(self._states.items()):
                if mq.topic not in self._subscriptions and st.phase == ACTIVE:
                    self._start_drain(st)
            dropped = {mq for mq in self._pending if mq.topic not in self._subscriptions}
            self._pending -= dropped
            for topic in list(self._allocation):
                if topic not in self._subscriptions:
                    del self._allocation[topic]
        self._unlock_quietly(dropped)

    def _find_cid_all(
        self, brokers: Iterable[str], members: dict[str, list[str]]
    ) -> list[str] | None:
        """The group's member ids from the first broker of ``brokers`` that answers
        (``members`` caches the answers of this rebalance)."""
        for broker in sorted(brokers):
            if broker in members:
                return members[broker]
            try:
                conn = self._cluster.connection(self._cluster.endpoint_of(broker))
                ids, _ = consumer_list(conn, self.group)
            except RocketliteError as exc:
                log.info("group %r: no member list from broker %r: %s", self.group, broker, exc)
                continue
            if self.client_id not in ids:  # our heartbeat has not reached it yet
                self._send_heartbeats()
                ids, _ = consumer_list(conn, self.group)
            members[broker] = ids
            return ids
        return None

    def _rebalance_topic(self, topic: str, members: dict[str, list[str]]) -> None:
        route = self._cluster.route(topic)
        mq_all = sorted(route.readable)
        if self.message_model == "BROADCASTING":
            cid_all = [self.client_id]
            allocated = frozenset(mq_all)
        else:
            found = self._find_cid_all(route.brokers, members)
            if found is None:
                log.warning(
                    "group %r: no broker of topic %r answered; keeping its queues",
                    self.group,
                    topic,
                )
                return
            cid_all = found
            if not mq_all or not cid_all:
                allocated = frozenset()
            else:
                allocated = frozenset(
                    self.strategy.allocate(self.group, self.client_id, mq_all, cid_all)
                )
        with self._lock:
            if self._allocation.get(topic) != allocated:
                log.info(
                    "rebalance result changed. allocateMessageQueueStrategyName=%s, group=%s, "
                    "topic=%s, clientId=%s, mqAllSize=%d, cidAllSize=%d, rebalanceResultSize=%d, "
                    "rebalanceResultSet=%s",
                    self.strategy.name,
                    self.group,
                    topic,
                    self.client_id,
                    len(mq_all),
                    len(cid_all),
                    len(allocated),
                    sorted(allocated),
                )
                self._allocation[topic] = allocated
            for mq, st in list(self._states.items()):
                if mq.topic != topic:
                    continue
                if mq not in allocated and st.phase == ACTIVE:
                    self._start_drain(st)
                elif mq in allocated and st.phase == DRAINING and not self._stopping.is_set():
                    with st.lock:
                        st.phase = ACTIVE  # given back to us before the hand-over finished
                    self._schedule_pull(st)
            dropped = {mq for mq in self._pending if mq.topic == topic and mq not in allocated}
            self._pending -= dropped
            self._pending |= {mq for mq in allocated if mq not in self._states}
        self._unlock_quietly(dropped)  # a lease may have been granted while it waited
        if self._pending:
            self._acquire()

    def _acquire(self) -> None:
        """Start the pending queues whose lease we get (all of them in BROADCASTING)."""
        with self._lock:
            pending = sorted(self._pending)
        if not pending:
            return
        if self.message_model == "BROADCASTING":
            for mq in pending:
                self._start_queue(mq, float("inf"))
            return
        sent = time.monotonic()
        leases = lock_queues(
            self._cluster, self.group, self.client_id, pending, self.config.queue_lease_ms
        )
        locked: set[MessageQueue] = set()
        for broker, lease in leases.items():
            if isinstance(lease, RocketliteError):
                log.warning(
                    "group %r: cannot lock queues on broker %r: %s", self.group, broker, lease
                )
                continue
            for mq in sorted(lease.queues):
                locked.add(mq)
                self._start_queue(mq, sent + lease.lease_ms / 1000)
        for mq in pending:
            if mq not in locked and mq not in self._waiting_logged:
                self._waiting_logged.add(mq)
                log.info(
                    "group %r: waiting for the previous owner of %s to release it", self.group, mq
                )

    def _start_queue(self, mq: MessageQueue, lease_deadline: float) -> None:
        with self._lock:
            if mq not in self._pending or self._stopping.is_set():
                return
        try:
            offset = self._start_offset(mq)
        except RocketliteError as exc:
            log.warning("group %r: cannot find where to start %s: %s", self.group, mq, exc)
            return
        with self._lock:
            st = _QueueState(mq, lease_deadline)
            st.next_offset = offset
            self._offsets.update_offset(mq, offset, increase_only=False)
            self._states[mq] = st
            self._pending.discard(mq)
            self._waiting_logged.discard(mq)
        log.info("group %r: %s consuming %s from offset %d", self.group, self.client_id, mq, offset)
        self._schedule_pull(st)

    def _start_offset(self, mq: MessageQueue) -> int:
        """The committed offset, else the ConsumeFromWhere start (facts sheet section 6)."""
        read = (
            ReadOffsetType.READ_FROM_STORE
            if self.message_model == "CLUSTERING"
            else ReadOffsetType.MEMORY_FIRST_THEN_STORE
        )
        committed = self._offsets.read_offset(mq, read)
        if committed >= 0:
            return committed
        config = self.config
        stamp = config.consume_timestamp_ms if config.consume_from == "TIMESTAMP" else None
        answer = offset_rpc.query_queue_offsets(self._cluster, [mq], stamp)[mq]
        if mq.topic.startswith(RETRY_PREFIX) or config.consume_from == "FIRST_OFFSET":
            return answer.min_offset
        if config.consume_from == "TIMESTAMP" and answer.timestamp_offset is not None:
            return answer.timestamp_offset
        return answer.max_offset

    def _renew_leases(self) -> None:
        if self.message_model != "CLUSTERING":
            return
        with self._lock:
            held = [mq for mq, st in self._states.items() if not st.released or st.release_pending]
        if not held:
            return
        sent = time.monotonic()
        leases = lock_queues(
            self._cluster, self.group, self.client_id, held, self.config.queue_lease_ms
        )
        for broker, lease in leases.items():
            if isinstance(lease, RocketliteError):
                log.warning(
                    "group %r: cannot renew queue leases on broker %r: %s; its queues pause "
                    "when the leases run out",
                    self.group,
                    broker,
                    lease,
                )
                continue
            for mq in held:
                if mq.broker_name != broker:
                    continue
                st = self._states.get(mq)
                if st is None:
                    continue
                if mq in lease.queues:
                    st.lease_deadline = sent + lease.lease_ms / 1000
                else:
                    self._lose(st)

    def _unlock_quietly(self, mqs: Iterable[MessageQueue]) -> None:
        """Release leases we may hold (a no-op on the broker for those we do not)."""
        mqs = sorted(mqs)
        if not mqs or self.message_model != "CLUSTERING":
            return
        try:
            unlock_queues(self._cluster, self.group, self.client_id, mqs)
        except RocketliteError as exc:
            log.warning("group %r: cannot release %d queues: %s", self.group, len(mqs), exc)

    def _lose(self, st: _QueueState) -> None:
        """Our lease on ``st`` ran out and another member holds the queue: stop at once."""
        log.warning(
            "group %r: the lease on %s expired and another member took the queue; stopping it "
            "(messages in flight may be delivered twice)",
            self.group,
            st.mq,
        )
        with st.lock:
            st.phase = RELEASED
        st.cancel_pull()
        with self._lock:
            self._states.pop(st.mq, None)
        self._offsets.remove_offset(st.mq)

    def _start_drain(self, st: _QueueState) -> None:
        with st.lock:
            st.phase = DRAINING
            st.drain_deadline = time.monotonic() + self.config.drain_timeout_ms / 1000
        st.cancel_pull()
        log.info(
            "group %r: handing %s over; %d messages still in flight",
            self.group,
            st.mq,
            st.pq.msg_count,
        )
        self._wake.set()

    def _finish_drains(self, now: float) -> None:
        for st in self._draining():
            in_flight = st.pq.msg_count
            if st.phase == DRAINING and in_flight and now < st.drain_deadline:
                continue
            if st.phase == DRAINING and in_flight:
                log.warning(
                    "group %r: %d messages of %s were still being consumed after %d ms; "
                    "committing what is done, the rest may be delivered again",
                    self.group,
                    in_flight,
                    st.mq,
                    self.config.drain_timeout_ms,
                )
            self._release(st, now)

    def _release(self, st: _QueueState, now: float) -> None:
        """Commit ``st``'s offset synchronously, then give up its lease.

        The lease is kept while the commit fails (retried every second, for up to
        ``drain_timeout_ms``): releasing it first would let the next owner start from an
        older offset and deliver messages twice.
        """
        if not st.release_pending:
            with st.lock:
                st.phase = RELEASED  # nothing more is consumed: the offset below is final
            offset = st.pq.committable_offset()
            if offset >= 0:
                self._offsets.update_offset(st.mq, offset)
            st.release_pending = True
            st.release_give_up_at = now + self.config.drain_timeout_ms / 1000
        elif now < st.release_retry_at:
            return
        try:
            self._offsets.persist(st.mq)
        except RocketliteError as exc:
            if now < st.release_give_up_at:
                st.release_retry_at = now + 1.0
                log.warning(
                    "group %r: cannot commit the offset of %s before handing it over (%s); "
                    "keeping its lease and trying again",
                    self.group,
                    st.mq,
                    exc,
                )
                return
            log.warning(
                "group %r: gave up committing the offset of %s (%s); releasing it anyway, so "
                "the next owner may deliver some messages again",
                self.group,
                st.mq,
                exc,
            )
        committed = self._offsets.read_offset(st.mq, ReadOffsetType.READ_FROM_MEMORY)
        self._offsets.remove_offset(st.mq)
        with self._lock:
            self._states.pop(st.mq, None)
        st.release_pending = False
        self._unlock_quietly([st.mq])
        log.info("group %r: released %s at offset %d", self.group, st.mq, committed)
        # given back to us while its commit was being retried: start it again
        self._restart_if_allocated(st.mq)

    # --- shutdown ------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Leave the group cleanly: stop pulling, let in-flight messages finish (up to
        ``drain_timeout_ms``), commit every offset, release the leases. Idempotent."""
        if self._stopping.is_set():
            return
        if not self._started:
            self._stopping.set()
            self._cluster.close()
            return
        if threading.current_thread().name.startswith("rmq-consume-"):
            # called by the listener: waiting here for in-flight messages would wait for
            # this very call, so the shutdown runs on its own thread
            log.info("group %r: shutdown() called from the listener; shutting down in the "
                     "background", self.group)  # fmt: skip
            threading.Thread(target=self.shutdown, name="rmq-push-shutdown").start()
            return
        self._stopping.set()
        self._wake.set()
        self._events.put(("stop",))
        for watch in list(self._watches.values()):
            watch.cancel()
        for thread in self._threads:
            thread.join(10)
        with self._lock:
            states = list(self._states.values())
            leftover = sorted(self._pending)
            self._pending.clear()
        self._unlock_quietly(leftover)  # leases granted to queues not started yet
        now = time.monotonic()
        for st in states:
            with st.lock:
                if st.phase == ACTIVE:
                    st.phase = DRAINING
                    st.drain_deadline = now + self.config.drain_timeout_ms / 1000
            st.cancel_pull()
        if self.message_model == "CLUSTERING":
            unregister(self._cluster, self.client_id, self.group)
        next_renew = now + self.config.queue_lease_ms / 3000
        while self._draining():
            now = time.monotonic()
            if now >= next_renew:
                self._renew_leases()
                next_renew = now + self.config.queue_lease_ms / 3000
            self._finish_drains(now)
            time.sleep(0.02)
        self._pool_closed = True
        if self._timers is not None:
            self._timers.stop()
        if self._service is not None:
            self._service.shutdown()
        self._cluster.close()
        log.info("push consumer %s of group %r shut down", self.client_id, self.group)

    def __enter__(self) -> PushConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
