"""A push consumer group of real member processes (``tests/support/push_member.py``) and a
producer thread that keeps sending, for the push scale and failover tests: the members'
delivery files and logs, and the waits and tallies over a group.
"""

from __future__ import annotations

import collections
import re
import select
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from rmq_spark.allocate import get_strategy
from rmq_spark.client.admin import Admin
from rmq_spark.client.producer import Producer
from rmq_spark.structs import MessageQueue
from tests.support import scripts
from tests.support.eventually import eventually

QUEUES = 12
LEASE_MS = 3000
PERSIST_MS = 500
BATCH = 4  # messages per send_batch
SEND_PAUSE_S = 0.02  # between two batches: ~200 messages/s
AVG = get_strategy("avg")

REBALANCE_RE = re.compile(
    r"rebalance result changed\. allocateMessageQueueStrategyName=\S+, group=(?P<group>[^,]+), "
    r"topic=(?P<topic>[^,]+), clientId=(?P<cid>[^,]+), mqAllSize=(?P<mq_all>\d+), "
    r"cidAllSize=(?P<cid_all>\d+), rebalanceResultSize=(?P<size>\d+), "
    r"rebalanceResultSet=\[(?P<set>.*)\]"
)
QUEUE_ID_RE = re.compile(r"queue_id=(\d+)")


class Member:
    """One ``push_member`` process and what it wrote."""

    def __init__(
        self, name: str, tmp_path: Path, endpoint: str, group: str, topic: str, work_ms: int = 0
    ) -> None:
        self.name = name
        self.topic = topic
        self.out_path = tmp_path / f"{name}.out"
        self.err_path = tmp_path / f"{name}.err"
        self.command = scripts.command(
            "push_member",
            "--endpoint",
            endpoint,
            "--group",
            group,
            "--topic",
            topic,
            "--out",
            str(self.out_path),
            "--lease-ms",
            str(LEASE_MS),
            "--persist-ms",
            str(PERSIST_MS),
            "--work-ms",
            str(work_ms),
        )
        self.process: subprocess.Popen | None = None
        self.client_id = ""
        self.records: list[tuple[str, int, int]] = []  # (msg_id, queue_id, queue_offset)
        self._read_pos = 0
        self._partial = b""
        self._termed = False

    # --- process -------------------------------------------------------------------------

    def spawn(self) -> Member:
        env = scripts.env(PYTHONUNBUFFERED="1")
        with open(self.err_path, "ab") as err:
            self.process = subprocess.Popen(
                self.command, stdout=subprocess.PIPE, stderr=err, env=env
            )
        return self

    def wait_ready(self, timeout_s: float = 60) -> str:
        assert self.process is not None and self.process.stdout is not None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.process.stdout], [], [], 0.1)
            if ready:
                line = self.process.stdout.readline().decode()
                if line.startswith("ready "):
                    self.client_id = line.split()[1]
                    return self.client_id
                if not line:
                    break
        pytest.fail(
            f"member {self.name} did not start (exit code {self.process.poll()}); "
            f"stderr tail:\n{self.err_tail()}"
        )

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def terminate(self, timeout_s: float = 40) -> int:
        """SIGTERM and wait for the clean shutdown; returns the exit code."""
        assert self.process is not None
        if not self._termed:
            self.send_term()
        try:
            return self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            pytest.fail(f"member {self.name} ignored SIGTERM for {timeout_s} s:\n{self.err_tail()}")

    def send_term(self) -> None:
        assert self.process is not None
        self._termed = True
        self.process.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def close(self) -> None:
        self.kill()
        if self.process is not None and self.process.stdout is not None:
            self.process.stdout.close()

    # --- output --------------------------------------------------------------------------

    def read(self) -> list[tuple[str, int, int]]:
        """Every complete line written so far (a line cut by a kill is left out)."""
        if self.out_path.exists():
            with open(self.out_path, "rb") as f:
                f.seek(self._read_pos)
                data = f.read()
            self._read_pos += len(data)
            *complete, self._partial = (self._partial + data).split(b"\n")
            for line in complete:
                msg_id, queue_id, offset = line.decode().split()
                self.records.append((msg_id, int(queue_id), int(offset)))
        return self.records

    def err_text(self) -> str:
        return self.err_path.read_text(errors="replace") if self.err_path.exists() else ""

    def err_tail(self, lines: int = 40) -> str:
        return "\n".join(self.err_text().splitlines()[-lines:])

    def rebalances(self) -> list[dict[str, Any]]:
        """This member's ``rebalance result changed`` lines for the test topic, in order."""
        found = []
        for m in REBALANCE_RE.finditer(self.err_text()):
            if m["topic"] != self.topic:
                continue
            found.append(
                {
                    "cid": m["cid"],
                    "cid_all": int(m["cid_all"]),
                    "size": int(m["size"]),
                    "queues": sorted(int(q) for q in QUEUE_ID_RE.findall(m["set"])),
                }
            )
        return found

    def last_rebalance(self) -> dict[str, Any] | None:
        found = self.rebalances()
        return found[-1] if found else None


