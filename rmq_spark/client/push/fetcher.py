"""The push consumer's pull side: one thread that long-polls each owned queue.

Pulls run as gRPC futures; their answers come back to the same thread through one event
queue, which decodes them, puts the messages into the queue's :class:`ProcessQueue` and
hands them to the consume service. Flow control per queue: a queue with too many messages
(or bytes) waiting is pulled again a little later.
"""

from __future__ import annotations

import logging
import queue
from typing import Any

from rmq_spark.client.connection import PendingCall
from rmq_spark.client.consumer import READ_ALL, ReadFilter
from rmq_spark.client.push.consume import ConcurrentService, OrderlyService
from rmq_spark.client.push.message import PulledColumns, messages_of
from rmq_spark.client.push.queue_phase import Event, Phase
from rmq_spark.client.push.state import MemberState, QueueState
from rmq_spark.errors import RocketliteError
from rmq_spark.structs import PullStatus
from rmq_spark.wire.proto_gen.rocketlite.v1 import messaging_pb2
from rmq_spark.wire.pull import decode_pull_response
from rmq_spark.wire.v1 import mq_to_pb, pull_status_from_pb

__all__ = ["Fetcher"]

log = logging.getLogger("rmq_spark.client.push")


class Fetcher:
    """Pulls the owned queues of ``member`` and hands what comes back to ``service``."""

    def __init__(self, member: MemberState) -> None:
        self.member = member
        self.service: ConcurrentService | OrderlyService | None = None
        self._events: queue.Queue = queue.Queue()

    def schedule_pull(self, st: QueueState, delay_s: float = 0.0) -> None:
        if delay_s <= 0:
            self._events.put(("pull", st))
        else:
            self.member.later(delay_s, self._events.put, ("pull", st))

    def stop(self) -> None:
        """Make :meth:`run` return."""
        self._events.put(("stop",))

    def run(self) -> None:
        """The pull thread's loop."""
        member = self.member
        while not member.stopping.is_set():
            event = self._events.get()
            if event[0] == "stop":
                return
            try:
                if event[0] == "pull":
                    self._pull(event[1])
                else:
                    self._pulled(*event[1:])
            except Exception:
                log.exception("group %r: pull of %s failed", member.group, event[1].mq)
                member.count("pulls_failed")
                self.schedule_pull(event[1], member.config.pull_retry_delay_ms / 1000)

    def _pull(self, st: QueueState) -> None:
        member = self.member
        if st.phase is not Phase.ACTIVE or member.stopping.is_set():
            return
        if not st.lease_valid():
            self.schedule_pull(st, 0.2)  # the housekeeping thread renews or drops it
            return
        config = member.config
        if (
            st.pq.msg_count > config.pull_threshold_for_queue
            or st.pq.msg_size > config.pull_threshold_size_for_queue_mb << 20
        ):
            member.count("flow_control")
            self.schedule_pull(st, 0.05)
            return
        with member.lock:  # the filter goes with the answer: subscribe() may change it
            read_filter = member.subscriptions.get(st.mq.topic, READ_ALL)
        request = messaging_pb2.PullMessagesRequest(
            consumer_group=member.group,
            queue=mq_to_pb(st.mq),
            queue_offset=st.next_offset,
            max_messages=config.pull_batch_size,
            max_bytes=config.pull_max_bytes,
            subscription_expression=read_filter.expression,
            suspend_timeout_ms=config.long_poll_ms,
            expression_type=read_filter.wire_type,
        )
        cluster = member.cluster
        conn = cluster.connection(cluster.endpoint_of(st.mq.broker_name))
        timeout_s = (config.long_poll_ms + config.long_poll_margin_ms) / 1000
        call = conn.start(conn.messaging.PullMessages, request, timeout_s=timeout_s)
        st.call = call
        offset = st.next_offset
        call.future.add_done_callback(
            lambda _f: self._events.put(("done", st, call, offset, read_filter))
        )

    def _pulled(
        self, st: QueueState, call: PendingCall, offset: int, read_filter: ReadFilter
    ) -> None:
        member = self.member
        if st.call is call:
            st.call = None
        if call.cancelled() or st.phase is not Phase.ACTIVE or member.stopping.is_set():
            return
        try:
            response = call.result()
        except RocketliteError as exc:
            member.count("pulls_failed")
            log.warning("group %r: pull of %s at %d failed: %s", member.group, st.mq, offset, exc)
            self.schedule_pull(st, member.config.pull_retry_delay_ms / 1000)
            return
        status = pull_status_from_pb(response.status)
        next_offset = response.next_begin_offset
        if status == PullStatus.FOUND:
            batch = read_filter.keep(decode_pull_response(st.mq, response))
            columns = PulledColumns(batch, st.mq)
            found = columns.num_rows
            if found:  # the messages read their fields from the batch when asked
                messages = messages_of(columns)
                offsets = columns.offsets()
                sizes = columns.body_sizes()
            with st.lock:
                if st.phase is not Phase.ACTIVE or st.next_offset != offset:
                    return
                st.next_offset = next_offset
                if found:
                    st.pq.put_messages(offsets, sizes)
                    member.count("pulled", found)
                    self.service.dispatch(st, messages, offsets)  # type: ignore[union-attr]
            if not found:
                self._skip_filtered(st)
        elif status == PullStatus.OFFSET_ILLEGAL:
            self._offset_illegal(st, offset, response)
            return
        else:  # NO_NEW_MSG, NO_MATCHED_MSG
            with st.lock:
                if st.next_offset == offset:
                    st.next_offset = next_offset
            self._skip_filtered(st)
        self.schedule_pull(st, member.config.pull_interval_ms / 1000)

    def _offset_illegal(self, st: QueueState, offset: int, response: Any) -> None:
        """The position was deleted (retention) or is past the end (the queue was
        recreated): start the queue over from where the broker says, with a fresh process
        queue, as RocketMQ drops and re-creates it. The new offset is committed also when it
        is lower (an increase-only commit would keep the bad one)."""
        member = self.member
        next_offset = response.next_begin_offset
        with st.lock:
            if st.next_offset != offset:
                return  # a stale pull chain
            # RELEASED at once: messages of the old process queue are not consumed
            if not st.apply(Event.OFFSET_ILLEGAL, only_from=Phase.ACTIVE):
                return  # handed over meanwhile
        st.cancel_pull()
        with member.lock:
            member.states.pop(st.mq, None)
        member.count("offset_illegal")
        log.error(
            "group %r: offset %d of %s is illegal (readable %d..%d): messages were deleted "
            "or the offset is past the end; jumping to %d and persisting it",
            member.group,
            offset,
            st.mq,
            response.min_offset,
            response.max_offset,
            next_offset,
        )
        try:
            member.offsets.reset_offset(st.mq, next_offset)
        except RocketliteError as exc:
            log.warning("group %r: cannot persist the offset of %s: %s", member.group, st.mq, exc)
            member.offsets.update_offset(st.mq, next_offset, increase_only=False)
        if not member.restart_if_allocated(st.mq):  # we still hold its lease
            member.unlock_quietly([st.mq])

    def _skip_filtered(self, st: QueueState) -> None:
        """Nothing of ``st`` in flight: its offset may move past messages the filter skipped
        (RocketMQ's correctTagsOffset)."""
        if st.pq.msg_count == 0 and not st.released:
            self.member.offsets.update_offset(st.mq, st.next_offset)
