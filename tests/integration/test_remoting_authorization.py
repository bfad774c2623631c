"""The remoting port authorizes what it executes: each case here is a way past the access
rules that the port once allowed, sent as raw signed frames (no rocketlite client code in
between), and what a user would notice: the answer, and that nothing was stored, ended or
copied where the ACL says no.

One broker with ACL serves the module: ``writer`` may publish to TopicA only, ``reader``
may subscribe to TopicA with GroupC, ``root`` is a super user."""

from __future__ import annotations

import itertools
import json

import pytest

from rmq_spark.auth.remoting_signature import sign_request
from rmq_spark.client import Admin, ClientConfig
from rmq_spark.codec.record import parse_offset_msg_id
from rmq_spark.wire.remoting import headers
from rmq_spark.wire.remoting.codes import RequestCode as C
from rmq_spark.wire.remoting.codes import ResponseCode
from rmq_spark.wire.remoting.frame import Command, encode
from tests.support.broker_harness import TEST_STORE_FLAGS, BrokerProcess
from tests.support.remoting_wire import Remoting, Wire

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
MAX_ITEMS = 16
MAX_REQUEST = 256 << 10


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
        "--max-request-items",
        str(MAX_ITEMS),
        "--max-request-bytes",
        str(MAX_REQUEST),
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
        ext = {**send_long("TopicB"), "b": "TopicA"}
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


def _frame(header: bytes) -> bytes:
    return (4 + len(header)).to_bytes(4, "big") + len(header).to_bytes(4, "big") + header


def test_hostile_text_before_login_cannot_fill_the_log(broker):
    """What a client chooses (a field's name, a value in a frame that cannot be read) does
    not make a new kind of log line, and a line is never as long as what was sent: without
    logging in, 40 refusals naming 100 KB fields, each another, and 20 unreadable frames,
    each another, leave a line of each kind at most."""
    mark = broker.log_mark()
    with broker.wire() as wire:
        for i in range(40):
            name = f"field{i}-" + "x" * 100_000
            ext = {name: "\ud800", "topic": "TopicA"}  # json.dumps writes \ud800 escaped
            header = json.dumps({"code": 105, "opaque": i, "extFields": ext}).encode()
            wire.send_bytes(_frame(header))
            answer = wire.response(i)
            refused(answer, ResponseCode.INVALID_PARAMETER, f"field{i}-x", "not valid Unicode")
            assert len(answer.remark) < 300
        assert call(wire, "writer", C.GET_ROUTEINFO_BY_TOPIC, {"topic": "TopicA"}).code == 0
    for i in range(20):
        with broker.wire() as wire:
            wire.send_bytes(_frame(b'{"code":"%d%s"}' % (i, b"y" * 100_000)))
            wire.hang_up_seen()
    logged = broker.log_since(mark)
    assert logged.count("not valid Unicode text") <= 1, logged[:2000]
    assert logged.count("not a whole number") <= 1, logged[:2000]
    assert len(logged) < 4_000, logged[:2000]
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
        # a subscription the broker cannot read, as a pull carrying it is answered
        refused(
            answer, ResponseCode.SUBSCRIPTION_PARSE_FAILED, "'TopicA'", "--max-subscription-chars"
        )
        many = [{"topic": "TopicA", "subString": "*"}] * (MAX_ITEMS + 1)
        heartbeat["consumerDataSet"][0]["subscriptionDataSet"] = many
        answer = call(wire, "reader", C.HEART_BEAT, {}, json.dumps(heartbeat).encode())
        refused(
            answer, ResponseCode.INVALID_PARAMETER, "subscriptionDataSet", "--max-request-items"
        )
        mq = {"topic": "TopicA", "brokerName": "broker-z", "queueId": 0}
        lock = {
            "consumerGroup": "GroupC",
            "clientId": "authz-client",
            "mqSet": [mq] * (MAX_ITEMS + 1),
        }
        answer = call(wire, "reader", C.LOCK_BATCH_MQ, {}, json.dumps(lock).encode())
        refused(answer, ResponseCode.INVALID_PARAMETER, "mqSet", "--max-request-items")


