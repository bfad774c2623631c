"""A push-consumer queue's phases and the rebalance and shutdown plans, without a broker:
which events move a queue where, which are refused, and what a rebalance does to the owned
and pending queues (the broker-backed hand-overs are in tests/integration)."""

from __future__ import annotations

import itertools

import pytest

from rmq_spark.client.push.queue_phase import (
    Event,
    IllegalTransitionError,
    Phase,
    RebalancePlan,
    commit_event,
    drain_event,
    legal_events,
    next_phase,
    plan_shutdown,
    plan_topic,
    plan_unsubscribed,
    restart_after_release,
)
from rmq_spark.client.push.state import QueueState
from rmq_spark.structs import MessageQueue

P, A, D, RG, RD = Phase.PENDING, Phase.ACTIVE, Phase.DRAINING, Phase.RELEASING, Phase.RELEASED
E = Event

Q0 = MessageQueue("orders", "broker-a", 0)
Q1 = MessageQueue("orders", "broker-a", 1)
Q2 = MessageQueue("orders", "broker-b", 0)
Q3 = MessageQueue("orders", "broker-b", 1)
R0 = MessageQueue("%RETRY%g1", "broker-a", 0)
N0 = MessageQueue("news", "broker-a", 0)

#: every legal transition, written out: (phase, event, next phase)
LEGAL = [
    (P, E.LEASE_GRANTED, A),
    (A, E.ALLOCATED_ELSEWHERE, D),
    (A, E.SHUTDOWN, D),
    (A, E.LEASE_LOST, RD),
    (A, E.OFFSET_ILLEGAL, RD),
    (D, E.ALLOCATED_AGAIN, A),
    (D, E.DRAINED, RG),
    (D, E.DRAIN_TIMED_OUT, RG),
    (D, E.LEASE_LOST, RD),
    (RG, E.COMMIT_FAILED, RG),
    (RG, E.COMMITTED, RD),
    (RG, E.GAVE_UP, RD),
    (RG, E.LEASE_LOST, RD),
]
ILLEGAL = sorted(
    set(itertools.product(Phase, Event)) - {(phase, event) for phase, event, _ in LEGAL},
    key=lambda pair: (pair[0].name, pair[1].name),
)


# --- the transition function --------------------------------------------------------------


@pytest.mark.parametrize(("phase", "event", "after"), LEGAL)
def test_every_legal_transition(phase: Phase, event: Event, after: Phase) -> None:
    assert next_phase(phase, event) is after


@pytest.mark.parametrize(("phase", "event"), ILLEGAL)
def test_every_other_transition_is_refused_naming_phase_and_event(
    phase: Phase, event: Event
) -> None:
    with pytest.raises(IllegalTransitionError, match=f"phase {phase.name} .*event {event.name}"):
        next_phase(phase, event)


def test_the_tables_cover_every_pair() -> None:
    assert len(LEGAL) + len(ILLEGAL) == len(Phase) * len(Event) == 55


@pytest.mark.parametrize(
    ("phase", "events"),
    [
        (P, [E.LEASE_GRANTED]),
        (A, [E.ALLOCATED_ELSEWHERE, E.SHUTDOWN, E.LEASE_LOST, E.OFFSET_ILLEGAL]),
        (D, [E.ALLOCATED_AGAIN, E.DRAINED, E.DRAIN_TIMED_OUT, E.LEASE_LOST]),
        (RG, [E.COMMITTED, E.COMMIT_FAILED, E.GAVE_UP, E.LEASE_LOST]),
        (RD, []),
    ],
)
def test_legal_events_of_each_phase(phase: Phase, events: list[Event]) -> None:
    assert legal_events(phase) == events


def test_the_error_lists_what_is_legal_and_says_released_is_final() -> None:
    with pytest.raises(IllegalTransitionError, match="legal events: ALLOCATED_AGAIN, DRAINED"):
        next_phase(D, E.SHUTDOWN)
    with pytest.raises(IllegalTransitionError, match="none: it is final"):
        next_phase(RD, E.LEASE_GRANTED)


