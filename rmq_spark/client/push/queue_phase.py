"""A queue's phase in one push-consumer member, and the decisions that move it: pure code.

:func:`next_phase` is the only place that says which phase an event leads to;
:meth:`QueueState.apply <rmq_spark.client.push.state.QueueState.apply>` is the only place that
changes a queue's phase, through it. The plans (:func:`plan_topic`, :func:`plan_unsubscribed`,
:func:`plan_shutdown`) say what a rebalance or a shutdown does to the queues; the coordinator,
the queue ownership and the consumer carry them out (RPCs, locks, logs). Nothing here does
I/O or reads a clock.

Phases, in order (``ownership.py`` tells a queue's life):

======================  =====================================================================
``PENDING``             allocated to this member, lease not granted yet (the queue is in
                        ``MemberState.pending``; a ``QueueState`` leaves this phase before
                        any other thread sees it)
``ACTIVE``              lease held; pulled and consumed
``DRAINING``            allocated elsewhere (or shutting down): no more pulls, what was pulled
                        is still consumed
``RELEASING``           nothing more is consumed; the final offset commit and the unlock are
                        still owed (the commit is retried while it fails)
``RELEASED``            gone from this member: committed and unlocked, or dropped at once
                        (lease lost, offset illegal)
======================  =====================================================================
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from rmq_spark.structs import MessageQueue

__all__ = [
    "Event",
    "IllegalTransitionError",
    "Phase",
    "RebalancePlan",
    "commit_event",
    "drain_event",
    "legal_events",
    "next_phase",
    "plan_shutdown",
    "plan_topic",
    "plan_unsubscribed",
    "restart_after_release",
]


class Phase(enum.Enum):
    """Where a queue stands in this member (the module docstring describes each)."""

    PENDING = "PENDING"
    ACTIVE = "ACTIVE"
    DRAINING = "DRAINING"
    RELEASING = "RELEASING"
    RELEASED = "RELEASED"

    @property
    def lease_held(self) -> bool:
        """The member holds the queue's lease and renews it."""
        return self in (Phase.ACTIVE, Phase.DRAINING, Phase.RELEASING)

    @property
    def handing_over(self) -> bool:
        """The housekeeping thread still has work on it: a drain or the final commit."""
        return self in (Phase.DRAINING, Phase.RELEASING)

    @property
    def released(self) -> bool:
        """Nothing more of the queue is consumed, and its offset no longer moves."""
        return self in (Phase.RELEASING, Phase.RELEASED)


class Event(enum.Enum):
    """What happened to a queue."""

    LEASE_GRANTED = "LEASE_GRANTED"  # lease taken and start offset found
    ALLOCATED_ELSEWHERE = "ALLOCATED_ELSEWHERE"  # rebalance, or its topic unsubscribed
    ALLOCATED_AGAIN = "ALLOCATED_AGAIN"  # given back before its hand-over finished
    SHUTDOWN = "SHUTDOWN"  # the member leaves its group
    DRAINED = "DRAINED"  # no message in flight any more
    DRAIN_TIMED_OUT = "DRAIN_TIMED_OUT"  # messages still in flight after drain_timeout_ms
    COMMITTED = "COMMITTED"  # the final offset commit succeeded
    COMMIT_FAILED = "COMMIT_FAILED"  # it failed; tried again later
    GAVE_UP = "GAVE_UP"  # it kept failing for drain_timeout_ms: released anyway
    LEASE_LOST = "LEASE_LOST"  # renewal refused: another member holds the queue
    OFFSET_ILLEGAL = "OFFSET_ILLEGAL"  # the pull position is gone: start over


_NEXT: dict[tuple[Phase, Event], Phase] = {
    (Phase.PENDING, Event.LEASE_GRANTED): Phase.ACTIVE,
    (Phase.ACTIVE, Event.ALLOCATED_ELSEWHERE): Phase.DRAINING,
    (Phase.ACTIVE, Event.SHUTDOWN): Phase.DRAINING,
    (Phase.ACTIVE, Event.LEASE_LOST): Phase.RELEASED,
    (Phase.ACTIVE, Event.OFFSET_ILLEGAL): Phase.RELEASED,
    (Phase.DRAINING, Event.ALLOCATED_AGAIN): Phase.ACTIVE,
    (Phase.DRAINING, Event.DRAINED): Phase.RELEASING,
    (Phase.DRAINING, Event.DRAIN_TIMED_OUT): Phase.RELEASING,
    (Phase.DRAINING, Event.LEASE_LOST): Phase.RELEASED,
    (Phase.RELEASING, Event.COMMIT_FAILED): Phase.RELEASING,
    (Phase.RELEASING, Event.COMMITTED): Phase.RELEASED,
    (Phase.RELEASING, Event.GAVE_UP): Phase.RELEASED,
    (Phase.RELEASING, Event.LEASE_LOST): Phase.RELEASED,
}


class IllegalTransitionError(RuntimeError):
    """An event came in a phase that has no transition for it (a bug of the push consumer)."""