def test_a_frame_over_the_request_limit_closes_its_connection(broker):
    """--max-request-bytes bounds the remoting port's frames too (16 MiB, RocketMQ's frame
    limit, when the flag allows more): a send whose frame is larger is not read, stored or
    answered, and its connection is closed, as for any frame over the limit."""
    with broker.wire() as wire:
        before = max_offset(wire, "TopicA")
        # within the request limit, over the body limit: refused, and the connection serves on
        big = call(wire, "writer", C.SEND_MESSAGE_V2, send_ext("TopicA"), b"x" * (MAX_BODY + 1))
        refused(big, ResponseCode.MESSAGE_ILLEGAL, "--max-message-bytes")
        body = b"x" * MAX_REQUEST
        wire.send_bytes(
            encode(Command(code=C.SEND_MESSAGE_V2, ext=send_ext("TopicA"), body=body, opaque=9))
        )
        assert wire.hang_up_seen() == []
    with broker.wire() as wire:
        max_offset_now = max_offset(wire, "TopicA")
    assert max_offset_now == before


# -- the differential test ---------------------------------------------------------------------
#
# For every request code that reads a topic, group, transaction or offset: a request aimed
# at what the reader may not touch (TopicB, GroupX), sent as it is and with its fields
# conflicting (the same name in another case, another code's name for it), duplicated (the
# same key twice in the JSON header, either order) and missing, signed by the reader, who
# lacks the right, and by root, who has it. Where the ACL says no, nothing changes (TopicB's
# queue, the groups' offsets, the dead-letter and retry topics, the pending transaction,
# GroupX's members and locks) and no answer carries TopicB's records; where it says yes, the
# plain request is served, so the check is not simply refusing everything.

SECRET = b"SECRET-B"
FORBIDDEN = {"topic": "TopicB", "group": "GroupX"}
ALLOWED = {"topic": "TopicA", "group": "GroupC"}


def _templates(physical: int, half: dict) -> dict[str, tuple[int, dict, object]]:
    """name -> (code, header with {topic}/{group} holes, body: bytes, or a function of the
    two names giving bytes)."""
    queue = {"topic": "{topic}", "queueId": "0"}
    pull = {
        **queue,
        "consumerGroup": "{group}",
        "queueOffset": "0",
        "sysFlag": "4",
        "subscription": "*",
        "maxMsgNums": "32",
    }

    def heartbeat(topic: str, group: str) -> bytes:
        return json.dumps(
            {
                "clientID": "diff-client",
                "consumerDataSet": [
                    {"groupName": group, "subscriptionDataSet": [{"topic": topic}]}
                ],
            }
        ).encode()

    def lock(topic: str, group: str) -> bytes:
        return json.dumps(
            {
                "consumerGroup": group,
                "clientId": "diff-client",
                "mqSet": [{"topic": topic, "brokerName": "broker-z", "queueId": 0}],
            }
        ).encode()

    return {
        "send v1": (C.SEND_MESSAGE, {**send_long("{topic}")}, b"diff"),
        "send v2": (C.SEND_MESSAGE_V2, send_ext("{topic}"), b"diff"),
        "batch": (
            C.SEND_BATCH_MESSAGE,
            send_ext("{topic}", m="true"),
            headers.encode_batch([0], [b"diff"], [b""]),
        ),
        "pull": (C.PULL_MESSAGE, pull, b""),
        "lite pull": (C.LITE_PULL_MESSAGE, pull, b""),
        "query offset": (
            C.QUERY_CONSUMER_OFFSET,
            {**queue, "consumerGroup": "{group}", "setZeroIfNotFound": "false"},
            b"",
        ),
        "commit offset": (
            C.UPDATE_CONSUMER_OFFSET,
            {**queue, "consumerGroup": "{group}", "commitOffset": "1"},
            b"",
        ),
        "max offset": (C.GET_MAX_OFFSET, queue, b""),
        "min offset": (C.GET_MIN_OFFSET, queue, b""),
        "offset by time": (C.SEARCH_OFFSET_BY_TIMESTAMP, {**queue, "timestamp": "0"}, b""),
        "earliest time": (C.GET_EARLIEST_MSG_STORETIME, queue, b""),
        "by key": (
            C.QUERY_MESSAGE,
            {
                "topic": "{topic}",
                "key": "secret-key",
                "maxNum": "32",
                "beginTimestamp": "0",
                "endTimestamp": str(2**62),
                "_UNIQUE_KEY_QUERY": "false",
            },
            b"",
        ),
        "send back": (
            C.CONSUMER_SEND_MSG_BACK,
            {
                "group": "{group}",
                "offset": str(physical),
                "delayLevel": "-1",
                "originTopic": "{topic}",
            },
            b"",
        ),
        "end transaction": (
            C.END_TRANSACTION,
            {**half, "topic": "{topic}", "commitOrRollback": "12"},
            b"",
        ),
        "heartbeat": (C.HEART_BEAT, {}, heartbeat),
        "lock": (C.LOCK_BATCH_MQ, {}, lock),
        "unlock": (C.UNLOCK_BATCH_MQ, {}, lock),
        "consumer list": (C.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "{group}"}, b""),
        "consume stats": (
            C.GET_CONSUME_STATS,
            {"consumerGroup": "{group}", "topic": "{topic}"},
            b"",
        ),
        "connections": (C.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "{group}"}, b""),
        "route": (C.GET_ROUTEINFO_BY_TOPIC, {"topic": "{topic}"}, b""),
        "topic config": (C.GET_TOPIC_CONFIG, {"topic": "{topic}"}, b""),
        "topic stats": (C.GET_TOPIC_STATS_INFO, {"topic": "{topic}"}, b""),
        "consumed by": (C.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": "{topic}"}, b""),
        "view by id": (C.VIEW_MESSAGE_BY_ID, {"offset": str(physical)}, b""),
    }


