"""The remoting port authorizes what it executes: each case here is a way past the access
rules that the port once allowed, sent as raw signed frames (no rocketlite client code in
between), and what a user would notice: the answer, and that nothing was stored, ended or
copied where the ACL says no.

One broker with ACL serves the module: ``writer`` may publish to TopicA only, ``reader``
may subscribe to TopicA with GroupC, ``root`` is a super user."""

from __future__ import annotations

import json

import pytest
from broker_harness import TEST_STORE_FLAGS, BrokerProcess
from remoting_wire import Remoting, Wire

from rmq_spark.auth.remoting_signature import sign_request
from rmq_spark.client import Admin, ClientConfig
from rmq_spark.codec.record import parse_offset_msg_id
from rmq_spark.remoting import headers
from rmq_spark.remoting.codes import RequestCode as C
from rmq_spark.remoting.codes import ResponseCode
from rmq_spark.remoting.frame import Command

SECRETS = {"root": "root-secret", "writer": "writer-secret", "reader": "reader-secret"}
ACL = {
    "users": [
        {"username": "root", "password": SECRETS["root"], "userType": "Super"},
        {"username": "writer", "password": SECRETS["writer"]},
        {"username": "reader", "password": SECRETS["reader"]},
    ],
    "acls": [
        {"subject": "User:writer", "policies": [{"entries": [
            {"resource": ["Topic:TopicA"], "actions": ["Pub"]}]}]},
        {"subject": "User:reader", "policies": [{"entries": [
            {"resource": ["Topic:TopicA", "Group:GroupC"], "actions": ["Sub"]}]}]},
    ],
}  # fmt: skip
BROKER_TOPICS = [
    "RMQ_SYS_TRANS_HALF_TOPIC",
    "RMQ_SYS_TRANS_OP_HALF_TOPIC",
    "rmq_sys_wheel_timer",
    "RMQ_SYS_SINK_HALF_TOPIC",
    "TRANS_CHECK_MAX_TIME_TOPIC",
    "SCHEDULE_TOPIC_XXXX",
    "%DLQ%GroupC",
]
MAX_BATCH = 8
MAX_BODY = 4096
MAX_SUBSCRIPTION = 64


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    root = tmp_path_factory.mktemp("remoting-authz")
    (root / "acl.json").write_text(json.dumps(ACL))
    flags = [
        *TEST_STORE_FLAGS,
        "--acl",
        str(root / "acl.json"),
        "--remoting-port",
        "0",
        "--max-batch-messages",
        str(MAX_BATCH),
        "--max-message-bytes",
        str(MAX_BODY),
        "--max-subscription-chars",
        str(MAX_SUBSCRIPTION),
    ]
    process = BrokerProcess("broker-z", root / "store", root / "broker.log", flags).start()
    config = ClientConfig(access_key="root", secret_key=SECRETS["root"])
    with Admin(process.endpoint, config) as admin:
        admin.create_topic("TopicA", queues=1)
        admin.create_topic("TopicB", queues=1)
    yield Remoting(process, process.remoting_address)
    process.clean_up()


def call(wire: Wire, user: str, code: int, ext: dict, body: bytes = b"") -> Command:
    return wire.call(code, sign_request(ext, body, user, SECRETS[user]), body)


def send_ext(topic: str, properties: str = "", **more: str) -> dict:
    ext = {"a": "pg", "b": topic, "c": "TBW102", "d": "4", "e": "0", "f": "0", "g": "1"}
    return {**ext, "h": "0", "i": properties, **more}


def max_offset(wire: Wire, topic: str) -> tuple[int, str]:
    """(code, offset) of GET_MAX_OFFSET on queue 0, as root sees it."""
    answer = call(wire, "root", C.GET_MAX_OFFSET, {"topic": topic, "queueId": "0"})
    return answer.code, answer.ext.get("offset", "")


def send(wire: Wire, user: str, topic: str, properties: str = "") -> Command:
    answer = call(wire, user, C.SEND_MESSAGE_V2, send_ext(topic, properties), b"payload")
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    return answer


def refused(answer: Command, code: int, *words: str) -> None:
    assert answer.code == code, (answer.code, answer.remark)
    for word in words:
        assert word in (answer.remark or ""), answer.remark


