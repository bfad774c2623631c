"""The pop-consumption rules (what is visible, what is delivered again, what is dead-lettered,
where the group's offset stands) and their journal, without a broker."""

from __future__ import annotations

import pytest

from rmq_spark.broker.v2.pop import InFlight, PopQueue, attempts_exhausted
from rmq_spark.broker.v2.pop_store import PopStore


def delivered(offsets, *, now=0, invisible=1000, start=0, next_offset=None, client=""):
    q = PopQueue(start, start)
    q.deliver_new(
        offsets,
        next_offset=next_offset if next_offset is not None else max(offsets) + 1,
        now_ms=now,
        invisible_ms=invisible,
        tokens=[100 + o for o in offsets],
        client_id=client,
    )
    return q


@pytest.mark.parametrize(
    ("acks", "base"),
    [
        ([], 0),
        ([0], 1),
        ([1, 2], 0),  # held at the first unacked
        ([1, 2, 0], 3),
        ([0, 1, 2], 3),
        ([2], 0),
    ],
)
def test_base_is_the_first_offset_still_in_flight(acks, base):
    q = delivered([0, 1, 2])
    for offset in acks:
        assert q.ack(offset, 100 + offset)
    assert q.base == base


def test_offsets_skipped_by_a_filter_count_as_done():
    q = delivered([5, 9], start=4, next_offset=12)  # 4, 6, 7, 8, 10, 11 did not match
    assert q.base == 5 and q.next == 12
    assert q.ack(5, 105) and q.ack(9, 109)
    assert q.base == 12


@pytest.mark.parametrize(
    ("token", "ok"),
    [(100, True), (101, False), (0, False)],
)
def test_an_ack_needs_the_latest_token(token, ok):
    q = delivered([0])
    assert q.ack(0, token) is ok
    assert q.ack(0, 100) is (not ok)  # a second ack of the same delivery fails


@pytest.mark.parametrize(
    ("now", "due"),
    [(999, []), (1000, [0, 1]), (5000, [0, 1])],
)
def test_due_when_invisibility_ends(now, due):
    q = delivered([0, 1], invisible=1000)
    assert [o for o, _ in q.due(now)] == due


def test_redelivery_counts_attempts_and_replaces_the_token():
    q = delivered([0])
    entry = q.redeliver(0, now_ms=2000, invisible_ms=1000, token=7)
    assert entry.attempt == 2 and entry.visible_at_ms == 3000
    assert not q.ack(0, 100)  # the first delivery's handle is stale now
    assert q.ack(0, 7)


def test_change_invisible_moves_the_time_and_invalidates_the_old_handle():
    q = delivered([0], invisible=60_000)
    assert q.change_invisible(0, 999, now_ms=10, invisible_ms=0, new_token=5) is None
    entry = q.change_invisible(0, 100, now_ms=10, invisible_ms=0, new_token=5)
    assert entry is not None and entry.visible_at_ms == 10
    assert [o for o, _ in q.due(10)] == [0]
    assert not q.ack(0, 100) and q.ack(0, 5)


@pytest.mark.parametrize(
    ("alive", "now", "due"),
    [(True, 10**9, []), (False, 59_999, []), (False, 60_000, [0])],
)
def test_auto_renewed_delivery_stays_invisible_while_its_client_lives(alive, now, due):
    q = delivered([0], invisible=60_000, client="c1")
    assert [o for o, _ in q.due(now, alive=lambda c: alive)] == due


def test_a_client_leaving_releases_its_messages_soon():
    q = delivered([0, 1], invisible=60_000, client="c1")
    assert q.release_client("c1", now_ms=100, delay_ms=1000) == 2
    assert [o for o, _ in q.due(1100, alive=lambda c: True)] == [0, 1]


@pytest.mark.parametrize(
    ("now", "blocked"),
    [(0, True), (999, True), (1000, False)],
)
def test_fifo_queue_is_blocked_while_a_message_is_invisible(now, blocked):
    q = delivered([0, 1], invisible=1000)
    assert q.blocked_for_fifo(now) is blocked


def test_fifo_queue_is_free_once_everything_is_acked():
    q = delivered([0, 1])
    q.ack(0, 100)
    assert q.blocked_for_fifo(0)
    q.ack(1, 101)
    assert not q.blocked_for_fifo(0)


@pytest.mark.parametrize(
    ("attempts", "max_attempts", "again", "dead"),
    [
        ([1, 2], 3, [0, 1], []),
        ([3, 1], 3, [1], [0]),
        ([17, 17], 17, [], [0, 1]),
    ],
)
def test_attempts_exhausted_splits_due_messages(attempts, max_attempts, again, dead):
    due = [(i, InFlight(a, 0, 1)) for i, a in enumerate(attempts)]
    assert attempts_exhausted(due, max_attempts) == (again, dead)


def test_pop_store_replays_deliveries_acks_and_changes(tmp_path):
    store = PopStore(tmp_path, sync=False)
    key = ("g", "t", 0)
    with store.queue(key, lambda: 0) as q:
        q.deliver_new([0, 1, 2], next_offset=3, now_ms=0, invisible_ms=1000, tokens=[1, 2, 3])
        store.record_delivery(key, q, [0, 1, 2])
        q.ack(1, 2)
        store.record_acks(key, [1])
        entry = q.change_invisible(2, 3, now_ms=0, invisible_ms=50, new_token=9)
        store.record_change(key, 2, entry)
        q.redeliver(0, now_ms=10, invisible_ms=5, token=4)
        store.record_delivery(key, q, [0])
    store.close()  # no compaction on close: the journal alone must be enough

    again = PopStore(tmp_path, sync=False)
    restored = again.find(key)
    assert restored is not None
    assert (restored.base, restored.next) == (0, 3)
    assert {o: (e.attempt, e.visible_at_ms, e.token) for o, e in restored.inflight.items()} == {
        0: (2, 15, 4),
        2: (1, 50, 9),
    }
    again.close()


def test_pop_store_cuts_a_torn_tail(tmp_path):
    store = PopStore(tmp_path, sync=False)
    key = ("g", "t", 1)
    with store.queue(key, lambda: 7) as q:
        q.deliver_new([7], next_offset=8, now_ms=0, invisible_ms=10, tokens=[1])
        store.record_delivery(key, q, [7])
    store.close()
    path = tmp_path / "popState.journal"
    path.write_bytes(path.read_bytes() + b"\x00\x00\x01\x00garbage")  # a crash mid-write
    again = PopStore(tmp_path, sync=False)
    restored = again.find(key)
    assert restored is not None and list(restored.inflight) == [7]
    again.close()
