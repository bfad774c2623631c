"""Finding messages by key, as users do: ``Admin.query_messages`` over rocketlite.v1,
``rocketlite message --key`` (gRPC, and ``--namesrv`` over the remoting port), and
RocketMQ's QUERY_MESSAGE request itself, against two broker processes that share a topic.

Apache RocketMQ's own ``mqadmin`` and Java client against the remoting port are in
``test_remoting_java.py``; access control in ``test_access_control.py`` and
``test_remoting_acl.py``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from rmq_spark.client import Admin, Producer
from rmq_spark.client.remoting import RemotingClient, RemotingConnection
from rmq_spark.codec.arrow_decode import decode_records
from rmq_spark.errors import InvalidArgumentError, NotFoundError, RocketliteError, StoreError
from rmq_spark.structs import MessageQueue
from rmq_spark.wire.remoting.codes import RequestCode, ResponseCode
from rmq_spark.wire.remoting.frame import Command
from tests.support.broker_harness import TEST_STORE_FLAGS, BrokerProcess
from tests.support.eventually import eventually

CLI = [sys.executable, "-m", "rmq_spark.cli"]
TOPIC, OTHER = "KeyOrders", "KeyOther"
JAVA_LONG_MAX = str(2**63 - 1)


@pytest.fixture(scope="module")
def brokers(tmp_path_factory):
    root = tmp_path_factory.mktemp("message-keys")
    started = []
    for name in ("broker-a", "broker-b"):
        flags = [*TEST_STORE_FLAGS, "--remoting-port", "0"]
        started.append(BrokerProcess(name, root / name, root / f"{name}.log", flags).start())
    yield started
    for process in started:
        process.clean_up()


@pytest.fixture(scope="module")
def endpoints(brokers) -> str:
    return ",".join(b.endpoint for b in brokers)


@pytest.fixture(scope="module")
def sent(brokers, endpoints):
    """What was sent, by label: the SendResult of each message."""
    with Admin(endpoints) as admin:
        for topic in (TOPIC, OTHER):
            admin.create_topic(topic, queues=2)
    a, b = (MessageQueue(TOPIC, name, 0) for name in ("broker-a", "broker-b"))
    results = {}
    with Producer(endpoints) as producer:
        results["a1"] = producer.send(TOPIC, "a1", keys=["order-1", "vip"], queue=a)
        results["b1"] = producer.send(TOPIC, "b1", keys="order-1", queue=b)
        results["a2"] = producer.send(TOPIC, "a2", keys="order-2", queue=a)
        results["x1"] = producer.send(OTHER, "x1", keys="order-1")  # another topic
        for i in range(5):
            results[f"m{i}"] = producer.send(TOPIC, f"m{i}", keys="many", queue=a)
        results["early"] = producer.send(TOPIC, "early", keys="timed", queue=a)
        time.sleep(2.1)  # the index keeps store times to the second
        results["late"] = producer.send(TOPIC, "late", keys="timed", queue=a)
    with Admin(endpoints) as admin:  # indexed a moment after being stored
        eventually(
            lambda: len(bodies(admin.query_messages(TOPIC, "timed"))) == 2,
            what="both timed messages indexed",
        )
        eventually(
            lambda: bodies(admin.query_messages(OTHER, "order-1")) == ["x1"],
            what="the other topic's message indexed",
        )
    return results


def bodies(found) -> list[str]:
    return [b.decode() for batch, _ in found for b in batch.column("body").to_pylist()]


def by_broker(found) -> dict[str, list[str]]:
    return {name: [b.decode() for b in batch.column("body").to_pylist()] for batch, name in found}


def rocketlite(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=60)


# -- Admin (rocketlite.v1 QueryMessagesByKey) ---------------------------------------------


def test_a_key_is_found_on_every_broker_of_the_topic_and_only_in_that_topic(endpoints, sent):
    with Admin(endpoints) as admin:
        assert by_broker(admin.query_messages(TOPIC, "order-1")) == {
            "broker-a": ["a1"],
            "broker-b": ["b1"],
        }
        assert by_broker(admin.query_messages(TOPIC, "vip")) == {"broker-a": ["a1"]}
        assert by_broker(admin.query_messages(OTHER, "order-1")) == {
            sent["x1"].message_queue.broker_name: ["x1"]
        }
        [(batch, _)] = admin.query_messages(TOPIC, "order-2")
    row = batch.to_pylist()[0]
    assert (row["topic"], row["keys"], row["msgId"]) == (TOPIC, "order-2", sent["a2"].offset_msg_id)
    assert dict(row["properties"])["UNIQ_KEY"] == sent["a2"].msg_id


def test_a_unique_key_finds_its_one_message(endpoints, sent):
    with Admin(endpoints) as admin:
        for label in ("a1", "b1", "x1"):
            result = sent[label]
            found = admin.query_messages(result.message_queue.topic, result.msg_id)
            assert by_broker(found) == {result.message_queue.broker_name: [label]}
        assert admin.query_messages(OTHER, sent["a1"].msg_id) == []  # not that topic's


def test_max_count_keeps_the_newest(endpoints, sent):
    with Admin(endpoints) as admin:
        assert bodies(admin.query_messages(TOPIC, "many")) == ["m4", "m3", "m2", "m1", "m0"]
        assert bodies(admin.query_messages(TOPIC, "many", max_count=2)) == ["m4", "m3"]


def test_a_time_window_bounds_the_store_time(endpoints, sent):
    early, late = sent["early"].store_timestamp_ms, sent["late"].store_timestamp_ms
    assert late - early >= 2000
    with Admin(endpoints) as admin:
        assert bodies(admin.query_messages(TOPIC, "timed")) == ["late", "early"]
        assert bodies(admin.query_messages(TOPIC, "timed", begin_ms=late)) == ["late"]
        assert bodies(admin.query_messages(TOPIC, "timed", begin_ms=early + 1)) == ["late"]
        assert bodies(admin.query_messages(TOPIC, "timed", end_ms=early)) == ["early"]
        assert bodies(admin.query_messages(TOPIC, "timed", end_ms=early - 1)) == []
        between = admin.query_messages(TOPIC, "timed", begin_ms=early, end_ms=late)
        assert bodies(between) == ["late", "early"]


def test_nothing_found_and_bad_questions(endpoints, sent):
    with Admin(endpoints) as admin:
        assert admin.query_messages(TOPIC, "no-such-key") == []
        with pytest.raises(NotFoundError, match="NoSuchTopic"):
            admin.query_messages("NoSuchTopic", "order-1")
        with pytest.raises(InvalidArgumentError, match="holds a space"):
            admin.query_messages(TOPIC, "order-1 order-2")
        with pytest.raises(InvalidArgumentError, match="max_count"):
            admin.query_messages(TOPIC, "order-1", max_count=0)


# -- the rocketlite command -----------------------------------------------------------------


def test_cli_prints_one_block_per_message_newest_first(endpoints, sent):
    text = rocketlite("message", "--key", "order-1", "--topic", TOPIC, "--endpoints", endpoints)
    assert text.returncode == 0, text.stderr
    blocks = [dict(line.strip().split(": ", 1) for line in block.splitlines())
              for block in text.stdout.strip().split("\n\n")]  # fmt: skip
    assert sorted((b["brokerName"], b["body"], b["keys"]) for b in blocks) == [
        ("broker-a", "a1", "order-1 vip"),
        ("broker-b", "b1", "order-1"),
    ]
    assert [int(b["storeTimestamp"]) for b in blocks] == sorted(
        (int(b["storeTimestamp"]) for b in blocks), reverse=True
    )
    assert text.stderr.strip() == "-- 2 message(s)"


def test_cli_json_max_unique_key_and_the_offset_id_form(endpoints, sent):
    common = ("--topic", TOPIC, "--endpoints", endpoints, "--json")
    many = rocketlite("message", "--key", "many", "--max", "2", *common)
    assert many.returncode == 0, many.stderr
    assert [json.loads(line)["body"] for line in many.stdout.splitlines()] == ["m4", "m3"]
    assert many.stderr == ""  # --json: nothing but the rows
    shown = rocketlite("message", "--key", "many", "--max", "2", "--topic", TOPIC,
                       "--endpoints", endpoints)  # fmt: skip
    assert shown.stderr.strip() == "-- 2 message(s); more match: raise --max (now 2)"
    by_uniq = rocketlite("message", "--key", sent["b1"].msg_id, *common)
    [row] = [json.loads(line) for line in by_uniq.stdout.splitlines()]
    assert (row["body"], row["brokerName"]) == ("b1", "broker-b")
    by_id = rocketlite("message", sent["b1"].offset_msg_id, "--json", "--endpoints", endpoints)
    assert [json.loads(line) for line in by_id.stdout.splitlines()] == [row]
    window = rocketlite("message", "--key", "timed", "--from", str(sent["late"].store_timestamp_ms),
                        *common)  # fmt: skip
    assert [json.loads(line)["body"] for line in window.stdout.splitlines()] == ["late"]


def test_cli_errors_are_one_line(endpoints, sent):
    nothing = rocketlite("message", "--key", "no-such-key", "--topic", TOPIC, "--endpoints",
                         endpoints)  # fmt: skip
    assert nothing.returncode == 1 and nothing.stdout == ""
    assert nothing.stderr.startswith("error: no message of topic 'KeyOrders' has key")
    assert len(nothing.stderr.strip().splitlines()) == 1
    for args, said in [
        (["--key", "k"], "needs --topic"),
        ([], "an offset message id, or --key"),
        (["7F000001000000000000000000000001", "--key", "k", "--topic", TOPIC], "not both"),
        (["7F000001000000000000000000000001", "--topic", TOPIC], "go with --key"),
    ]:
        usage = rocketlite("message", *args, "--endpoints", endpoints)
        assert usage.returncode == 2 and said in usage.stderr, usage.stderr
        assert "Traceback" not in usage.stderr


def test_cli_with_namesrv_asks_the_remoting_port(brokers, sent):
    # broker-a's remoting port is a name server whose routes name broker-a alone
    ns = brokers[0].remoting_address
    found = rocketlite("message", "--key", "order-1", "--topic", TOPIC, "--namesrv", ns, "--json")
    assert found.returncode == 0, found.stderr
    [row] = [json.loads(line) for line in found.stdout.splitlines()]
    assert (row["body"], row["brokerName"], row["msgId"]) == (
        "a1",
        "broker-a",
        sent["a1"].offset_msg_id,
    )
    many = rocketlite("message", "--key", "many", "--max", "3", "--topic", TOPIC,
                      "--namesrv", ns, "--json")  # fmt: skip
    assert [json.loads(line)["body"] for line in many.stdout.splitlines()] == ["m4", "m3", "m2"]
    by_id = rocketlite("message", sent["a1"].offset_msg_id, "--namesrv", ns)
    assert by_id.returncode == 1 and "use mqadmin queryMsgById" in by_id.stderr


# -- RocketMQ's QUERY_MESSAGE, as mqadmin and the Java client send it ---------------------


def query(broker, key: str, max_num: int = 64, unique: bool = False, **ext: str) -> Command:
    fields = {
        "topic": TOPIC,
        "key": key,
        "maxNum": str(max_num),
        "beginTimestamp": "0",
        "endTimestamp": JAVA_LONG_MAX,
        "_UNIQUE_KEY_QUERY": str(unique).lower(),
        **ext,
    }
    connection = RemotingConnection(broker.remoting_address)
    try:
        return connection.call(Command(RequestCode.QUERY_MESSAGE, fields), 5.0)
    finally:
        connection.close()


def test_query_message_answers_records_oldest_first_like_rocketmq(brokers, sent):
    answer = query(brokers[0], "many")
    assert answer.code == ResponseCode.SUCCESS
    assert decode_records(answer.body).column("body").to_pylist() == [
        f"m{i}".encode() for i in range(5)
    ]
    assert (
        int(answer.ext["indexLastUpdateTimestamp"])
        >= sent["late"].store_timestamp_ms // 1000 * 1000
    )
    assert int(answer.ext["indexLastUpdatePhyoffset"]) > 0


def test_query_message_counts_like_rocketmq(brokers, sent):
    newest_two = query(brokers[0], "many", max_num=2)
    assert decode_records(newest_two.body).column("body").to_pylist() == [b"m3", b"m4"]
    # a unique-key query takes the broker's defaultQueryMaxNum (32), whatever maxNum says
    unique = query(brokers[0], "many", max_num=1, unique=True)
    assert len(decode_records(unique.body)) == 5


def test_query_message_not_found_and_missing_fields(brokers, sent):
    missing = query(brokers[1], "many")  # broker-b holds none of them
    assert missing.code == ResponseCode.QUERY_NOT_FOUND
    assert missing.remark == "can not find message, maybe time range not correct"
    outside = query(brokers[0], "many", endTimestamp="1000")
    assert outside.code == ResponseCode.QUERY_NOT_FOUND
    connection = RemotingConnection(brokers[0].remoting_address)
    try:
        bare = connection.call(Command(RequestCode.QUERY_MESSAGE, {"topic": TOPIC}), 5.0)
    finally:
        connection.close()
    assert (
        bare.code == ResponseCode.SYSTEM_ERROR and bare.remark == "the custom field <key> is null"
    )


# -- a broker that keeps no index -----------------------------------------------------------


def test_a_broker_without_an_index_says_so_on_every_surface(tmp_path):
    flags = [*TEST_STORE_FLAGS, "--remoting-port", "0", "--no-message-index"]
    plain = BrokerProcess("broker-n", tmp_path / "store", tmp_path / "n.log", flags).start()
    try:
        with Admin(plain.endpoint) as admin:
            admin.create_topic(TOPIC, queues=1)
        with Producer(plain.endpoint) as producer:
            result = producer.send(TOPIC, "kept", keys="order-1")
        with Admin(plain.endpoint) as admin:
            with pytest.raises(StoreError, match="--no-message-index"):
                admin.query_messages(TOPIC, "order-1")
            batch, _ = admin.view_message(result.offset_msg_id)  # the id form still works
            assert batch.column("body").to_pylist() == [b"kept"]
        cli = rocketlite("message", "--key", "order-1", "--topic", TOPIC, "--endpoints",
                         plain.endpoint)  # fmt: skip
        assert cli.returncode == 1 and len(cli.stderr.strip().splitlines()) == 1
        assert cli.stderr.startswith("error: ") and "--no-message-index" in cli.stderr
        with (
            RemotingClient(plain.remoting_address) as client,
            pytest.raises(RocketliteError, match="--no-message-index"),
        ):
            client.query_messages(TOPIC, "order-1")
    finally:
        plain.stop()