def send_long(topic: str) -> dict:
    """SEND_MESSAGE's header (long names)."""
    return {
        "producerGroup": "pg",
        "topic": topic,
        "defaultTopic": "TBW102",
        "defaultTopicQueueNums": "4",
        "queueId": "0",
        "sysFlag": "0",
        "bornTimestamp": "1",
        "flag": "0",
    }


def _fill(ext: dict, names: dict) -> dict:
    return {k: v.format(**names) for k, v in ext.items()}


def _variants(ext: dict) -> list[tuple[str, list[tuple[str, str]]]]:
    """(label, header fields in order, repeats allowed), each aimed in part at what the
    signer may not touch: every mix of allowed, forbidden and missing values in the holes
    (all allowed left out), then, on the forbidden request, each hole with a conflicting
    field (another case, another code's name) and twice (either order)."""
    holes = [k for k, v in ext.items() if "{" in v]
    out = []
    for mix in itertools.product(("allowed", "forbidden", "missing"), repeat=len(holes)):
        if all(choice == "allowed" for choice in mix):
            continue
        choice_of = dict(zip(holes, mix, strict=True))
        fields = []
        for key, value in ext.items():
            choice = choice_of.get(key, "allowed")
            if choice != "missing":
                names = FORBIDDEN if choice == "forbidden" else ALLOWED
                fields.append((key, value.format(**names)))
        label = (
            "as it is"
            if set(mix) == {"forbidden"}
            else ", ".join(f"{k} {c}" for k, c in choice_of.items())
        )
        out.append((label, fields))
    forbidden = _fill(ext, FORBIDDEN)
    allowed = _fill(ext, ALLOWED)
    for key in holes:
        other = allowed[key]
        for alias in sorted({key.upper(), key.capitalize(), "b" if key == "topic" else "topic"}):
            if alias != key:  # a conflicting field the broker must not read instead
                out.append((f"{alias}={other}", [*forbidden.items(), (alias, other)]))
        # the same key twice: JSON parsers keep the last, and so must the check
        rest = [(k, v) for k, v in forbidden.items() if k != key]
        out.append((f"{key} twice, forbidden last", [*rest, (key, other), (key, forbidden[key])]))
        out.append((f"{key} twice, allowed last", [*rest, (key, forbidden[key]), (key, other)]))
    return out


def _raw_call(wire: Wire, user: str, code: int, fields: list, body: bytes) -> Command:
    """A JSON-header request written field by field (repeats kept), signed over what a JSON
    parser reads from it (the last of each repeated key)."""
    signed = sign_request(dict(fields), body, user, SECRETS[user])
    pairs = [*fields, ("AccessKey", signed["AccessKey"]), ("Signature", signed["Signature"])]
    ext = ",".join(f"{json.dumps(k)}:{json.dumps(v)}" for k, v in pairs)
    opaque = wire.next_opaque
    wire.next_opaque += 1
    header = f'{{"code":{code},"opaque":{opaque},"flag":0,"extFields":{{{ext}}}}}'.encode()
    frame = (4 + len(header) + len(body)).to_bytes(4, "big") + len(header).to_bytes(4, "big")
    wire.send_bytes(frame + header + body)
    return wire.response(opaque)


