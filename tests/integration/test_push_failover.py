"""A SIGKILLed push member's queues move to the survivor in seconds, not after its leases.

Two real member processes (``tests/support/push_member.py``) consume a 12-queue topic from a
real broker process while a producer thread keeps sending; the members ask for 30 s queue
leases. One member is SIGKILLed. The broker sees its membership stream close; when the
member has not reopened it within the broker's reconnect grace (1 s) it leaves the group,
its leases end and the survivor is told, so the survivor locks the freed queues and goes on
from the group's committed offsets. The test measures the time from the kill to the
survivor's first delivery from a freed queue and checks RocketMQ's at-least-once bound:
nothing is lost, and what comes twice is exactly what the dead member delivered at or after
the offsets the group had committed when it died.

Run with ``pytest -s`` to see the figures.
"""

from __future__ import annotations

import collections
import signal
import time

import pytest

from rmq_spark.client.admin import Admin
from tests.support.eventually import eventually
from tests.support.push_group import (
    QUEUES,
    ContinuousProducer,
    Member,
    delivered_max,
    tally,
    wait_all_seen,
    wait_progress,
    wait_settled,
)

#: the members' lease: ten times the failover bound, so only an ended lease lets it pass
LEASE_MS = 30_000
FAILOVER_BOUND_S = 3.0


@pytest.fixture
def setup(broker_factory, tmp_path):
    """A broker process, a 12-queue topic, a group, an Admin and a member factory."""
    broker = broker_factory("broker-a")
    topic, group = "PushFailover", "GID_push_failover"
    admin = Admin(broker.endpoint)
    admin.create_topic(topic, queues=QUEUES)
    started: list[Member] = []

    def member(name: str) -> Member:
        m = Member(name, tmp_path, broker.endpoint, group, topic)
        m.command += ["--lease-ms", str(LEASE_MS)]  # the last --lease-ms wins
        started.append(m.spawn())
        return m

    yield broker, admin, topic, group, member
    for m in started:
        m.close()
    admin.close()


def start_offsets(records, start: int, queues: set[int]) -> dict[int, int]:
    """Per queue of ``queues``, the lowest offset delivered in ``records[start:]``: where the
    member started (listener calls run in parallel, so lines are not in offset order)."""
    lowest: dict[int, int] = {}
    for _, queue_id, offset in records[start:]:
        if queue_id in queues:
            lowest[queue_id] = min(offset, lowest.get(queue_id, offset))
    return lowest


def test_a_killed_members_queues_move_to_the_survivor_within_3_s(setup):
    broker, admin, topic, group, member = setup
    mqs = list(admin.describe_topic(topic).readable)
    producer = ContinuousProducer(broker.endpoint, topic).start()
    try:
        pair = [member("f1"), member("f2")]
        for m in pair:
            m.wait_ready()
        wait_settled(group, mqs, pair, 30)
        wait_progress(pair, 30, "2 members")
        victim, survivor = pair
        victim_queues = set(victim.last_rebalance()["queues"])  # type: ignore[index]
        assert len(victim_queues) == QUEUES // 2

        def delivered_past_the_commits() -> bool:
            committed = {mq.queue_id: o for mq, o in admin.consumer_offsets(group, topic).items()}
            delivered = delivered_max([victim])
            return any(delivered.get(q, -1) >= committed.get(q, 0) for q in victim_queues)

        eventually(
            delivered_past_the_commits,
            what="the victim to deliver past its last persisted offsets",
            timeout=30,
            interval=0.05,
        )

        seen_before = len(survivor.read())
        victim.process.send_signal(signal.SIGKILL)  # type: ignore[union-attr]
        killed_at = time.monotonic()
        victim.process.wait()  # type: ignore[union-attr]
        # A commit the victim sent just before it died is applied by now; the survivor can
        # not hold the victim's queues before the reconnect grace ends.
        time.sleep(0.2)
        committed = {mq.queue_id: o for mq, o in admin.consumer_offsets(group, topic).items()}
        read_at = time.monotonic()

        def took_over() -> float:
            records = survivor.read()
            if any(q in victim_queues for _, q, _ in records[seen_before:]):
                return time.monotonic()
            raise AssertionError(f"not yet; the survivor's log:\n{survivor.err_tail(20)}")

        taken_at = eventually(
            took_over,
            what="the survivor to deliver from the killed member's queues",
            timeout=LEASE_MS / 1000 + 10,
            interval=0.01,
        )
        failover_s = taken_at - killed_at
        assert taken_at > read_at, "the survivor took over before the committed offsets were read"
        wait_settled(group, mqs, [survivor], 10)
        wait_progress([survivor], 10, "the survivor alone")
        sent = producer.stop()
        wait_all_seen(pair, sent, 60)
        assert survivor.terminate() == 0, f"survivor did not exit cleanly:\n{survivor.err_tail()}"
    finally:
        producer.stop()

    _, lost, duplicated, duplicates, unknown = tally(pair, sent)
    victim_records = victim.read()
    starts = start_offsets(survivor.read(), seen_before, victim_queues)
    expected_dups = {
        msg_id
        for msg_id, queue_id, offset in victim_records
        if offset >= committed.get(queue_id, 0)
    }
    print(
        f"\n[push failover] failover={failover_s:.3f}s (lease {LEASE_MS} ms) sent={len(sent)} "
        f"lost={len(lost)} duplicates={duplicates} (bound {len(expected_dups)}) "
        f"unknown={len(unknown)} producer_errors={len(producer.errors)}"
    )
    print(f"  committed at the kill: {dict(sorted(committed.items()))}")
    print(f"  survivor started at:   {dict(sorted(starts.items()))}")

    assert failover_s < FAILOVER_BOUND_S, (
        f"the survivor delivered from the killed member's queues {failover_s:.2f} s after the "
        f"kill; the bound is {FAILOVER_BOUND_S} s\n{survivor.err_tail(30)}"
    )
    assert not lost, f"{len(lost)} acknowledged messages never delivered, e.g. {lost[:10]}"
    assert not unknown, f"deliveries of messages never sent: {unknown[:10]}"
    # The survivor resumed every freed queue at the offset the group had committed.
    assert starts == {q: committed.get(q, 0) for q in victim_queues}
    survivor_counts = collections.Counter(r[0] for r in survivor.read())
    for msg_id, n in duplicated.items():
        assert n == 2 and survivor_counts[msg_id] == 1, f"{msg_id} delivered {n} times"
    assert set(duplicated) == expected_dups
