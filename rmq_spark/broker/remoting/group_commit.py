"""Group commit of small concurrent sends: the event loop gathers the sends that arrive
while the store is busy and hands it one batch per queue, answering each send with its own
slice of the result.

Thirty-two producer threads sending one message a request cost the store thirty-two appends
(each with a fixed cost for encoding, locking and a thread hop) when written one by one;
gathered, they are a handful of appends. A send waits only while an earlier group is being
written, so a lone send goes out at once and a busy broker writes bigger groups, as a
database's group commit does.

Each group is one :meth:`WritePath.put_messages` call, so a group is stored whole or not at all.
When a group is refused (one message of it is too big, say), each of its sends is written
on its own, so only the bad one fails.

Call :meth:`GroupCommit.put` on the event loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from rmq_spark.broker.core.broker import Broker
from rmq_spark.broker.core.messaging import AppendResult
from rmq_spark.broker.workers import Workers
from rmq_spark.errors import RocketliteError

log = logging.getLogger("rmq_spark.broker")

#: what a send comes to: its share of the append, or why it was not stored
Outcome = AppendResult | BaseException

#: messages of one group at most (the store takes any number; answers stay prompt)
MAX_GROUP_MESSAGES = 4096


@dataclass
class _Send:
    bodies: Sequence[bytes]
    properties: Sequence[bytes]
    tags: Sequence[str | None]
    born_timestamps: Sequence[int]
    flags: Sequence[int]
    reconsume_times: int
    #: called with the send's AppendResult or its error
    done: Callable[[Outcome], None] = field(repr=False)


# Sends join a group only when everything the store writes once per append is the same.
_Key = tuple[str, int, str, int]  # topic, queue id, born host, sysflag


class GroupCommit:
    def __init__(self, broker: Broker, workers: Workers) -> None:
        self._broker = broker
        self._workers = workers
        self._pending: dict[_Key, list[_Send]] = {}
        self._writing = False
        # With asynchronous flushing an append only copies into mapped memory: cheaper on
        # the event loop than the hand-over to a worker and back. A synchronous flush waits
        # for the disk, which only a worker may do.
        self._inline = broker.config.flush_mode != "SYNC"
        #: groups written and sends they carried (for tests and statistics)
        self.groups_written = 0
        self.sends_written = 0

    async def put(
        self,
        topic: str,
        queue_id: int,
        bodies: Sequence[bytes],
        properties: Sequence[bytes],
        tags: Sequence[str | None],
        *,
        born_host: str,
        born_timestamps: Sequence[int],
        flags: Sequence[int],
        reconsume_times: int = 0,
        sysflag: int = 0,
    ) -> AppendResult:
        """Store the messages (in this order, contiguous in their queue) and return their
        offsets, as ``put_messages`` would."""
        future = asyncio.get_running_loop().create_future()

        def settle(outcome: Outcome) -> None:
            if future.done():  # its request was cancelled (the client went away)
                return
            if isinstance(outcome, BaseException):
                future.set_exception(outcome)
            else:
                future.set_result(outcome)

        self.submit(
            topic, queue_id, bodies, properties, tags, settle,
            born_host=born_host, born_timestamps=born_timestamps, flags=flags,
            reconsume_times=reconsume_times, sysflag=sysflag,
        )  # fmt: skip
        return await future

    def submit(
        self,
        topic: str,
        queue_id: int,
        bodies: Sequence[bytes],
        properties: Sequence[bytes],
        tags: Sequence[str | None],
        done: Callable[[Outcome], None],
        *,
        born_host: str,
        born_timestamps: Sequence[int],
        flags: Sequence[int],
        reconsume_times: int = 0,
        sysflag: int = 0,
    ) -> None:
        """:meth:`put` without a coroutine: ``done(result or error)`` is called on the event
        loop once the messages are stored (the sends of a busy broker cost no task each)."""
        send = _Send(bodies, properties, tags, born_timestamps, flags, reconsume_times, done)
        self._pending.setdefault((topic, queue_id, born_host, sysflag), []).append(send)
        if not self._writing:
            self._writing = True
            # After the sends already queued on the loop (the rest of this read) file theirs.
            asyncio.get_running_loop().call_soon(self._write_next)

    def _write_next(self) -> None:
        if not self._pending:
            self._writing = False
            return
        groups, self._pending = self._pending, {}
        if self._inline:
            self._resolve(self._store_all(groups))
            self._writing = False
            return
        task = asyncio.get_running_loop().create_task(self._write(groups))
        task.add_done_callback(lambda _: self._write_next())

    async def _write(self, groups: dict[_Key, list[_Send]]) -> None:
        try:
            outcomes = await self._workers.run(self._store_all, groups)
        except BaseException as exc:  # the workers are gone (shutdown): fail every send
            self._resolve([(send, exc) for sends in groups.values() for send in sends])
            if not isinstance(exc, Exception):
                raise
            return
        self._resolve(outcomes)

    @staticmethod
    def _resolve(outcomes: list[tuple[_Send, Outcome]]) -> None:
        for send, outcome in outcomes:
            try:
                send.done(outcome)
            except Exception:  # one answer's failure must not lose the others
                log.exception("answering a grouped send failed")

    def _store_all(self, groups: dict[_Key, list[_Send]]) -> list[tuple[_Send, Outcome]]:
        """Runs on a worker: every group appended; (send, result or error) for each send."""
        outcomes: list[tuple[_Send, Outcome]] = []
        for key, sends in groups.items():
            for start in range(0, len(sends), MAX_GROUP_MESSAGES):
                outcomes += self._store_group(key, sends[start : start + MAX_GROUP_MESSAGES])
        return outcomes

    def _store_group(self, key: _Key, sends: list[_Send]) -> list[tuple[_Send, Outcome]]:
        if len(sends) > 1:
            try:
                result = self._append(key, sends)
            except RocketliteError:
                pass  # one send may be to blame: write each alone, so only it fails
            else:
                return list(zip(sends, split_result(result, sends), strict=True))
        outcomes: list[tuple[_Send, Outcome]] = []
        for send in sends:
            try:
                outcomes.append((send, self._append(key, [send])))
            except Exception as exc:
                outcomes.append((send, exc))
        return outcomes

    def _append(self, key: _Key, sends: list[_Send]) -> AppendResult:
        topic, queue_id, born_host, sysflag = key
        result = self._broker.writes.put_messages(
            topic,
            queue_id,
            [body for send in sends for body in send.bodies],
            [blob for send in sends for blob in send.properties],
            [tag for send in sends for tag in send.tags],
            born_host=born_host,
            born_timestamps=[ts for send in sends for ts in send.born_timestamps],
            flags=[flag for send in sends for flag in send.flags],
            reconsume_times=[send.reconsume_times for send in sends for _ in send.bodies],
            sysflag=sysflag,
        )
        self.groups_written += 1
        self.sends_written += len(sends)
        return result


def split_result(result: AppendResult, sends: Sequence[_Send]) -> list[AppendResult]:
    """One group's append result cut into each send's share, in order."""
    shares = []
    start = 0
    for send in sends:
        count = len(send.bodies)
        shares.append(
            AppendResult(
                result.topic,
                result.queue_id,
                result.first_queue_offset + start,
                result.physical_offsets[start : start + count],
                result.store_timestamp,
            )
        )
        start += count
    return shares
