"""Push consumer groups that grow and shrink under continuous production.

Every group member is a real process (``tests/support/push_member.py``) that appends one line per
delivered message (``msg_id queue_id queue_offset``) to its own file; a producer thread in
the test keeps sending small batches of unique bodies and records every acknowledged
message id. At the end the union of the members' files is compared with what was sent:

* ``test_scale_2_5_3_graceful``: 2 members, then 5, then 3 (two leave with SIGTERM). The
  queue-ownership leases make graceful changes exactly-once: nothing lost, nothing twice,
  and the group's committed offsets end at each queue's max offset.

A member that is SIGKILLed instead (its queues move in about a second, with RocketMQ's
at-least-once bound) is ``test_push_failover.py``; both use ``tests/support/push_group.py``.

Run with ``pytest -s`` to see the figures.
"""

from __future__ import annotations

import re
import time

import pytest

from rmq_spark.client.admin import Admin
from tests.support.push_group import (
    QUEUES,
    ContinuousProducer,
    Member,
    assert_committed_at_max,
    expected_allocation,
    must_log_size,
    tally,
    wait_all_seen,
    wait_progress,
    wait_settled,
)

pytestmark = pytest.mark.slow

HOLD_S = 2.0  # each group size keeps consuming this long after it settled
WORK_MS = 10  # listener time per message in the scale test: hand-overs find messages in flight
HANDOVER_RE = re.compile(r"handing \S.* over; (\d+) messages still in flight")


@pytest.fixture
def members(tmp_path):
    """``members(name, endpoint, group, topic, work_ms=0) -> Member`` (spawned, not yet
    ready); every member process is killed after the test."""
    started: list[Member] = []

    def spawn(name: str, endpoint: str, group: str, topic: str, work_ms: int = 0) -> Member:
        member = Member(name, tmp_path, endpoint, group, topic, work_ms).spawn()
        started.append(member)
        return member

    yield spawn
    for member in started:
        member.close()


@pytest.fixture
def setup(broker_factory, request):
    """A broker, a 12-queue topic, a group name and an Admin (closed after the test)."""
    broker = broker_factory("broker-a")
    name = request.node.name.replace("_", "-")[:40]
    topic, group = f"PushScale-{name}", f"GID_{name}"
    admin = Admin(broker.endpoint)
    admin.create_topic(topic, queues=QUEUES)
    yield broker, admin, topic, group
    admin.close()


# --- tests ----------------------------------------------------------------------------------


def test_scale_2_5_3_graceful(setup, members):
    broker, admin, topic, group = setup
    mqs = list(admin.describe_topic(topic).readable)
    t0 = time.monotonic()
    producer = ContinuousProducer(broker.endpoint, topic).start()
    all_members: list[Member] = []
    phases: list[tuple[list[Member], list[Member]]] = []  # (before, after)
    try:
        # 2 members
        first = [members(f"m{i}", broker.endpoint, group, topic, WORK_MS) for i in (1, 2)]
        all_members += first
        for m in first:
            m.wait_ready()
        wait_settled(group, mqs, first, 30)
        wait_progress(first, 30, "2 members")
        time.sleep(HOLD_S)
        phases.append(([], first))

        # 5 members
        more = [members(f"m{i}", broker.endpoint, group, topic, WORK_MS) for i in (3, 4, 5)]
        all_members += more
        for m in more:
            m.wait_ready()
        wait_settled(group, mqs, all_members, 30)
        wait_progress(all_members, 30, "5 members")
        time.sleep(HOLD_S)
        for m in all_members:
            assert m.read(), f"{m.name} delivered nothing with 5 members"
        phases.append((first, list(all_members)))

        # 3 members: m1 (an original) and m4 (a newcomer) leave gracefully
        leaving = [all_members[0], all_members[3]]
        staying = [m for m in all_members if m not in leaving]
        for m in leaving:
            m.send_term()  # both leave at the same time
        for m in leaving:
            assert m.terminate() == 0, f"{m.name} did not exit cleanly:\n{m.err_tail()}"
        wait_settled(group, mqs, staying, 30)
        wait_progress(staying, 30, "3 members")
        time.sleep(HOLD_S)
        phases.append((list(all_members), staying))

        sent = producer.stop()
        wait_all_seen(all_members, sent, 60)
        for m in staying:
            assert m.terminate() == 0, f"{m.name} did not exit cleanly:\n{m.err_tail()}"
    finally:
        producer.stop()
    elapsed = time.monotonic() - t0

    counts, lost, duplicated, duplicates, unknown = tally(all_members, sent)
    print(
        f"\n[scale 2->5->3] sent={len(sent)} delivered={sum(counts.values())} "
        f"distinct={len(counts)} lost={len(lost)} duplicates={duplicates} "
        f"unknown={len(unknown)} producer_errors={len(producer.errors)} elapsed={elapsed:.1f}s"
    )
    for m in all_members:
        sizes = [r["cid_all"] for r in m.rebalances()]
        print(f"  {m.name} {m.client_id}: delivered={len(m.read())} cidAllSize logged={sizes}")
    in_flight = [int(n) for m in all_members for n in HANDOVER_RE.findall(m.err_text())]
    print(
        f"  hand-overs: {len(in_flight)}, {sum(1 for n in in_flight if n)} with messages in "
        f"flight ({sum(in_flight)} messages)"
    )
    if duplicated:
        print(f"  duplicated ids (first 10): {sorted(duplicated.items())[:10]}")

    for m in all_members:  # no drain timed out, no lease was lost: nothing may come twice
        text = m.err_text()
        assert "were still being consumed after" not in text, m.name
        assert "another member took the queue" not in text, m.name
        assert " ERROR " not in text, f"{m.name} logged errors:\n{m.err_tail()}"
    assert not lost, f"{len(lost)} acknowledged messages never delivered, e.g. {lost[:10]}"
    assert duplicates == 0, f"{duplicates} duplicate deliveries: {sorted(duplicated)[:10]}"
    # The rebalance log: every group size shows up, and each member logged the size of a
    # phase whenever its allocation in that phase pins the size down.
    logged = {r["cid_all"] for m in all_members for r in m.rebalances()}
    assert {2, 5, 3} <= logged, f"cidAllSize logged: {sorted(logged)}"
    for before, after in phases:
        for m in must_log_size(group, mqs, before, after):
            target = expected_allocation(group, mqs, m, after)
            assert any(
                r["cid_all"] == len(after) and r["queues"] == target for r in m.rebalances()
            ), f"{m.name} never logged cidAllSize={len(after)} with {target}: {m.rebalances()}"
    for m in all_members:
        assert all(r["cid"] == m.client_id for r in m.rebalances())
    assert_committed_at_max(admin, group, topic)