class ContinuousProducer:
    """A thread that sends batches of unique bodies round robin until stopped."""

    def __init__(self, endpoint: str, topic: str) -> None:
        self.topic = topic
        self.producer = Producer(endpoint)
        self.sent: dict[str, tuple[int, int]] = {}  # msg_id -> (queue_id, queue_offset)
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="push-scale-producer", daemon=True)

    def start(self) -> ContinuousProducer:
        self._thread.start()
        return self

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            bodies = [f"push-scale-{n + i}".encode() for i in range(BATCH)]
            n += BATCH
            try:
                results = self.producer.send_batch(self.topic, bodies)
            except Exception as exc:  # counted and shown; only acked ids are checked
                self.errors.append(exc)
            else:
                with self._lock:
                    for r in results:
                        self.sent[r.msg_id] = (r.message_queue.queue_id, r.queue_offset)
            self._stop.wait(SEND_PAUSE_S)

    def count(self) -> int:
        with self._lock:
            return len(self.sent)

    def stop(self) -> dict[str, tuple[int, int]]:
        self._stop.set()
        self._thread.join(30)
        assert not self._thread.is_alive(), "the producer thread did not stop"
        self.producer.close()
        return dict(self.sent)


# --- helpers over a set of members ------------------------------------------------------


def delivered_max(members: list[Member]) -> dict[int, int]:
    """Per queue id, the largest queue offset any member delivered."""
    top: dict[int, int] = {}
    for member in members:
        for _, queue_id, offset in member.read():
            if offset > top.get(queue_id, -1):
                top[queue_id] = offset
    return top


def wait_progress(members: list[Member], timeout_s: float, what: str) -> None:
    """Wait until every queue had a delivery past what was delivered when called."""
    before = delivered_max(members)

    def moved() -> bool:
        now = delivered_max(members)
        stuck = [q for q in range(QUEUES) if now.get(q, -1) <= before.get(q, -1)]
        assert not stuck, f"queues without progress: {stuck}\n" + "\n".join(
            f"--- {m.name}:\n{m.err_tail(15)}" for m in members
        )
        return True

    eventually(moved, what=f"every queue to progress ({what})", timeout=timeout_s, interval=0.2)


def expected_allocation(
    group: str, mqs: list[MessageQueue], member: Member, group_members: list[Member]
) -> list[int]:
    """The queue ids ``member`` owns when ``group_members`` are the group ("avg")."""
    ids = [m.client_id for m in group_members]
    return sorted(mq.queue_id for mq in AVG.allocate(group, member.client_id, mqs, ids))


def wait_settled(group: str, mqs: list[MessageQueue], current: list[Member], timeout_s: float):
    """Wait until every member of ``current`` last logged the allocation "avg" gives it
    with exactly these members (so the allocations cover every queue once)."""

    def settled() -> bool:
        logged = {m.name: m.last_rebalance() for m in current}
        expected = {m.name: expected_allocation(group, mqs, m, current) for m in current}
        assert all(
            (logged[name] or {}).get("queues") == queues for name, queues in expected.items()
        ), "\n".join(
            f"{name}: last logged {logged[name]}, expected {queues}"
            for name, queues in expected.items()
        )
        return True

    eventually(
        settled,
        what=f"the group to settle at {len(current)} members",
        timeout=timeout_s,
        interval=0.2,
    )


def must_log_size(
    group: str, mqs: list[MessageQueue], before: list[Member], after: list[Member]
) -> list[Member]:
    """The members of ``after`` that must have logged ``cidAllSize=len(after)``.

    In a phase where members only join (or only leave), a member's rebalances see group
    sets S between ``before`` and ``after``; its last logged line carries the allocation of
    ``after`` (see :func:`wait_settled`) and the size of the S it saw. When no S other than
    ``after`` gives the member that allocation, that S was ``after``.
    """
    fixed = [m for m in before if m in after]
    changing = [m for m in before + after if (m in before) != (m in after)]
    required = []
    for member in after:
        target = expected_allocation(group, mqs, member, after)
        ambiguous = False
        for mask in range(2 ** len(changing)):
            subset = fixed + [c for i, c in enumerate(changing) if mask >> i & 1]
            if sorted(m.name for m in subset) == sorted(m.name for m in after):
                continue
            if member in subset and expected_allocation(group, mqs, member, subset) == target:
                ambiguous = True
                break
        if not ambiguous:
            required.append(member)
    return required


def wait_all_seen(members: list[Member], sent: dict[str, tuple[int, int]], timeout_s: float):
    def seen() -> bool:
        ids = {r[0] for m in members for r in m.read()}
        missing = [(k, v) for k, v in sent.items() if k not in ids]
        assert not missing, f"{len(missing)} missing, e.g. {missing[:10]}"
        return True

    eventually(seen, what="every sent message to be delivered", timeout=timeout_s, interval=0.2)


def tally(members: list[Member], sent: dict[str, tuple[int, int]]):
    counts: collections.Counter[str] = collections.Counter()
    for member in members:
        counts.update(r[0] for r in member.read())
    lost = [k for k in sent if k not in counts]
    duplicated = {k: n for k, n in counts.items() if n > 1}
    duplicates = sum(n - 1 for n in duplicated.values())
    unknown = [k for k in counts if k not in sent]
    return counts, lost, duplicated, duplicates, unknown


def assert_committed_at_max(admin: Admin, group: str, topic: str) -> None:
    queues = admin.describe_topic(topic).readable
    maxima = {mq.queue_id: o.max_offset for mq, o in admin.query_offsets(queues).items()}
    committed = {mq.queue_id: o for mq, o in admin.consumer_offsets(group, topic).items()}
    print(f"  committed offsets: {dict(sorted(committed.items()))}")
    assert committed == maxima, f"committed {committed} != max offsets {maxima}"