@pytest.mark.parametrize(
    ("phase", "lease_held", "handing_over", "released"),
    [
        (P, False, False, False),
        (A, True, False, False),
        (D, True, True, False),
        (RG, True, True, True),
        (RD, False, False, True),
    ],
)
def test_what_each_phase_means_to_the_threads(
    phase: Phase, lease_held: bool, handing_over: bool, released: bool
) -> None:
    # lease_held: renewed; handing_over: worked on by housekeeping; released: not consumed
    assert (phase.lease_held, phase.handing_over, phase.released) == (
        lease_held,
        handing_over,
        released,
    )


# --- a queue's life, event by event -------------------------------------------------------


@pytest.mark.parametrize(
    ("events", "phases"),
    [
        # graceful hand-over to another member
        (
            [E.LEASE_GRANTED, E.ALLOCATED_ELSEWHERE, E.DRAINED, E.COMMITTED],
            [A, D, RG, RD],
        ),
        # moved back while draining: pulled again, then handed over later
        (
            [E.LEASE_GRANTED, E.ALLOCATED_ELSEWHERE, E.ALLOCATED_AGAIN, E.ALLOCATED_ELSEWHERE],
            [A, D, A, D],
        ),
        # drain timeout with messages in flight: committed as far as done
        (
            [E.LEASE_GRANTED, E.ALLOCATED_ELSEWHERE, E.DRAIN_TIMED_OUT, E.COMMITTED],
            [A, D, RG, RD],
        ),
        # the final commit fails twice, then succeeds
        (
            [E.LEASE_GRANTED, E.SHUTDOWN, E.DRAINED, E.COMMIT_FAILED, E.COMMIT_FAILED, E.COMMITTED],
            [A, D, RG, RG, RG, RD],
        ),
        # the final commit keeps failing: given up, released anyway
        (
            [E.LEASE_GRANTED, E.ALLOCATED_ELSEWHERE, E.DRAINED, E.COMMIT_FAILED, E.GAVE_UP],
            [A, D, RG, RG, RD],
        ),
        # crashes: a lost lease releases at once, from any phase holding it
        ([E.LEASE_GRANTED, E.LEASE_LOST], [A, RD]),
        ([E.LEASE_GRANTED, E.ALLOCATED_ELSEWHERE, E.LEASE_LOST], [A, D, RD]),
        (
            [E.LEASE_GRANTED, E.SHUTDOWN, E.DRAINED, E.COMMIT_FAILED, E.LEASE_LOST],
            [A, D, RG, RG, RD],
        ),
        # an illegal pull offset drops the process queue at once
        ([E.LEASE_GRANTED, E.OFFSET_ILLEGAL], [A, RD]),
    ],
)
def test_a_queue_life(events: list[Event], phases: list[Phase]) -> None:
    st = QueueState(Q0, float("inf"))
    assert st.phase is P
    seen = []
    for event in events:
        assert st.apply(event)
        seen.append(st.phase)
        # what the consume threads read: nothing more is consumed once releasing
        assert st.released is (st.phase in (RG, RD))
    assert seen == phases


@pytest.mark.parametrize(
    ("start", "event", "only_from", "moved", "after"),
    [
        ([E.LEASE_GRANTED], E.ALLOCATED_ELSEWHERE, A, True, D),
        # the fetcher released it (illegal offset) after the rebalance looked: left alone
        ([E.LEASE_GRANTED, E.OFFSET_ILLEGAL], E.ALLOCATED_ELSEWHERE, A, False, RD),
        # reactivated meanwhile: no release
        ([E.LEASE_GRANTED, E.ALLOCATED_ELSEWHERE, E.ALLOCATED_AGAIN], E.DRAINED, D, False, A),
        ([E.LEASE_GRANTED, E.ALLOCATED_ELSEWHERE], E.ALLOCATED_AGAIN, D, True, A),
    ],
)
def test_apply_only_from_leaves_a_queue_that_moved_on(
    start: list[Event], event: Event, only_from: Phase, moved: bool, after: Phase
) -> None:
    st = QueueState(Q0, float("inf"))
    for e in start:
        st.apply(e)
    assert st.apply(event, only_from=only_from) is moved
    assert st.phase is after


