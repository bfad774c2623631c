"""The ``rocketlite`` command as a user runs it: ``python -m rmq_spark.cli ...`` processes
against a broker process, checking exit codes, stdout (tables and ``--json`` lines) and that
every failure is one ``error: ...`` line on stderr without a traceback.

A CLI process takes ~0.7 s to start (grpc, pyarrow), so independent commands run as
concurrent processes (:meth:`tests.support.cli.Cli.run_all`) and most tests share one
module-scoped broker, each on its own topic.
"""

from __future__ import annotations

import re
import socket

import pytest

from rmq_spark.client import Admin, Producer
from rmq_spark.client.remoting import RemotingClient
from rmq_spark.store.config import StoreConfig
from rmq_spark.store.message_store import MessageStore
from tests.support.broker_harness import TEST_STORE_FLAGS, TEST_STORE_OPTIONS, BrokerProcess
from tests.support.cli import CLI, Cli


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- fixtures -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def broker(tmp_path_factory) -> BrokerProcess:
    """One broker process shared by the tests of this module (each uses its own topic)."""
    tmp = tmp_path_factory.mktemp("cli-broker")
    process = BrokerProcess("broker-cli", tmp / "store", tmp / "broker.log", TEST_STORE_FLAGS)
    process.start()
    yield process
    process.clean_up()


@pytest.fixture(scope="module")
def cli(broker) -> Cli:
    return Cli(broker.endpoint)


class CliBroker(BrokerProcess):
    """A broker started with ``rocketlite broker`` (the CLI) instead of the module."""

    def command(self, extra_args: tuple[str, ...] = ()) -> list[str]:
        return [
            *CLI,
            "broker",
            "--store",
            str(self.store_dir),
            "--port",
            "0",
            "--host",
            "127.0.0.1",
            "--name",
            self.name,
            *self.args,
            *extra_args,
        ]


# -- broker -------------------------------------------------------------------------------


def test_broker_serves_the_remoting_protocol_on_9876_by_default_when_it_is_free(tmp_path):
    process = CliBroker("cli-r", tmp_path / "store", tmp_path / "cli-r.log", TEST_STORE_FLAGS)
    process.start()
    try:
        if " remoting=" in process.ready_line:
            assert process.remoting_address == "127.0.0.1:9876"
            with Admin(process.endpoint) as admin:
                admin.create_topic("CliRemoting", queues=3)
            with RemotingClient(process.remoting_address) as client:
                route = client.route("CliRemoting")
            assert [mq.queue_id for mq in route.readable] == [0, 1, 2]
        else:  # another program holds 9876: the broker says so and serves gRPC only
            assert "port 9876 is taken: the remoting protocol is off" in process.log_text()
    finally:
        process.stop()


def test_broker_subcommand_serves_refuses_a_second_broker_and_stops_cleanly(tmp_path):
    store_dir = tmp_path / "store"
    process = CliBroker("cli-b", store_dir, tmp_path / "cli-b.log", TEST_STORE_FLAGS)
    process.start("--remoting-port", "0")
    try:
        assert re.fullmatch(
            rf"rocketlite broker cli-b listening on 127\.0\.0\.1:{process.port} "
            rf"remoting=127\.0\.0\.1:\d+ store={re.escape(str(store_dir))}",
            process.ready_line,
        ), process.ready_line
        with Admin(process.endpoint) as admin, Producer(process.endpoint) as producer:
            admin.create_topic("CliLife", queues=2)
            producer.send_batch("CliLife", [b"one", b"two", b"three"])

        second, bogus, bad_value, missing = Cli().run_all(
            # (no remoting port: whether 9876 is free on this machine is beside the point)
            ["broker", "--store", str(store_dir), "--port", "0", "--remoting-port", "off"],
            ["broker", "--store", str(tmp_path / "other"), "--bogus"],
            ["broker", "--store", str(tmp_path / "other"), "--flush", "maybe"],
            ["broker", "--port", "0"],
        )
        second.failed("in use by another process", str(store_dir), prefix="")
        assert "error:" in second.stderr, second
        bogus.failed("unrecognized arguments: --bogus", code=2, prefix="rocketlite")
        bad_value.failed("--flush", "'MAYBE'", code=2, prefix="rocketlite broker: error:")
        missing.failed("--store", code=2, prefix="rocketlite broker: error:")
        assert process.running, "the first broker must survive the second one's attempt"
    finally:
        code = process.stop(timeout_s=15)
    assert code == 0, process.log_tail()
    log = process.log_text()
    assert "Traceback" not in log, log
    assert "closed cleanly" in log, log
    assert not (store_dir / "abort").exists(), "a clean shutdown removes the abort marker"

    store = MessageStore.open(StoreConfig(store_dir, **TEST_STORE_OPTIONS))
    try:
        assert store.recovery is not None and not store.recovery.abnormal, store.recovery
        assert sum(store.max_offset("CliLife", q) for q in (0, 1)) == 3
    finally:
        store.close()


# -- topics -------------------------------------------------------------------------------


