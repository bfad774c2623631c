"""``ali-ons``, a pure-JavaScript RocketMQ client, unmodified, against the broker's remoting
port as its name server: sends with tags, keys and user properties; its push consumer with
``*`` and with a tag filter; two consumers sharing a group's queues; the offsets it commits,
read back with rocketlite's own ``Admin``.

The JavaScript side is ``tests/node/ali_ons_probe.js`` (one line per event on stdout). Its
npm packages, pinned by ``tests/node/package-lock.json``, are installed by this module with
``npm ci`` into ``tests/node/node_modules`` (gitignored) once, and again only when the lock
file changes. Without ``node`` and ``npm`` on PATH the module is skipped.
"""

from __future__ import annotations

import collections
import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pytest

from rmq_spark.client import Admin
from tests.support.broker_harness import TEST_STORE_FLAGS, BrokerProcess, read_queue
from tests.support.eventually import eventually

NODE_DIR = Path(__file__).parent.parent / "node"
PROBE = NODE_DIR / "ali_ons_probe.js"
BROKER = "broker-a"
QUEUES = 4
#: what the probe prints (other stdout lines, if any, are not events)
EVENTS = {"SENT", "DONE", "READY", "ASSIGNED", "PULLED", "GOT", "CLOSED", "ERROR", "TIMEOUT"}

pytestmark = [
    pytest.mark.skipif(
        shutil.which("node") is None or shutil.which("npm") is None,
        reason="needs Node.js and npm on PATH (ali-ons is a JavaScript client)",
    ),
    # one worker runs them all: one broker, one npm install
    pytest.mark.xdist_group("node"),
]


# -- the JavaScript side -------------------------------------------------------------------


@pytest.fixture(scope="session")
def node_modules() -> Path:
    """``npm ci`` into tests/node/node_modules unless it already holds this lock file's
    packages (a stamp names the hash); a file lock keeps parallel sessions apart."""
    want = hashlib.sha256(
        (NODE_DIR / "package.json").read_bytes() + (NODE_DIR / "package-lock.json").read_bytes()
    ).hexdigest()
    modules = NODE_DIR / "node_modules"
    stamp = modules / ".rocketlite-installed"
    lock_path = Path(tempfile.gettempdir()) / "rocketlite-tests-node-install.lock"
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (stamp.exists() and stamp.read_text() == want):
            done = subprocess.run(
                ["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"],
                cwd=NODE_DIR,
                capture_output=True,
                text=True,
                timeout=300,
                env={**os.environ, "npm_config_update_notifier": "false"},
            )
            if done.returncode != 0:
                pytest.fail(f"npm ci in {NODE_DIR} failed:\n{done.stdout}\n{done.stderr}")
            stamp.write_text(want)
    return modules


def parse(line: str) -> tuple[str, dict] | None:
    word, _, rest = line.strip().partition(" ")
    if word not in EVENTS:
        return None
    return word, (json.loads(rest) if rest else {})


def unexpected_errors(events: list[tuple[str, dict]]) -> list[dict]:
    """ERROR events but QUERY_NOT_FOUND (22) on reading a never-committed offset of an empty
    queue: ali-ons reports it as an error and starts from the queue's first offset. (Apache
    RocketMQ 4.x answers offset 0 there; 5.x, like rocketlite, answers 22.)"""
    return [
        data
        for event, data in events
        if event == "ERROR" and not (data.get("code") == 22 and "readOffset" in data["message"])
    ]


