"""Remoting members (orderly Java consumers lock their queues with LOCK_BATCH_MQ): when a
member's connection closes without UNREGISTER_CLIENT, the broker ends its queue locks and
then tells the group, so a survivor that rebalances on NOTIFY_CONSUMER_IDS_CHANGED (as
RocketMQ's clients do) locks the freed queues on its first try. A member is also told when
it joins, as RocketMQ's broker tells a new channel.

A connection that merely reconnects (a second one with the same client id is open when the
first closes) keeps the locks, and so does a member that unregistered first: an orderly
leaver unlocks its queues itself once its offsets are committed.

The last test kills a real orderly Java consumer (Apache RocketMQ 4.9's client, skipped
without ``ROCKETMQ_HOME``) that shares a group with a push member process, and measures the
time to the survivor's first delivery from the Java member's queues.
"""

from __future__ import annotations

import collections
import select
import signal
import subprocess
import threading
import time

import pytest

from rmq_spark.broker.membership.groups import RECONNECT_GRACE_MS
from rmq_spark.client.admin import Admin
from tests.support import java_probe, scripts
from tests.support.broker_harness import start_in_process_broker
from tests.support.eventually import eventually
from tests.support.push_group import ContinuousProducer, Member
from tests.support.remoting_member import RemotingMember

TOPIC, GROUP = "LockedTopic", "GID_remoting_failover"
QUEUES = [0, 1, 2, 3]
FAILOVER_BOUND_S = 3.0
#: well past the grace: whatever ends leases for a closed connection has happened by then
AFTER_GRACE_S = RECONNECT_GRACE_MS / 1000 + 0.5


def spawn_member(address: str, client_id: str, broker_name: str) -> subprocess.Popen:
    command = scripts.command(
        "remoting_member", "--address", address, "--group", GROUP, "--topic", TOPIC,
        "--client-id", client_id, "--queues", ",".join(map(str, QUEUES)),
        "--broker-name", broker_name,
    )  # fmt: skip
    return subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=scripts.env())


def read_line(process: subprocess.Popen, timeout_s: float = 30) -> str:
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], timeout_s)
    assert ready, f"no line from the member process within {timeout_s} s"
    return process.stdout.readline().strip()


def test_a_killed_members_locks_are_free_when_the_group_is_told(broker_factory):
    broker = broker_factory("broker-a", "--remoting-port", "0")
    with Admin(broker.endpoint) as admin:
        admin.create_topic(TOPIC, queues=len(QUEUES))
    victim = spawn_member(broker.remoting_address, "10.0.0.1@victim", broker.name)
    survivor = RemotingMember(broker.remoting_address, GROUP, "10.0.0.2@survivor", broker.name)
    try:
        assert read_line(victim) == "locked 0 1 2 3"
        survivor.heartbeat(TOPIC)
        assert survivor.members() == ["10.0.0.1@victim", "10.0.0.2@survivor"]
        assert survivor.lock(TOPIC, QUEUES) == []  # the victim holds them

        victim.send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        victim.wait()
        notified_at = survivor.wait_notified(after=killed_at, timeout_s=30)
        assert notified_at is not None, "the survivor was never told the group changed"
        locked = survivor.lock(TOPIC, QUEUES)  # what a rebalance on the notification does
        locked_at = time.monotonic()
        print(
            f"\n[remoting failover] told after {notified_at - killed_at:.3f} s, "
            f"locked after {locked_at - killed_at:.3f} s"
        )

        assert locked == QUEUES
        assert survivor.members() == ["10.0.0.2@survivor"]
        assert locked_at - killed_at < FAILOVER_BOUND_S
    finally:
        victim.kill()
        victim.wait()
        survivor.close()


@pytest.fixture
def local_broker(tmp_path):
    local = start_in_process_broker(tmp_path, remoting_port=0)
    local.broker.store.topics.create(TOPIC, len(QUEUES))
    yield f"127.0.0.1:{local.server.remoting_port}", local.broker.name
    local.stop()


def test_a_member_that_reconnected_keeps_its_locks(local_broker):
    address, name = local_broker
    old = RemotingMember(address, GROUP, "10.0.0.1@blip", name)
    new = RemotingMember(address, GROUP, "10.0.0.1@blip", name)
    other = RemotingMember(address, GROUP, "10.0.0.2@other", name)
    try:
        old.heartbeat(TOPIC)
        assert old.lock(TOPIC, QUEUES) == QUEUES
        new.heartbeat(TOPIC)  # its new connection, open before the old one is seen closed
        other.heartbeat(TOPIC)
        old.close()
        time.sleep(AFTER_GRACE_S)

        assert other.lock(TOPIC, QUEUES) == []
        assert other.members() == ["10.0.0.1@blip", "10.0.0.2@other"]
        assert new.lock(TOPIC, QUEUES) == QUEUES  # a renewal over the new connection
    finally:
        for member in (old, new, other):
            member.close()


def test_a_member_is_told_of_the_group_it_has_just_joined(local_broker):
    """As RocketMQ's broker tells a new channel: Java's lite pull consumer rebalances on it
    (it has no rebalance at start), so its first message does not wait for a 20 s timer."""
    address, name = local_broker
    first = RemotingMember(address, GROUP, "10.0.0.1@first", name)
    second = RemotingMember(address, GROUP, "10.0.0.2@second", name)
    try:
        before = time.monotonic()
        first.heartbeat(TOPIC)
        assert first.wait_notified(after=before, timeout_s=5) is not None
        joined = time.monotonic()
        second.heartbeat(TOPIC)
        assert second.wait_notified(after=joined, timeout_s=5) is not None
        assert first.wait_notified(after=joined, timeout_s=5) is not None  # a change for it
        # a heartbeat of a member already in the group changes nothing: no notice
        again = time.monotonic()
        second.heartbeat(TOPIC)
        assert second.wait_notified(after=again, timeout_s=1) is None
    finally:
        first.close()
        second.close()