def legal_events(phase: Phase) -> list[Event]:
    """The events ``phase`` has a transition for, in :class:`Event` order."""
    return [event for event in Event if (phase, event) in _NEXT]


def next_phase(phase: Phase, event: Event) -> Phase:
    """The phase a queue in ``phase`` moves to on ``event``; raises
    :class:`IllegalTransitionError` when ``phase`` has no transition for ``event``."""
    try:
        return _NEXT[(phase, event)]
    except KeyError:
        legal = ", ".join(e.name for e in legal_events(phase)) or "none: it is final"
        raise IllegalTransitionError(
            f"a queue in phase {phase.name} cannot take event {event.name} (legal events: "
            f"{legal}); the caller must check the phase under the queue's lock first"
        ) from None


def drain_event(in_flight: int, now: float, deadline: float) -> Event | None:
    """What a draining queue with ``in_flight`` messages still being consumed does at
    ``now``: DRAINED when none are left, DRAIN_TIMED_OUT from ``deadline`` on, else None
    (keep waiting)."""
    if not in_flight:
        return Event.DRAINED
    if now >= deadline:
        return Event.DRAIN_TIMED_OUT
    return None


def commit_event(committed: bool, now: float, give_up_at: float) -> Event:
    """The outcome of a releasing queue's final commit attempt at ``now``: COMMITTED, or
    COMMIT_FAILED (tried again) before ``give_up_at``, GAVE_UP from then on."""
    if committed:
        return Event.COMMITTED
    return Event.COMMIT_FAILED if now < give_up_at else Event.GAVE_UP


def restart_after_release(
    mq: MessageQueue, allocation: Mapping[str, frozenset[MessageQueue]], stopping: bool
) -> bool:
    """Whether a queue this member just released starts over as pending: the last
    rebalance gave it to this member (it came back while its release was under way, or it
    was dropped after an illegal offset) and the member is not stopping."""
    return not stopping and mq in allocation.get(mq.topic, frozenset())


@dataclass(frozen=True)
class RebalancePlan:
    """What to do to the queues after a rebalance of one topic, for unsubscribed topics, or
    at shutdown.

    ``to_drain``: ACTIVE queues to stop pulling (their hand-over starts);
    ``to_reactivate``: DRAINING queues to pull again; ``pending_add``: queues to take
    (their lease is asked for); ``pending_drop``: pending queues no longer wanted (their
    lease, perhaps granted meanwhile, is released).
    """

    to_drain: frozenset[MessageQueue] = frozenset()
    to_reactivate: frozenset[MessageQueue] = frozenset()
    pending_add: frozenset[MessageQueue] = frozenset()
    pending_drop: frozenset[MessageQueue] = frozenset()


def plan_topic(
    topic: str,
    allocated: frozenset[MessageQueue],
    phases: Mapping[MessageQueue, Phase],
    pending: Collection[MessageQueue],
    stopping: bool,
) -> RebalancePlan:
    """The plan for ``topic`` once the rebalance gave this member ``allocated``.

    ``phases`` are the phases of the queues the member has state for (any topic),
    ``pending`` the queues waiting for their lease (any topic). A queue moved away drains
    if ACTIVE; one moved back while DRAINING is pulled again; one moved back while
    RELEASING or RELEASED is left alone (:func:`restart_after_release` starts it over once
    released). A stopping member takes nothing new and pulls nothing again.
    """
    owned = {mq: phase for mq, phase in phases.items() if mq.topic == topic}
    to_drain = {mq for mq, ph in owned.items() if ph is Phase.ACTIVE and mq not in allocated}
    pending_drop = {mq for mq in pending if mq.topic == topic and mq not in allocated}
    if stopping:
        return RebalancePlan(to_drain=frozenset(to_drain), pending_drop=frozenset(pending_drop))
    return RebalancePlan(
        to_drain=frozenset(to_drain),
        to_reactivate=frozenset(
            mq for mq, ph in owned.items() if ph is Phase.DRAINING and mq in allocated
        ),
        pending_add=frozenset(mq for mq in allocated if mq not in owned and mq not in pending),
        pending_drop=frozenset(pending_drop),
    )


def plan_unsubscribed(
    subscribed: Collection[str],
    phases: Mapping[MessageQueue, Phase],
    pending: Collection[MessageQueue],
) -> RebalancePlan:
    """The plan for the queues of topics no longer in ``subscribed``: ACTIVE ones drain,
    pending ones are dropped."""
    return RebalancePlan(
        to_drain=frozenset(
            mq for mq, ph in phases.items() if ph is Phase.ACTIVE and mq.topic not in subscribed
        ),
        pending_drop=frozenset(mq for mq in pending if mq.topic not in subscribed),
    )


def plan_shutdown(
    phases: Mapping[MessageQueue, Phase], pending: Collection[MessageQueue]
) -> RebalancePlan:
    """The plan of a member leaving its group: every ACTIVE queue drains, every pending one
    is dropped; queues already DRAINING or RELEASING carry on."""
    return RebalancePlan(
        to_drain=frozenset(mq for mq, ph in phases.items() if ph is Phase.ACTIVE),
        pending_drop=frozenset(pending),
    )