def test_a_send_is_checked_on_the_topic_it_stores_to(broker):
    with broker.wire() as wire:
        before = max_offset(wire, "TopicB")
        # SEND_MESSAGE reads the long names: topic=TopicB is what would be stored
        ext = {
            "producerGroup": "pg",
            "topic": "TopicB",
            "b": "TopicA",
            "defaultTopic": "TBW102",
            "defaultTopicQueueNums": "4",
            "queueId": "0",
            "sysFlag": "0",
            "bornTimestamp": "1",
            "flag": "0",
        }
        refused(
            call(wire, "writer", C.SEND_MESSAGE, ext, b"x"), ResponseCode.NO_PERMISSION, "TopicB"
        )
        assert max_offset(wire, "TopicB") == before
        # the other way round the send is the writer's own, and lands in TopicA only
        a_before = max_offset(wire, "TopicA")
        ok = call(wire, "writer", C.SEND_MESSAGE, {**ext, "topic": "TopicA", "b": "TopicB"}, b"x")
        assert ok.code == ResponseCode.SUCCESS, ok.remark
        assert int(max_offset(wire, "TopicA")[1]) == int(a_before[1]) + 1
        assert max_offset(wire, "TopicB") == before


def test_only_a_publisher_of_its_topic_ends_a_transaction(broker):
    with broker.wire() as wire:
        before = max_offset(wire, "TopicB")
        half = send(wire, "root", "TopicB", "TRAN_MSG\x01true\x02PGROUP\x01admin-pg\x02")
        _, physical = parse_offset_msg_id(half.ext["msgId"])
        end = {
            "producerGroup": "admin-pg",
            "tranStateTableOffset": half.ext["queueOffset"],
            "commitLogOffset": str(physical),
            "msgId": half.ext["transactionId"],
            "transactionId": half.ext["transactionId"],
        }
        for resolution in ("8", "12"):  # commit, rollback: neither is the writer's to do
            for topic in ({}, {"topic": "TopicA"}):
                answer = call(
                    wire,
                    "writer",
                    C.END_TRANSACTION,
                    {**end, **topic, "commitOrRollback": resolution},
                )
                refused(answer, ResponseCode.NO_PERMISSION, "TopicB")
        assert max_offset(wire, "TopicB") == before
        # RocketMQ's rule: the producer group and the positions are the half message's
        wrong_group = {**end, "producerGroup": "other-pg", "commitOrRollback": "8"}
        refused(
            call(wire, "root", C.END_TRANSACTION, wrong_group),
            ResponseCode.INVALID_PARAMETER,
            "admin-pg",
        )
        wrong_offset = {**end, "commitLogOffset": str(physical + 1), "commitOrRollback": "8"}
        refused(
            call(wire, "root", C.END_TRANSACTION, wrong_offset),
            ResponseCode.INVALID_PARAMETER,
            "commitLogOffset",
        )
        assert max_offset(wire, "TopicB") == before
        # the transaction is still pending: its producer commits it, once
        assert call(wire, "root", C.END_TRANSACTION, {**end, "commitOrRollback": "8"}).code == 0
        assert int(max_offset(wire, "TopicB")[1]) == int(before[1]) + 1
        again = call(wire, "root", C.END_TRANSACTION, {**end, "commitOrRollback": "12"})
        refused(again, ResponseCode.SYSTEM_ERROR, "already resolved")


@pytest.mark.parametrize("level", ["-1", "1"])
def test_a_send_back_cannot_copy_a_message_of_another_topic(broker, level):
    with broker.wire() as wire:
        secret = send(wire, "root", "TopicB")
        _, physical = parse_offset_msg_id(secret.ext["msgId"])
        copies = {t: max_offset(wire, t) for t in ("%DLQ%GroupC", "%RETRY%GroupC")}
        base = {"group": "GroupC", "offset": str(physical), "delayLevel": level}
        for origin, code, word in (
            ({}, ResponseCode.INVALID_PARAMETER, "TopicB"),  # not the group's retry topic
            ({"originTopic": "TopicA"}, ResponseCode.INVALID_PARAMETER, "TopicB"),
            ({"originTopic": "TopicB"}, ResponseCode.NO_PERMISSION, "TopicB"),  # no Sub on it
        ):
            refused(call(wire, "reader", C.CONSUMER_SEND_MSG_BACK, {**base, **origin}), code, word)
        assert {t: max_offset(wire, t) for t in copies} == copies