def test_topic_create_list_describe_update_delete(cli):
    created = cli.run("topic", "create", "CliTopics", "--queues", "3").ok()
    assert "created topic CliTopics with 3 queues" in created.stdout

    listed, listed_json, described, described_json, again = cli.run_all(
        ["topic", "list"],
        ["topic", "list", "--json"],
        ["topic", "describe", "CliTopics"],
        ["topic", "describe", "CliTopics", "--json"],
        ["topic", "create", "CliTopics", "--queues", "5"],
    )
    assert listed.ok().lines[0].split() == [
        "topic", "broker", "readQueues", "writeQueues", "perm", "messageType",
    ]  # fmt: skip
    assert {
        "topic": "CliTopics",
        "broker": "broker-cli",
        "readQueues": "3",
        "writeQueues": "3",
        "perm": "read+write",
        "messageType": "NORMAL",
    } in listed.table()
    assert {
        "topic": "CliTopics",
        "broker": "broker-cli",
        "readQueues": 3,
        "writeQueues": 3,
        "perm": "read+write",
        "messageType": "NORMAL",
    } in listed_json.ok().json_lines()
    assert [(r["queueId"], r["perm"]) for r in described.ok().table()] == [
        ("0", "read+write"), ("1", "read+write"), ("2", "read+write"),
    ]  # fmt: skip
    assert described_json.ok().json_lines() == [
        {
            "topic": "CliTopics",
            "broker": "broker-cli",
            "queueId": q,
            "perm": "read+write",
            "endpoint": cli.endpoint,
        }
        for q in range(3)
    ]
    again.failed("already exists", "update")

    cli.run("topic", "update", "CliTopics", "--queues", "2", "--perm", "4").ok()
    listed_after = cli.run("topic", "list", "--json").ok().json_lines()
    (updated,) = [row for row in listed_after if row["topic"] == "CliTopics"]
    assert (updated["readQueues"], updated["writeQueues"], updated["perm"]) == (2, 2, "read")

    deleted = cli.run("topic", "delete", "CliTopics").ok()
    assert "deleted topic CliTopics" in deleted.stdout
    after, describe_gone = cli.run_all(
        ["topic", "list", "--json"], ["topic", "describe", "CliTopics"]
    )
    assert "CliTopics" not in {row["topic"] for row in after.ok().json_lines()}
    describe_gone.failed("CliTopics", "does not exist")


# -- send, consume, offsets, message ------------------------------------------------------


def test_send_consume_offsets_and_message(cli):
    cli.run("topic", "create", "CliMsgs", "--queues", "2").ok()

    args_send, stdin_send, other_send = cli.run_all(
        # BODY words before and after the options (parsed intermixed)
        [
            "send", "CliMsgs", "hello", "--tag", "A", "--key", "k1", "--key", "k2",
            "--property", "color=red", "--property", "note=a=b", "world", "--json",
        ],
        (["send", "CliMsgs", "--tag", "B"], "line one\nline two\nline three\n"),
        ["send", "CliMsgs", "--tag", "C", "skipped"],
    )  # fmt: skip
    sent = args_send.ok().json_lines()
    assert len(sent) == 2
    assert {tuple(sorted(row)) for row in sent} == {
        ("broker", "msgId", "offsetMsgId", "queueId", "queueOffset")
    }
    assert sent[0]["queueId"] == sent[1]["queueId"], "one send is one batch to one queue"
    assert sent[1]["queueOffset"] == sent[0]["queueOffset"] + 1
    assert stdin_send.ok().stdout.strip() == "sent 3 messages to CliMsgs"
    assert other_send.ok().table()[0]["broker"] == "broker-cli"

    everything, filtered, latest, first_three, viewed, viewed_json = cli.run_all(
        ["consume", "CliMsgs", "--from", "earliest", "--json", "--idle-exit-ms", "300"],
        ["consume", "CliMsgs", "--tag", "A || B", "--idle-exit-ms", "300"],
        ["consume", "CliMsgs", "--from", "latest", "--idle-exit-ms", "300"],
        ["consume", "CliMsgs", "--max", "3", "--group", "cli-g", "--json"],
        ["message", sent[0]["offsetMsgId"]],
        ["message", sent[0]["offsetMsgId"], "--json"],
    )
    rows = everything.ok().json_lines()
    assert everything.stderr == ""  # --json: no trailing summary line
    by_body = {row["body"]: row for row in rows}
    assert sorted(by_body) == ["hello", "line one", "line three", "line two", "skipped", "world"]
    hello = by_body["hello"]
    assert (hello["tags"], hello["keys"], hello["topic"]) == ("A", "k1 k2", "CliMsgs")
    assert hello["properties"]["color"] == "red"
    assert hello["properties"]["note"] == "a=b"
    assert hello["properties"]["UNIQ_KEY"] == sent[0]["msgId"]
    assert hello["msgId"] == sent[0]["offsetMsgId"]
    assert (hello["queueId"], hello["queueOffset"]) == (sent[0]["queueId"], sent[0]["queueOffset"])
    for body in ("line one", "line two", "line three"):
        assert (by_body[body]["tags"], by_body[body]["keys"]) == ("B", None)
        assert "color" not in by_body[body]["properties"]
    assert [r["body"] for r in rows if r["body"].startswith("line")] == [
        "line one", "line two", "line three",
    ], "stdin lines keep their order"  # fmt: skip

    shown = filtered.ok().lines
    assert len(shown) == 5 and not any("skipped" in line for line in shown), filtered
    assert all(re.fullmatch(r"broker-cli/[01]@\d+ \[[AB]\] .+", line) for line in shown)
    assert filtered.stderr.strip() == "-- 5 message(s)"
    assert latest.ok().stdout == "" and latest.stderr.strip() == "-- 0 message(s)"
    assert len(first_three.ok().json_lines()) == 3

    assert viewed.ok().stdout.splitlines()[0].split() == ["topic:", "CliMsgs"]
    fields = dict(line.strip().split(": ", 1) for line in viewed.lines)
    assert (fields["body"], fields["tags"], fields["keys"]) == ("hello", "A", "k1 k2")
    assert viewed_json.ok().json_lines() == [hello]

    newest = max(row["storeTimestamp"] for row in rows)
    progress, progress_json = cli.run_all(["offsets", "cli-g"], ["offsets", "cli-g", "--json"])
    # --max 3 commits only what was shown: the next read of the group starts after them
    table = progress.ok().table()
    assert len(table) == 2 and {r["topic"] for r in table} == {"CliMsgs"}
    assert progress.lines[-1] == "total lag: 3"
    queues = progress_json.ok().json_lines()
    assert sorted(q["queueId"] for q in queues) == [0, 1]
    assert sum(q["committed"] for q in queues) == 3
    assert sum(q["max"] for q in queues) == 6
    for q in queues:
        assert q["lag"] == q["max"] - q["committed"], q
        assert {k: str(v) for k, v in q.items()} in table

    cli.run("send", "CliMsgs", "--tag", "A", "late").ok()
    since = cli.run(
        "consume", "CliMsgs", "--from", str(newest + 1), "--json", "--idle-exit-ms", "300"
    )
    assert [row["body"] for row in since.ok().json_lines()] == ["late"]