def _state(wire: Wire) -> dict:
    """What the forbidden requests must leave as it was, as root reads it."""
    topics = ("TopicB", "%DLQ%GroupX", "%RETRY%GroupX", "%DLQ%GroupC", "%RETRY%GroupC")
    state: dict = {t: max_offset(wire, t) for t in topics}
    for group in ("GroupX", "GroupC"):
        answer = call(
            wire,
            "root",
            C.QUERY_CONSUMER_OFFSET,
            {
                "topic": "TopicB",
                "queueId": "0",
                "consumerGroup": group,
                "setZeroIfNotFound": "false",
            },
        )
        state[f"offset {group}"] = (answer.code, answer.ext.get("offset"))
    members = call(wire, "root", C.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "GroupX"})
    state["members"] = (members.code, bytes(members.body))
    return state


def test_differential_conflicting_duplicated_and_missing_fields(broker):
    with broker.wire() as wire:
        secret = call(
            wire, "root", C.SEND_MESSAGE_V2, send_ext("TopicB", "KEYS\x01secret-key\x02"), SECRET
        )
        _, physical = parse_offset_msg_id(secret.ext["msgId"])
        pending = send(wire, "root", "TopicB", "TRAN_MSG\x01true\x02PGROUP\x01admin-pg\x02")
        half = {
            "producerGroup": "admin-pg",
            "tranStateTableOffset": pending.ext["queueOffset"],
            "commitLogOffset": str(parse_offset_msg_id(pending.ext["msgId"])[1]),
            "msgId": pending.ext["transactionId"],
        }
        # GroupX holds TopicB's queue 0 under root's client
        held = lambda: json.dumps(  # noqa: E731
            {
                "consumerGroup": "GroupX",
                "clientId": "owner",
                "mqSet": [{"topic": "TopicB", "brokerName": "broker-z", "queueId": 0}],
            }
        ).encode()
        assert json.loads(call(wire, "root", C.LOCK_BATCH_MQ, {}, held()).body)["lockOKMQSet"]
        before = _state(wire)
        problems, served, sent = [], 0, 0
        for name, (code, ext, body) in _templates(physical, half).items():
            for (label, fields), user in itertools.product(_variants(ext), ("reader", "writer")):
                if callable(body):  # a JSON body names the topic and group itself
                    mixes = [("TopicB", "GroupX"), ("TopicA", "GroupX"), ("TopicB", "GroupC")]
                    topic, group = mixes[sent % 3]
                    data = body(topic, group)
                else:
                    data = body
                sent += 1
                answer = _raw_call(wire, user, code, fields, data)
                where = f"{name}, {label}, by {user}: code {answer.code} {answer.remark!r:.80}"
                if SECRET in bytes(answer.body):
                    problems.append(f"{where}: TopicB's record leaked")
                if label == "as it is" and answer.code == ResponseCode.SUCCESS:
                    problems.append(f"{where}: served to a user without the right")
                if _state(wire) != before:
                    problems.append(f"{where}: changed what the ACL protects")
                    before = _state(wire)
                # the same request from root is served (or refused for a reason of its own)
                if label == "as it is" and name not in ("end transaction", "send back"):
                    data = body("TopicB", "GroupX") if callable(body) else body
                    if code in (C.HEART_BEAT, C.LOCK_BATCH_MQ, C.UNLOCK_BATCH_MQ):
                        continue  # these would change GroupX: root's own right is shown above
                    allowed = _raw_call(wire, "root", code, fields, data)
                    served += allowed.code != ResponseCode.NO_PERMISSION
                    before = _state(wire)
        assert not problems, f"{len(problems)} of {sent} requests:\n" + "\n".join(problems)
        assert served >= 15, f"root was served only {served} of the plain requests"
        # the transaction is still pending, the admin's to end, and GroupX's lock root's
        end = {**half, "commitOrRollback": "8"}
        b_before = int(max_offset(wire, "TopicB")[1])
        assert call(wire, "root", C.END_TRANSACTION, end).code == ResponseCode.SUCCESS
        assert int(max_offset(wire, "TopicB")[1]) == b_before + 1
        other = json.loads(held().replace(b'"owner"', b'"thief"'))
        got = call(wire, "root", C.LOCK_BATCH_MQ, {}, json.dumps(other).encode())
        assert json.loads(got.body)["lockOKMQSet"] == []