def test_a_send_back_of_the_groups_own_message_is_dead_lettered(broker):
    """The control: what the reader may consume, it may give back."""
    with broker.wire() as wire:
        mine = send(wire, "root", "TopicA")
        _, physical = parse_offset_msg_id(mine.ext["msgId"])
        dlq = max_offset(wire, "%DLQ%GroupC")
        back = {"group": "GroupC", "offset": str(physical), "delayLevel": "-1"}
        answer = call(wire, "reader", C.CONSUMER_SEND_MSG_BACK, {**back, "originTopic": "TopicA"})
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        after = max_offset(wire, "%DLQ%GroupC")
        assert after[0] == 0 and int(after[1]) == (int(dlq[1]) if dlq[0] == 0 else 0) + 1


@pytest.mark.parametrize("topic", BROKER_TOPICS)
def test_nobody_sends_to_the_brokers_own_topics(broker, topic):
    """Not even a super user: what these topics hold, the broker acts on."""
    with broker.wire() as wire:
        before = max_offset(wire, topic)
        for properties in ("", "TRAN_MSG\x01true\x02", "DELAY\x011\x02"):
            answer = call(wire, "root", C.SEND_MESSAGE_V2, send_ext(topic, properties), b"forged")
            refused(answer, ResponseCode.NO_PERMISSION, topic, "the broker's own")
        assert max_offset(wire, topic) == before


def test_a_signature_that_is_not_text_is_refused_before_login(broker):
    mark = broker.log_mark()
    header = (
        b'{"code":105,"opaque":7,"extFields":{"topic":"TopicA","AccessKey":"writer",'
        b'"Signature":"\\ud800"}}'
    )
    frame = len(header).to_bytes(4, "big")
    with broker.wire() as wire:
        wire.send_bytes((4 + len(header)).to_bytes(4, "big") + frame + header)
        answer = wire.response(7)
        refused(answer, ResponseCode.INVALID_PARAMETER, "Signature", "not valid Unicode text")
        assert call(wire, "writer", C.GET_ROUTEINFO_BY_TOPIC, {"topic": "TopicA"}).code == 0
    broker.assert_no_traceback_since(mark)


def test_every_limit_holds_on_the_remoting_port(broker):
    with broker.wire() as wire:
        before = max_offset(wire, "TopicA")
        batch = headers.encode_batch(
            [0] * (MAX_BATCH + 1), [b"m"] * (MAX_BATCH + 1), [b""] * (MAX_BATCH + 1)
        )
        answer = call(wire, "writer", C.SEND_BATCH_MESSAGE, send_ext("TopicA", m="true"), batch)
        refused(answer, ResponseCode.MESSAGE_ILLEGAL, f"{MAX_BATCH:,}", "--max-batch-messages")
        big = call(wire, "writer", C.SEND_MESSAGE_V2, send_ext("TopicA"), b"x" * (MAX_BODY + 1))
        refused(big, ResponseCode.MESSAGE_ILLEGAL, "--max-message-bytes")
        assert max_offset(wire, "TopicA") == before
        long = "T" + " || T".join(str(i) for i in range(40))
        pull = {
            "consumerGroup": "GroupC",
            "topic": "TopicA",
            "queueId": "0",
            "queueOffset": "0",
            "sysFlag": "4",  # the pull carries its subscription
            "subscription": long,
        }
        answer = call(wire, "reader", C.PULL_MESSAGE, pull)
        refused(answer, ResponseCode.SUBSCRIPTION_PARSE_FAILED, "--max-subscription-chars")
        heartbeat = {
            "clientID": "authz-client",
            "consumerDataSet": [
                {
                    "groupName": "GroupC",
                    "subscriptionDataSet": [{"topic": "TopicA", "subString": long}],
                }
            ],
        }
        answer = call(wire, "reader", C.HEART_BEAT, {}, json.dumps(heartbeat).encode())
        refused(answer, ResponseCode.INVALID_PARAMETER, "--max-subscription-chars")
