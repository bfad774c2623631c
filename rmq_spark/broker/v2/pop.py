"""Pop consumption state of one (group, topic, queue), and the decisions made on it.

RocketMQ 5 consumers do not track offsets: they *receive* messages, which then stay
invisible to the rest of the group for a while, and *ack* each one. This module is that
bookkeeping for one queue, with no I/O, so every rule can be tested on its own:

- ``base``: every offset below it is acked; it is the group's committed offset.
- ``next``: the first offset never delivered.
- ``inflight``: offsets in ``[base, next)`` that were delivered and not acked, each with its
  delivery attempt, the time it becomes visible again and the token of its latest delivery
  (a receipt handle carries the token, so a stale or forged handle is told apart).

An offset in ``[base, next)`` that is not in flight is acked (or was filtered out by tag).

Rules:

- a message whose time ran out is delivered again, its attempt increased; once it has had
  ``max_attempts`` deliveries it goes to the dead-letter queue instead;
- a FIFO group gets nothing from a queue while any message of it is in flight and still
  invisible, and then the oldest due message first: one queue is consumed in order;
- an auto-renewed delivery (push consumers) stays invisible while its client is alive;
- an ack moves ``base`` to the first offset still in flight.

>>> q = PopQueue(base=0, next=0)
>>> q.deliver_new([0, 1], next_offset=2, now_ms=0, invisible_ms=1000, tokens=[7, 8])
>>> q.ack(0, 7), q.base
(True, 1)
>>> [o for o, _ in q.due(now_ms=1000)]
[1]
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field


@dataclass
class InFlight:
    """One delivered, not yet acked message."""

    attempt: int  # deliveries so far: 1 for the first
    visible_at_ms: int  # when it may be delivered again
    token: int  # its latest delivery; a receipt handle must carry it
    client_id: str = ""  # set for auto-renewed deliveries: invisible while this client lives


@dataclass
class PopQueue:
    base: int
    next: int
    inflight: dict[int, InFlight] = field(default_factory=dict)

    # -- what may be delivered ---------------------------------------------------------

    def due(
        self, now_ms: int, alive: Callable[[str], bool] | None = None
    ) -> list[tuple[int, InFlight]]:
        """In-flight messages whose invisibility is over, oldest offset first.

        An auto-renewed delivery is due only once its client is gone (``alive`` says).
        """
        out = []
        for offset in sorted(self.inflight):
            entry = self.inflight[offset]
            if self._is_due(entry, now_ms, alive):
                out.append((offset, entry))
        return out

    @staticmethod
    def _is_due(entry: InFlight, now_ms: int, alive: Callable[[str], bool] | None) -> bool:
        if entry.client_id and alive is not None and alive(entry.client_id):
            return False
        return entry.visible_at_ms <= now_ms

    def blocked_for_fifo(self, now_ms: int, alive: Callable[[str], bool] | None = None) -> bool:
        """A FIFO group may take nothing from this queue while a message is invisible."""
        return any(not self._is_due(e, now_ms, alive) for e in self.inflight.values())

    def next_due_ms(self) -> int | None:
        """When the soonest in-flight message becomes visible (None: nothing in flight)."""
        times = [e.visible_at_ms for e in self.inflight.values() if not e.client_id]
        return min(times) if times else None

    # -- changes -----------------------------------------------------------------------

    def deliver_new(
        self,
        offsets: Sequence[int],
        *,
        next_offset: int,
        now_ms: int,
        invisible_ms: int,
        tokens: Sequence[int],
        client_id: str = "",
    ) -> None:
        """First deliveries of ``offsets`` (all >= ``next``); ``next_offset`` is where
        the read stopped (offsets skipped by a tag filter count as acked)."""
        for offset, token in zip(offsets, tokens, strict=True):
            self.inflight[offset] = InFlight(1, now_ms + invisible_ms, token, client_id)
        self.next = max(self.next, next_offset)
        self.advance()

    def redeliver(
        self,
        offset: int,
        *,
        now_ms: int,
        invisible_ms: int,
        token: int,
        client_id: str = "",
    ) -> InFlight:
        entry = self.inflight[offset]
        entry.attempt += 1
        entry.visible_at_ms = now_ms + invisible_ms
        entry.token = token
        entry.client_id = client_id
        return entry

    def ack(self, offset: int, token: int) -> bool:
        """Ack one delivery; False when the handle is not the message's latest delivery
        (acked already, redelivered since, or never delivered)."""
        entry = self.inflight.get(offset)
        if entry is None or entry.token != token:
            return False
        del self.inflight[offset]
        self.advance()
        return True

    def drop(self, offset: int) -> None:
        """Take a message out of flight for good (moved to the dead-letter queue)."""
        self.inflight.pop(offset, None)
        self.advance()

    def change_invisible(
        self, offset: int, token: int, *, now_ms: int, invisible_ms: int, new_token: int
    ) -> InFlight | None:
        """Make a delivery visible again after ``invisible_ms`` from now; None when the
        handle is stale. The old handle stops working: the answer carries a new one."""
        entry = self.inflight.get(offset)
        if entry is None or entry.token != token:
            return None
        entry.visible_at_ms = now_ms + invisible_ms
        entry.token = new_token
        entry.client_id = ""
        return entry

    def release_client(self, client_id: str, now_ms: int, delay_ms: int) -> int:
        """A client left: its auto-renewed messages become visible after ``delay_ms``."""
        count = 0
        for entry in self.inflight.values():
            if entry.client_id == client_id:
                entry.client_id = ""
                entry.visible_at_ms = min(entry.visible_at_ms, now_ms + delay_ms)
                count += 1
        return count

    def reset(self, offset: int) -> None:
        """Start again at ``offset`` (the group's offset was set by other means)."""
        self.base = self.next = offset
        self.inflight.clear()

    def advance(self) -> None:
        """Move ``base`` to the first offset still in flight (or ``next``)."""
        self.base = min(self.inflight) if self.inflight else self.next

    # -- durable form ------------------------------------------------------------------

    def to_json(self) -> list:
        return [
            self.base,
            self.next,
            [[o, e.attempt, e.visible_at_ms, e.token] for o, e in sorted(self.inflight.items())],
        ]

    @classmethod
    def from_json(cls, data: list) -> PopQueue:
        """Rebuild from :meth:`to_json`. Auto-renew owners are not kept: after a restart
        their clients are gone, so those messages are due at their recorded time."""
        base, nxt, entries = data
        queue = cls(int(base), int(nxt))
        for offset, attempt, visible_at, token in entries:
            queue.inflight[int(offset)] = InFlight(int(attempt), int(visible_at), int(token))
        return queue


def attempts_exhausted(
    due: Iterable[tuple[int, InFlight]], max_attempts: int
) -> tuple[list[int], list[int]]:
    """Split due offsets into (to deliver again, to dead-letter): a message that has had
    ``max_attempts`` deliveries is not delivered again."""
    again: list[int] = []
    dead: list[int] = []
    for offset, entry in due:
        (dead if entry.attempt >= max_attempts else again).append(offset)
    return again, dead