def test_a_member_that_unregistered_keeps_its_locks_until_it_unlocks(local_broker):
    address, name = local_broker
    leaver = RemotingMember(address, GROUP, "10.0.0.1@leaver", name)
    other = RemotingMember(address, GROUP, "10.0.0.2@other", name)
    try:
        leaver.heartbeat(TOPIC)
        assert leaver.lock(TOPIC, QUEUES) == QUEUES
        other.heartbeat(TOPIC)
        leaver.unregister()
        time.sleep(AFTER_GRACE_S)
        assert other.lock(TOPIC, QUEUES) == []  # it is still committing its offsets

        leaver.unlock(TOPIC, QUEUES)
        leaver.close()
        assert other.lock(TOPIC, QUEUES) == QUEUES
    finally:
        leaver.close()
        other.close()


# --- a real orderly Java consumer -----------------------------------------------------------

JAVA_TOPIC, JAVA_GROUP = "JavaOrderlyFailover", "GID_java_orderly_failover"


class Lines:
    """A process's stdout lines, each with the monotonic time it was read, on a thread."""

    def __init__(self, process: subprocess.Popen) -> None:
        self.lines: list[tuple[float, str]] = []
        self._thread = threading.Thread(target=self._read, args=(process,), daemon=True)
        self._thread.start()

    def _read(self, process: subprocess.Popen) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            self.lines.append((time.monotonic(), line.rstrip("\n")))

    def got(self) -> list[tuple[float, int, int]]:
        """(time, queue id, queue offset) of every GOT line so far."""
        return [
            (t, int(line.split()[1]), int(line.split()[2]))
            for t, line in list(self.lines)
            if line.startswith("GOT ")
        ]


@java_probe.NEEDS_JAVA
@pytest.mark.xdist_group("java")
def test_a_killed_java_orderly_members_queues_move_within_3_s(broker_factory, java, tmp_path):
    broker = broker_factory("broker-a", "--remoting-port", "0")
    admin = Admin(broker.endpoint)
    admin.create_topic(JAVA_TOPIC, queues=len(QUEUES))
    args = ("push", broker.remoting_address, JAVA_TOPIC, JAVA_GROUP, "1000000", "120", "orderly")
    victim = java.start(*args)  # type: ignore[attr-defined]
    producer = None
    survivor = Member("survivor", tmp_path, broker.endpoint, JAVA_GROUP, JAVA_TOPIC)
    survivor.command += ["--lease-ms", "30000"]
    try:
        assert victim.stdout.readline().strip() == "STARTED"
        java_out = Lines(victim)
        time.sleep(1.0)  # the Java member locks all four queues
        survivor.spawn().wait_ready()
        # The Java member gives two queues up when told, the survivor locks them
        mine = eventually(
            lambda: (r := survivor.last_rebalance()) and r["cid_all"] == 2 and set(r["queues"]),
            what="the survivor to be given two queues",
            timeout=30,
        )
        victim_queues = set(QUEUES) - mine
        producer = ContinuousProducer(broker.endpoint, JAVA_TOPIC).start()
        eventually(
            lambda: (
                {q for _, q, _ in java_out.got()} == victim_queues
                and {q for _, q, _ in survivor.read()} == mine
            ),
            what="both members to consume their own queues",
            timeout=60,
        )
        time.sleep(1.0)
        seen_before = len(survivor.read())
        victim.kill()
        killed_at = time.monotonic()
        victim.wait()
        time.sleep(0.2)
        committed = {
            mq.queue_id: o for mq, o in admin.consumer_offsets(JAVA_GROUP, JAVA_TOPIC).items()
        }

        def took_over() -> float:
            if any(q in victim_queues for _, q, _ in survivor.read()[seen_before:]):
                return time.monotonic()
            raise AssertionError(f"not yet; the survivor's log:\n{survivor.err_tail(20)}")

        taken_at = eventually(
            took_over, what="the survivor to take over", timeout=90, interval=0.01
        )
        sent = producer.stop()
        by_position = {position: msg_id for msg_id, position in sent.items()}
        java_ids = [by_position[(q, o)] for _, q, o in java_out.got()]
        eventually(
            lambda: sent.keys() <= {r[0] for r in survivor.read()} | set(java_ids),
            what="every sent message to be delivered",
            timeout=60,
        )
    finally:
        if producer is not None:
            producer.stop()
        victim.kill()
        survivor.close()
        admin.close()

    failover_s = taken_at - killed_at
    survivor_ids = collections.Counter(r[0] for r in survivor.read())
    twice = {m for m in java_ids if survivor_ids[m]}
    expected = {
        by_position[(q, o)]
        for _, q, o in java_out.got()
        if q in victim_queues and o >= committed.get(q, 0)
    }
    starts: dict[int, int] = {}  # lowest offset: parallel listener calls write out of order
    for _, q, o in survivor.read()[seen_before:]:
        starts[q] = min(o, starts.get(q, o))
    print(
        f"\n[java orderly failover] failover={failover_s:.3f}s sent={len(sent)} "
        f"twice={len(twice)} (bound {len(expected)}) committed at the kill={committed}"
    )
    assert failover_s < FAILOVER_BOUND_S, survivor.err_tail(30)
    assert {q: starts[q] for q in victim_queues} == {q: committed.get(q, 0) for q in victim_queues}
    assert twice == expected
    assert all(n == 1 for n in survivor_ids.values())
