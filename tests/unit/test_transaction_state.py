"""The pure part of transactions: property shapes, pairing half messages with ops, due checks."""

from __future__ import annotations

import pytest

from rmq_spark.broker.transactions import state as ts
from rmq_spark.codec.properties import decode_properties, encode_properties
from rmq_spark.errors import InvalidArgumentError


def half(txid: str, offset: int, stored: int = 0, **kw) -> ts.HalfState:
    return ts.HalfState(txid, offset, offset * 100, stored, "Orders", 1, **kw)


def op(offset: int, tag: str = ts.REMOVE_TAG, outcome=ts.COMMIT, op_offset=0, txid=None):
    return ts.OpEntry(offset, tag, op_offset, 1000, txid, outcome, 0)


def test_half_properties_mark_the_message_and_keep_the_senders():
    blob = ts.half_properties(
        encode_properties({"a": "1", "UNIQ_KEY": "T1"}),
        topic="Orders",
        queue_id=2,
        tag="TagA",
        transaction_id="T1",
        check_after_ms=7_200_000,
    )
    fields = decode_properties(blob)
    assert fields == {
        "a": "1",
        "UNIQ_KEY": "T1",
        "TAGS": "TagA",
        "REAL_TOPIC": "Orders",
        "REAL_QID": "2",
        "TRAN_MSG": "true",
        "CHECK_IMMUNITY_TIME_IN_SECONDS": "3600",  # capped at one hour
    }
    committed = decode_properties(ts.committed_properties(blob))
    assert committed == {"a": "1", "UNIQ_KEY": "T1", "TAGS": "TagA", "TRAN_MSG": "true"}


def test_half_properties_refuse_another_unique_key():
    with pytest.raises(InvalidArgumentError, match="UNIQ_KEY"):
        ts.half_properties(
            encode_properties({"UNIQ_KEY": "X"}),
            topic="t",
            queue_id=0,
            tag=None,
            transaction_id="T1",
            check_after_ms=None,
        )


def test_pair_keeps_unresolved_halves_and_counts_checks():
    halves = [half("A", 0), half("B", 1), half("C", 2), half("D", 3)]
    ops = [
        op(0, outcome=ts.COMMIT, op_offset=0, txid="A"),
        op(2, ts.CHECK_TAG, None, op_offset=1, txid="C"),
        op(1, outcome=ts.ROLLBACK, op_offset=2, txid="B"),
        op(2, ts.CHECK_TAG, None, op_offset=3, txid="C"),
    ]
    paired = ts.pair(halves, ops, verified_op_offset=0)
    assert sorted(paired.pending) == ["C", "D"]
    assert paired.pending["C"].checks == 2
    assert paired.pending["C"].last_check_ms == 1000
    assert paired.resolved == {"A": ts.COMMIT, "B": ts.ROLLBACK}
    assert [(o.op_offset, h.transaction_id) for o, h in paired.commits_to_verify] == [(0, "A")]
    # Commits below the verified op offset are known to be written.
    assert ts.pair(halves, ops, verified_op_offset=1).commits_to_verify == []


def test_pair_takes_the_latest_half_of_a_transaction_id():
    halves = [half("A", 0), half("A", 5)]
    paired = ts.pair(halves, [op(0, txid="A")], 0)
    assert paired.pending["A"].queue_offset == 5
    assert ts.pair(halves, [op(0, txid="A"), op(5, txid="A", op_offset=1)], 0).pending == {}


def test_due_after_the_delay_then_once_per_interval():
    h = half("A", 0, stored=1_000)
    kw = {"check_after_ms": 6_000, "check_interval_ms": 30_000}
    assert not ts.is_due(h, 6_999, **kw)
    assert ts.is_due(h, 7_000, **kw)
    h.last_check_ms = 7_000
    assert not ts.is_due(h, 36_999, **kw)
    assert ts.is_due(h, 37_000, **kw)
    own = half("B", 1, stored=1_000, check_after_ms=60_000)
    assert not ts.is_due(own, 60_999, **kw)
    assert ts.is_due(own, 61_000, **kw)


def test_plan_checks_oldest_first_and_discards_past_max():
    a, b, c = half("A", 2), half("B", 0, checks=3), half("C", 1, stored=10_000)
    check, discard = ts.plan_checks(
        [a, b, c], 6_000, check_after_ms=6_000, check_interval_ms=1, max_checks=3
    )
    assert [h.transaction_id for h in check] == ["A"]
    assert [h.transaction_id for h in discard] == ["B"]
