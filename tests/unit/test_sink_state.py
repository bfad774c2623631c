"""How a broker ends a batch of the Spark sink (``sink_state.plan_end``), table by table:
first commits, replays after a driver died, participants of a multi-broker batch, rollbacks
and refusals."""

from __future__ import annotations

import pytest

from rmq_spark.broker.sink_transactions import state as ss
from rmq_spark.codec.properties import decode_properties
from rmq_spark.errors import InvalidArgumentError

NOW = 1_700_000_000_000
A, B = "broker-a", "broker-b"


def record(batch, decision):
    return ss.SinkRecord(batch, decision, NOW - 1)


def plan(record_, pending, batch_id, decision, commit=True, broker=A):
    return ss.plan_end(
        record_,
        pending,
        batch_id=batch_id,
        commit=commit,
        decision=decision,
        broker_name=broker,
        now_ms=NOW,
    )


CASES = [
    # (what, record, pending, batch, decision, broker) -> (already, commit, rollback, records)
    (
        "first batch of a sink commits its part and records the decision",
        None,
        {"t1": 10, "t2": 5},
        0,
        {A: [("t1", 10), ("t2", 5)]},
        A,
        (False, ["t1", "t2"], [], True),
    ),
    (
        "a failed task attempt's transaction is rolled back",
        record(0, {A: [("t0", 1)]}),
        {"t1": 10, "dead": 3},
        1,
        {A: [("t1", 10)]},
        A,
        (False, ["t1"], ["dead"], True),
    ),
    (
        "a replay of the last committed batch commits nothing and rolls its rows back",
        record(4, {A: [("old", 7)]}),
        {"replay": 7},
        4,
        {A: [("replay", 7)]},
        A,
        (True, [], ["replay"], False),
    ),
    (
        "a batch older than the last committed one changes nothing",
        record(9, {A: [("t9", 1)]}),
        {"late": 2},
        3,
        {A: [("late", 2)]},
        A,
        (True, [], [], False),
    ),
    (
        "a participant commits the coordinator's decision for its broker",
        record(2, {B: [("x", 1)]}),
        {"orig-b": 4, "replay-b": 4},
        3,
        {A: [("orig-a", 6)], B: [("orig-b", 4)]},
        B,
        (False, ["orig-b"], ["replay-b"], True),
    ),
    (
        "a broker with no part of the batch rolls its strays back and records it",
        None,
        {"stray": 2},
        0,
        {B: [("t", 1)]},
        A,
        (False, [], ["stray"], True),
    ),
    (
        "an empty batch is recorded",
        record(0, {}),
        {},
        1,
        {},
        A,
        (False, [], [], True),
    ),
]


@pytest.mark.parametrize(
    "what, record_, pending, batch, decision, broker, expected", CASES, ids=[c[0] for c in CASES]
)
def test_plan_end(what, record_, pending, batch, decision, broker, expected):
    already, commit, rollback, records = expected
    got = plan(record_, pending, batch, decision, broker=broker)
    assert (got.already, got.commit, got.rollback) == (already, commit, rollback)
    assert (got.record is not None) == records
    if records:
        assert got.record == ss.SinkRecord(batch, decision, NOW)


def test_a_replay_answers_the_recorded_decision():
    held = {A: [("orig", 3)], B: [("orig-b", 2)]}
    got = plan(record(5, held), {}, 5, {A: [("new", 3)]})
    assert got.already and got.decision == held


def test_rollback_rolls_back_every_pending_transaction_and_records_nothing():
    got = plan(record(1, {}), {"b": 1, "a": 2}, 2, {A: [("a", 2)]}, commit=False)
    assert (got.already, got.commit, got.rollback, got.record) == (False, [], ["a", "b"], None)


@pytest.mark.parametrize(
    "pending, decision, message",
    [
        ({}, {A: [("gone", 3)]}, "transaction 'gone' is not pending on broker broker-a"),
        ({"t": 2}, {A: [("t", 3)]}, "staged 2 messages on broker broker-a, the commit counts 3"),
    ],
)
def test_a_commit_of_rows_the_broker_does_not_hold_is_refused(pending, decision, message):
    with pytest.raises(InvalidArgumentError, match=message):
        plan(None, pending, 0, decision)


def test_stage_marks_round_trip():
    marks = ss.stage_marks("q-1", "q-1.b0.p2.a0.ff", 3, "orders", 2, 4, 500)
    mark = ss.parse_marks(decode_properties(marks))
    assert mark == ss.StageMark("q-1", "q-1.b0.p2.a0.ff", 3, "orders", 2, 4, 500)
    assert mark.marks() == marks
    assert ss.parse_marks({"TAGS": "a"}) is None


def test_sink_record_json_round_trip():
    rec = ss.SinkRecord(7, {A: [("t", 3)], B: []}, NOW)
    assert ss.SinkRecord.from_json(rec.to_json()) == rec


@pytest.mark.parametrize(
    "oldest, expected",
    [
        ({}, []),
        ({"young": NOW - 1_000}, []),
        ({"at-the-limit": NOW - 60_000}, []),
        ({"just-past": NOW - 60_001}, ["just-past"]),
        ({"b-old": NOW - 90_000, "young": NOW, "a-old": NOW - 61_000}, ["b-old", "a-old"]),
    ],
)
def test_transactions_older_than_the_timeout_expire(oldest, expected):
    assert ss.expired(oldest, now_ms=NOW, timeout_ms=60_000) == expected