def test_send_from_stdin_with_json_streams_one_result_per_line(cli):
    cli.run("topic", "create", "CliStdin", "--queues", "1").ok()
    lines = [f"m{i}" for i in range(300)]  # more than one 256-message batch
    sent = cli.run("send", "CliStdin", "--json", stdin="\n".join(lines) + "\n").ok()
    rows = sent.json_lines()
    assert [row["queueOffset"] for row in rows] == list(range(300))
    got = cli.run("consume", "CliStdin", "--json", "--max", "300").ok().json_lines()
    assert [row["body"] for row in got] == lines

    # Without --from a group resumes where it committed: two runs share the messages.
    first = cli.run("consume", "CliStdin", "--json", "--max", "120", "--group", "resume-g")
    rest = cli.run("consume", "CliStdin", "--json", "--group", "resume-g", "--idle-exit-ms", "300")
    bodies = [row["body"] for row in first.ok().json_lines() + rest.ok().json_lines()]
    assert bodies == lines, "no message lost or repeated across the two runs"


# -- errors -------------------------------------------------------------------------------


def test_errors_are_one_line_without_traceback(cli):
    dead = f"127.0.0.1:{closed_port()}"
    usage = {"code": 2, "prefix": "rocketlite"}
    cases: list[tuple[list[str], tuple[str, ...], dict]] = [
        (["send", "NoSuchTopic", "x"], ("NoSuchTopic", "does not exist"), {}),
        (["topic", "delete", "NoSuchTopic"], ("NoSuchTopic", "does not exist"), {}),
        (["topic", "create", "bad/name"], ("'bad/name'", "characters"), {}),
        (["topic", "create", "%RETRY%mine"], ("reserved prefix",), {}),
        (["offsets", "bad/group"], ("'bad/group'",), {}),
        (["send", "AnyTopic", "x", "--property", "nope"], ("--property 'nope'", "NAME=VALUE"), {}),
        (["message", "ZZZ"], ("'ZZZ'", "offset message id"), {}),
        (["message", "7F000001000000000000000000000001"], ("no broker", "stores message"), {}),
        (["consume", "AnyTopic", "--from", "yesterday"], ("--from 'yesterday'",), {}),
        (["send", "AnyTopic", "x", "--endpoints", dead], (dead, "no broker answered"), {}),
        (["topic", "list", "--endpoints", "nonsense"], ("'nonsense'", "host:port"), {}),
        (["consume", "AnyTopic", "--max", "lots"], ("consume: error:", "--max", "'lots'"), usage),
        (["topic", "create"], ("rocketlite: error:", "needs a TOPIC name"), usage),
    ]
    runs = cli.run_all(*(args for args, _, _ in cases))
    for run, (_, needles, expect) in zip(runs, cases, strict=True):
        run.failed(*needles, **expect)