def test_apply_refuses_an_illegal_event_and_keeps_the_phase() -> None:
    st = QueueState(Q0, float("inf"))
    with pytest.raises(IllegalTransitionError, match=r"phase PENDING .*event DRAINED"):
        st.apply(E.DRAINED)
    assert st.phase is P


# --- drain and commit outcomes ------------------------------------------------------------


@pytest.mark.parametrize(
    ("in_flight", "now", "deadline", "event"),
    [
        (0, 10.0, 15.0, E.DRAINED),
        (0, 20.0, 15.0, E.DRAINED),
        (3, 10.0, 15.0, None),  # still consuming: wait
        (3, 15.0, 15.0, E.DRAIN_TIMED_OUT),
        (3, 16.0, 15.0, E.DRAIN_TIMED_OUT),
    ],
)
def test_drain_event(in_flight: int, now: float, deadline: float, event: Event | None) -> None:
    assert drain_event(in_flight, now, deadline) is event


@pytest.mark.parametrize(
    ("committed", "now", "give_up_at", "event"),
    [
        (True, 10.0, 15.0, E.COMMITTED),
        (True, 20.0, 15.0, E.COMMITTED),
        (False, 10.0, 15.0, E.COMMIT_FAILED),
        (False, 14.9, 15.0, E.COMMIT_FAILED),
        (False, 15.0, 15.0, E.GAVE_UP),
    ],
)
def test_commit_event(committed: bool, now: float, give_up_at: float, event: Event) -> None:
    assert commit_event(committed, now, give_up_at) is event


def test_a_commit_failing_every_second_is_given_up_at_the_drain_timeout() -> None:
    st = QueueState(Q0, float("inf"))
    for event in (E.LEASE_GRANTED, E.ALLOCATED_ELSEWHERE, E.DRAINED):
        st.apply(event)
    give_up_at = 100.0 + 5.0  # released at 100 s, drain_timeout_ms 5000
    outcomes = []
    for now in (100.0, 101.0, 102.0, 103.0, 104.0, 105.0):
        event = commit_event(False, now, give_up_at)
        st.apply(event)
        outcomes.append((event, st.phase))
        if st.phase is RD:
            break
    assert outcomes == [(E.COMMIT_FAILED, RG)] * 5 + [(E.GAVE_UP, RD)]


# --- rebalance of one topic ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("allocated", "phases", "pending", "stopping", "plan"),
    [
        # first allocation: everything becomes pending
        ({Q0, Q1}, {}, set(), False, RebalancePlan(pending_add=frozenset({Q0, Q1}))),
        # already pending or owned: nothing new
        ({Q0, Q1}, {Q0: A}, {Q1}, False, RebalancePlan()),
        # a queue moved to another member: it drains
        ({Q0}, {Q0: A, Q1: A}, set(), False, RebalancePlan(to_drain=frozenset({Q1}))),
        # moved back while draining: pulled again
        ({Q0, Q1}, {Q0: A, Q1: D}, set(), False, RebalancePlan(to_reactivate=frozenset({Q1}))),
        # moved back while releasing (its commit is being retried): left to finish, then it
        # restarts (restart_after_release); not pending while it has state
        ({Q0, Q1}, {Q0: A, Q1: RG}, set(), False, RebalancePlan()),
        # moved back after an illegal offset released it (state not yet dropped): same
        ({Q0, Q1}, {Q0: A, Q1: RD}, set(), False, RebalancePlan()),
        # still elsewhere while draining or releasing: carry on
        (set(), {Q0: D, Q1: RG}, set(), False, RebalancePlan()),
        # a pending queue allocated elsewhere: dropped (its lease released)
        ({Q0}, {}, {Q0, Q1}, False, RebalancePlan(pending_drop=frozenset({Q1}))),
        # nothing allocated any more
        (
            set(),
            {Q0: A, Q1: D},
            {Q2},
            False,
            RebalancePlan(to_drain=frozenset({Q0}), pending_drop=frozenset({Q2})),
        ),
        # stopping: drains and drops, takes nothing new, pulls nothing again
        (
            {Q1, Q3},
            {Q0: A, Q1: D},
            {Q2},
            True,
            RebalancePlan(to_drain=frozenset({Q0}), pending_drop=frozenset({Q2})),
        ),
        # queues of other topics are not this plan's business
        ({Q0}, {Q0: A, R0: A, N0: D}, {N0, R0}, False, RebalancePlan()),
    ],
)
def test_plan_topic(
    allocated: set[MessageQueue],
    phases: dict[MessageQueue, Phase],
    pending: set[MessageQueue],
    stopping: bool,
    plan: RebalancePlan,
) -> None:
    assert plan_topic("orders", frozenset(allocated), phases, frozenset(pending), stopping) == plan