class Consumer:
    """A probe consumer process; its events collected as they come."""

    def __init__(self, broker: BrokerProcess, topic: str, group: str, expr: str, *flags: str):
        self.name = " ".join([group, expr, *flags])
        self.process = subprocess.Popen(
            [
                "node",
                str(PROBE),
                "consume",
                "--namesrv",
                broker.remoting_address,
                "--topic",
                topic,
                "--group",
                group,
                "--expr",
                expr,
                "--deadline-ms",
                "40000",
                *flags,
            ],
            cwd=NODE_DIR,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            encoding="utf-8",
        )
        self.events: list[tuple[str, dict]] = []
        self.stderr = ""
        self._lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._read_stdout, daemon=True),
            threading.Thread(target=self._read_stderr, daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def _read_stdout(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            event = parse(line)
            if event is not None:
                with self._lock:
                    self.events.append(event)

    def _read_stderr(self) -> None:
        assert self.process.stderr is not None
        self.stderr = self.process.stderr.read()

    def of(self, kind: str) -> list[dict]:
        with self._lock:
            return [data for event, data in self.events if event == kind]

    def assigned(self) -> set[int]:
        """The queue ids of the topic it holds now (ali-ons rebalances on a timer)."""
        assignments = self.of("ASSIGNED")
        return set(assignments[-1]["queueIds"]) if assignments else set()

    def wait_for(self, predicate, timeout_s: float, what: str) -> None:
        """Until ``predicate()`` is true; fails with the consumer's report when it is not
        within ``timeout_s``, or at once when the consumer exits."""

        def check():
            if self.process.poll() is not None:
                pytest.fail(f"consumer {self.name} exited before {what}; {self.report()}")
            return predicate()

        try:
            eventually(check, what=f"{what} from consumer {self.name}", timeout=timeout_s)
        except AssertionError as timed_out:
            self.kill()  # its stderr is whole once it ended
            pytest.fail(f"{timed_out}; {self.report()}")

    def finish(self, stop: bool = False, timeout_s: float = 45) -> None:
        """Wait for its exit (after a STOP line if ``stop``); fails unless it closed cleanly."""
        assert self.process.stdin is not None
        try:
            if stop:
                self.process.stdin.write("STOP\n")
                self.process.stdin.flush()
            self.process.wait(timeout_s)
        except (subprocess.TimeoutExpired, BrokenPipeError):
            self.kill()
        for thread in self._threads:
            thread.join(5)
        with contextlib.suppress(BrokenPipeError):
            self.process.stdin.close()
        assert self.process.returncode == 0 and self.of("CLOSED"), (
            f"consumer {self.name} did not close cleanly; {self.report()}"
        )

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def report(self) -> str:
        lines = "\n".join(f"{e} {json.dumps(d)}" for e, d in self.events)
        return f"exit {self.process.poll()}; events:\n{lines}\nstderr:\n{self.stderr[-3000:]}"


@pytest.fixture
def consumers(node_modules):
    """``consumers(broker, topic, group, expr, *flags) -> Consumer`` (started); all are
    killed after the test if still running."""
    started: list[Consumer] = []

    def start(*args) -> Consumer:
        consumer = Consumer(*args)
        started.append(consumer)
        return consumer

    yield start
    for consumer in started:
        consumer.kill()


def produce(broker: BrokerProcess, topic: str, count: int, prefix: str) -> list[dict]:
    """Send ``count`` messages with ali-ons; the SENT events. Message i has tags TagA (even i)
    or TagB (odd), keys ``k<i> <prefix>-<i>``, body ``<prefix>-<i> ✓`` and the user
    properties seq=<i>, origin=ali-ons."""
    done = subprocess.run(
        [
            "node",
            str(PROBE),
            "produce",
            "--namesrv",
            broker.remoting_address,
            "--topic",
            topic,
            "--count",
            str(count),
            "--prefix",
            prefix,
            "--deadline-ms",
            "30000",
        ],
        cwd=NODE_DIR,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        encoding="utf-8",
        timeout=40,
    )
    events = [e for e in map(parse, done.stdout.splitlines()) if e is not None]
    sent = [data for event, data in events if event == "SENT"]
    assert done.returncode == 0 and ("DONE", {}) in events and len(sent) == count, (
        f"ali-ons producer failed (exit {done.returncode}):\n{done.stdout}\n{done.stderr}"
    )
    assert unexpected_errors(events) == [], done.stdout
    return sent


# -- the broker ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    root = tmp_path_factory.mktemp("ali-ons")
    process = BrokerProcess(
        BROKER, root / "store", root / "broker.log", [*TEST_STORE_FLAGS, "--remoting-port", "0"]
    ).start()
    yield process
    process.clean_up()


def new_topic(broker: BrokerProcess, name: str) -> str:
    """A fresh topic of 4 queues (ali-ons, unlike the Java client, does not fall back to the
    default topic's route for a topic the name server does not know)."""
    topic = f"ali-{name}-{uuid.uuid4().hex[:6]}"
    with Admin(broker.endpoint) as admin:
        admin.create_topic(topic, queues=QUEUES)
    return topic


def per_queue(sent: list[dict]) -> dict[int, int]:
    """How many of the sent messages each queue holds (its max offset: topics start empty)."""
    return dict(collections.Counter(int(s["queueId"]) for s in sent))


def wait_committed(broker: BrokerProcess, group: str, topic: str, want: dict[int, int]) -> None:
    """Until the group's committed offsets (as ``rocketlite offsets GROUP`` shows them) are
    ``want`` by queue id. UPDATE_CONSUMER_OFFSET is one-way, so allow the broker a moment."""
    with Admin(broker.endpoint) as admin:

        def committed() -> bool:
            offsets = admin.consumer_offsets(group, topic)
            assert {mq.queue_id: o for mq, o in offsets.items()} == want
            return True

        eventually(committed, what=f"the committed offsets of {group} on {topic}", timeout=5)
        progress = {p.message_queue.queue_id: p.lag for p in admin.consumer_progress(group, topic)}
    assert progress == dict.fromkeys(range(QUEUES), 0), "lag per queue"


def check_against_sent(got: dict, sent: dict) -> None:
    """One received message is the sent one: body, tags, keys, user properties, position."""
    assert (got["tags"], got["keys"], got["seq"], got["origin"]) == (
        sent["tags"],
        sent["keys"],
        str(sent["i"]),
        "ali-ons",
    ), got["body"]
    assert (got["queueId"], got["queueOffset"]) == (int(sent["queueId"]), sent["queueOffset"])
    assert got["reconsumeTimes"] == 0


# -- tests ---------------------------------------------------------------------------------


def test_send_answers_send_ok_and_stores_tags_keys_and_properties(broker, node_modules):
    topic = new_topic(broker, "send")
    sent = produce(broker, topic, 8, "send")

    assert {s["status"] for s in sent} == {"SEND_OK"}
    # the producer turns round the 4 queues; each queue's offsets count up from 0
    assert per_queue(sent) == dict.fromkeys(range(QUEUES), 2)
    for queue_id in range(QUEUES):
        offsets = [s["queueOffset"] for s in sent if int(s["queueId"]) == queue_id]
        assert offsets == [0, 1]
    assert len({s["msgId"] for s in sent}) == 8

    # what rocketlite stored, read with its own client
    by_body = {s["body"]: s for s in sent}
    stored = [row for q in range(QUEUES) for row in read_queue(broker.endpoint, topic, q, BROKER)]
    assert sorted(row["body"].decode() for row in stored) == sorted(by_body)
    for row in stored:
        s = by_body[row["body"].decode()]
        props = dict(row["properties"])
        assert (row["tags"], row["keys"]) == (s["tags"], s["keys"])
        assert (props["seq"], props["origin"]) == (str(s["i"]), "ali-ons")
        assert (row["queueId"], row["queueOffset"]) == (int(s["queueId"]), s["queueOffset"])


def test_push_consumer_gets_every_message_once_and_commits_its_offsets(broker, consumers):
    topic = new_topic(broker, "push")
    group = f"ali-push-{uuid.uuid4().hex[:6]}"
    sent = produce(broker, topic, 10, "push")

    consumer = consumers(broker, topic, group, "*", "--instance", "one", "--expect", "10")
    consumer.finish()

    got = consumer.of("GOT")
    assert sorted(g["body"] for g in got) == sorted(s["body"] for s in sent)  # each once
    by_body = {s["body"]: s for s in sent}
    for g in got:
        assert g["topic"] == topic
        check_against_sent(g, by_body[g["body"]])
    assert unexpected_errors(consumer.events) == [], consumer.report()
    wait_committed(broker, group, topic, per_queue(sent))


def test_push_consumer_with_tag_filter_gets_only_matching_messages(broker, consumers):
    topic = new_topic(broker, "filter")
    group = f"ali-filter-{uuid.uuid4().hex[:6]}"
    sent = produce(broker, topic, 10, "filter")
    tag_a = [s for s in sent if s["tags"] == "TagA"]

    consumer = consumers(
        broker, topic, group, "TagA", "--instance", "one", "--expect", "5", "--linger-ms", "1000"
    )
    consumer.finish()

    got = consumer.of("GOT")
    assert sorted(g["body"] for g in got) == sorted(s["body"] for s in tag_a)
    by_body = {s["body"]: s for s in sent}
    for g in got:
        check_against_sent(g, by_body[g["body"]])
    # the broker filtered: no TagB message went over the wire (ali-ons would drop it again)
    pulled = [tag for p in consumer.of("PULLED") for tag in p["tags"]]
    assert sorted(pulled) == ["TagA"] * 5
    assert unexpected_errors(consumer.events) == [], consumer.report()
    # skipped TagB messages count as consumed: every queue is committed to its end
    wait_committed(broker, group, topic, per_queue(sent))


def test_two_consumers_of_one_group_share_the_queues(broker, consumers):
    topic = new_topic(broker, "share")
    group = f"ali-share-{uuid.uuid4().hex[:6]}"
    first = consumers(broker, topic, group, "*", "--instance", "first")
    first.wait_for(lambda: first.of("READY"), 20, "READY")
    second = consumers(broker, topic, group, "*", "--instance", "second")

    def split() -> bool:  # both rebalanced: disjoint, non-empty halves of the 4 queues
        mine = [first.assigned(), second.assigned()]
        return all(mine) and not mine[0] & mine[1] and mine[0] | mine[1] == set(range(QUEUES))

    second.wait_for(split, 20, "split of the queues")
    assigned = [first.assigned(), second.assigned()]

    sent = produce(broker, topic, 16, "share")
    first.wait_for(lambda: len(first.of("GOT")) + len(second.of("GOT")) >= 16, 20, "16 GOT")
    time.sleep(0.5)  # a duplicate would come now
    first.finish(stop=True)
    second.finish(stop=True)

    got = [first.of("GOT"), second.of("GOT")]
    assert sorted(g["body"] for g in got[0] + got[1]) == sorted(s["body"] for s in sent)
    by_body = {s["body"]: s for s in sent}
    for mine, queues in zip(got, assigned, strict=True):
        assert mine, "each consumer got a share"
        assert {g["queueId"] for g in mine} <= queues, "only from its own queues"
        for g in mine:
            check_against_sent(g, by_body[g["body"]])
    for consumer in (first, second):
        assert unexpected_errors(consumer.events) == [], consumer.report()
    wait_committed(broker, group, topic, per_queue(sent))


def test_send_answers_the_message_id_the_consumer_sees(broker, consumers):
    """ali-ons sets no UNIQ_KEY: Producer.send's msgId is the broker's offset message id
    (store host + commit-log offset), and a consumer decodes msgId from the stored message's
    store host and offset. Against Apache RocketMQ the two are the same id."""
    topic = new_topic(broker, "msgid")
    group = f"ali-msgid-{uuid.uuid4().hex[:6]}"
    sent = produce(broker, topic, 4, "msgid")
    consumer = consumers(broker, topic, group, "*", "--instance", "one", "--expect", "4")
    consumer.finish()

    seen = {g["body"]: g["msgId"] for g in consumer.of("GOT")}
    pairs = {s["body"]: (s["msgId"], seen[s["body"]]) for s in sent}
    mismatched = {body: ids for body, ids in pairs.items() if ids[0] != ids[1]}
    assert not mismatched, (
        "send answered a msgId other than the one the consumer decodes "
        f"(body: (sent, received)): {mismatched}"
    )
    # and rocketlite's own tools find the message by that id
    with Admin(broker.endpoint) as admin:
        for s in sent:
            batch, name = admin.view_message(s["msgId"])
            assert (batch.to_pylist()[0]["body"].decode(), name) == (s["body"], BROKER)