def test_a_queue_moved_away_and_back_in_three_rebalances() -> None:
    st = QueueState(Q1, float("inf"))
    st.apply(E.LEASE_GRANTED)
    plan = plan_topic("orders", frozenset({Q0}), {Q1: st.phase}, frozenset(), False)
    assert plan == RebalancePlan(to_drain=frozenset({Q1}), pending_add=frozenset({Q0}))
    st.apply(E.ALLOCATED_ELSEWHERE)
    plan = plan_topic("orders", frozenset({Q1}), {Q1: st.phase}, frozenset({Q0}), False)
    assert plan == RebalancePlan(to_reactivate=frozenset({Q1}), pending_drop=frozenset({Q0}))
    st.apply(E.ALLOCATED_AGAIN)
    assert st.phase is A


# --- unsubscribed topics, shutdown, restarts ------------------------------------------------


@pytest.mark.parametrize(
    ("subscribed", "phases", "pending", "plan"),
    [
        ({"orders", "news"}, {Q0: A, N0: A}, {Q1}, RebalancePlan()),
        (
            {"orders"},
            {Q0: A, N0: A},
            {MessageQueue("news", "broker-b", 3), Q1},
            RebalancePlan(
                to_drain=frozenset({N0}),
                pending_drop=frozenset({MessageQueue("news", "broker-b", 3)}),
            ),
        ),
        # already being handed over: carry on
        ({"orders"}, {N0: D, MessageQueue("news", "broker-a", 1): RG}, set(), RebalancePlan()),
        (
            set(),
            {Q0: A, R0: A},
            {Q1},
            RebalancePlan(to_drain=frozenset({Q0, R0}), pending_drop=frozenset({Q1})),
        ),
    ],
)
def test_plan_unsubscribed(
    subscribed: set[str],
    phases: dict[MessageQueue, Phase],
    pending: set[MessageQueue],
    plan: RebalancePlan,
) -> None:
    assert plan_unsubscribed(frozenset(subscribed), phases, frozenset(pending)) == plan


@pytest.mark.parametrize(
    ("phases", "pending", "plan"),
    [
        ({}, set(), RebalancePlan()),
        (
            {Q0: A, Q1: D, Q2: RG, N0: A},
            {R0},
            RebalancePlan(to_drain=frozenset({Q0, N0}), pending_drop=frozenset({R0})),
        ),
        ({Q1: D}, {Q0, Q2}, RebalancePlan(pending_drop=frozenset({Q0, Q2}))),
    ],
)
def test_plan_shutdown(
    phases: dict[MessageQueue, Phase], pending: set[MessageQueue], plan: RebalancePlan
) -> None:
    assert plan_shutdown(phases, frozenset(pending)) == plan


@pytest.mark.parametrize(
    ("allocation", "stopping", "restart"),
    [
        ({"orders": frozenset({Q0, Q1})}, False, True),  # still ours: start over
        ({"orders": frozenset({Q1})}, False, False),  # went elsewhere
        ({"news": frozenset({N0})}, False, False),  # topic unsubscribed meanwhile
        ({"orders": frozenset({Q0})}, True, False),  # the member is stopping
    ],
)
def test_a_released_queue_restarts_when_still_allocated(
    allocation: dict[str, frozenset[MessageQueue]], stopping: bool, restart: bool
) -> None:
    assert restart_after_release(Q0, allocation, stopping) is restart
