"""Hostile bytes on the remoting port of a broker process: it must answer or hang up, never
crash, never store a partial message, and keep serving everyone else.

One broker (``--remoting-port 0 --auto-create-topics``) serves the whole module. Raw sockets
speak to it: valid frames come from :mod:`rmq_spark.wire.remoting.frame`, broken ones are made by
hand. The checks are what a client would see: a frame that cannot be read closes its
connection without an answer (RocketMQ's rule) while a fresh connection is still served; a
request the broker does not know gets REQUEST_CODE_NOT_SUPPORTED with its opaque, a oneway
one gets nothing; a send with a bad header or a batch whose sizes lie is refused with a
remark naming what is wrong and stores nothing; a seeded fuzz loop of mutated sends, pulls,
heartbeats and route lookups gets only deliberate answers or hang-ups and stores exactly the
messages whose sends succeeded. Every test also reads the broker's log for what it caused: a
handler error must be answered, not logged as a Python traceback.

Set RMQ_REMOTING_FUZZ_SEED to replay a fuzz run, RMQ_REMOTING_FUZZ_CASES to change its length.
"""

from __future__ import annotations

import json
import os
import random
import struct
import time
from collections import Counter
from dataclasses import dataclass, field

import pytest

from rmq_spark.client import Admin
from rmq_spark.codec.properties import decode_properties
from rmq_spark.codec.record import iter_records
from rmq_spark.store.verify import verify_store
from rmq_spark.wire.remoting import headers
from rmq_spark.wire.remoting.codes import LANGUAGES, RequestCode, ResponseCode
from rmq_spark.wire.remoting.frame import Command, FrameError, as_text, decode, encode
from tests.support.broker_harness import TEST_STORE_FLAGS, BrokerProcess
from tests.support.remoting_wire import MIB, Closed, Remoting, Wire

#: one worker runs the module in order: the last test stops the broker
pytestmark = pytest.mark.xdist_group("remoting_fuzz")

SEED = int(os.environ.get("RMQ_REMOTING_FUZZ_SEED", "20251126"))
CASES = int(os.environ.get("RMQ_REMOTING_FUZZ_CASES", "1000"))

NAME = "broker-rf"
GUARD = "RfGuard"  # bad sends aim at its queue 1; one good message waits on queue 0
BATCH = "RfBatch"  # lying batches aim at it; only the control batch lands, on queue 3
PROPS = "RfProps"
FUZZ = "RfFuzz"  # the fuzz loop's templates aim here
AFTER = "RfAfter"
TOPICS = (GUARD, BATCH, PROPS, FUZZ, AFTER)
QUEUES = 4
PRODUCER_GROUP = "RfProducers"
CONSUMER_GROUP = "RfConsumers"
AUDIT_GROUP = "RfAudit"  # reads without committing

INTERNAL = "internal broker error"
#: every code this broker answers with on purpose (ResponseCode lists RocketMQ's)
ANSWER_CODES = frozenset(int(code) for code in ResponseCode)
#: the requests the fuzz loop may end up sending (a mutation that turns a request into
#: another, e.g. 11 -> 17 UPDATE_AND_CREATE_TOPIC, is drawn again): its templates, the
#: other sends and reads they turn into by one changed digit, and codes the broker does
#: not know (those must get REQUEST_CODE_NOT_SUPPORTED)
FUZZ_CODES = frozenset({10, 11, 14, 30, 31, 34, 105, 310, 320})
KNOWN_CODES = frozenset(int(code) for code in RequestCode)
SEND_CODES = frozenset({10, 310, 320})


# -- the wire ---------------------------------------------------------------------------------


def send_ext(topic: str, queue_id: int | str, properties: str = "", **changes) -> dict:
    """SEND_MESSAGE_V2's header (one-letter names); a change of None drops the field."""
    ext = {
        "a": PRODUCER_GROUP,
        "b": topic,
        "c": "TBW102",
        "d": "4",
        "e": str(queue_id),
        "f": "0",
        "g": str(int(time.time() * 1000)),
        "h": "0",
        "i": properties,
        "j": "0",
        "m": "false",
    }
    ext.update(changes)
    return {name: value for name, value in ext.items() if value is not None}


def pull_ext(topic: str, queue_id: int, offset: int, group: str = AUDIT_GROUP, **changes):
    ext = {
        "consumerGroup": group,
        "topic": topic,
        "queueId": str(queue_id),
        "queueOffset": str(offset),
        "maxMsgNums": "32",
        "sysFlag": "4",  # the subscription field below, no commit, no suspend
        "commitOffset": "0",
        "suspendTimeoutMillis": "0",
        "subscription": "*",
        "subVersion": "0",
        "expressionType": "TAG",
    }
    ext.update(changes)
    return ext


def heartbeat_body(client_id: str) -> dict:
    return {
        "clientID": client_id,
        "producerDataSet": [{"groupName": PRODUCER_GROUP}],
        "consumerDataSet": [
            {
                "groupName": CONSUMER_GROUP,
                "consumeType": "CONSUME_ACTIVELY",
                "messageModel": "CLUSTERING",
                "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
                "subscriptionDataSet": [
                    {
                        "topic": FUZZ,
                        "subString": "*",
                        "expressionType": "TAG",
                        "tagsSet": [],
                        "codeSet": [],
                        "subVersion": 0,
                    }
                ],
                "unitMode": False,
            }
        ],
    }


def frame_of(header: bytes | str, body: bytes = b"", kind: int = 0) -> bytes:
    """A frame around ``header`` with a true length and header length."""
    if isinstance(header, str):
        header = header.encode()
    return struct.pack(">ii", 4 + len(header) + len(body), kind << 24 | len(header)) + header + body


def binary_header(code=105, language=0, version=0, opaque=1, flag=0, remark=b"", ext=b""):
    """RocketMQ's binary header (serialize type 1) from its parts, lengths true."""
    return (
        struct.pack(">hBhii", code, language, version, opaque, flag)
        + struct.pack(">i", len(remark))
        + remark
        + struct.pack(">i", len(ext))
        + ext
    )


def binary_ext(pairs: dict[str, str]) -> bytes:
    parts = []
    for key, value in pairs.items():
        k, v = key.encode("utf-8", "surrogatepass"), value.encode("utf-8", "surrogatepass")
        parts.append(struct.pack(">h", len(k)) + k + struct.pack(">i", len(v)) + v)
    return b"".join(parts)


# -- the broker and what it holds -------------------------------------------------------------


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    base = tmp_path_factory.mktemp("remoting-fuzz")
    flags = [*TEST_STORE_FLAGS, "--remoting-port", "0", "--auto-create-topics"]
    process = BrokerProcess(NAME, base / "store", base / "broker.log", flags)
    process.start()
    with Admin(process.endpoint) as admin:
        for topic in TOPICS:
            admin.create_topic(topic, queues=QUEUES)
    remoting = Remoting(process, process.remoting_address)
    with remoting.wire() as wire:
        seeded = wire.call(310, send_ext(GUARD, 0), b"guard")
        assert seeded.code == 0, seeded.remark
    yield remoting
    process.clean_up()


def max_offsets(wire: Wire, topic: str) -> list[int]:
    """GET_MAX_OFFSET of every queue of ``topic``."""
    offsets = []
    for queue_id in range(QUEUES):
        answer = wire.call(30, {"topic": topic, "queueId": str(queue_id)})
        assert answer.code == 0, answer.remark
        offsets.append(int(answer.ext["offset"]))
    return offsets


def read_queue(wire: Wire, topic: str, queue_id: int) -> list:
    """Every record of one queue, pulled over remoting (CRCs checked)."""
    records, offset = [], 0
    for _ in range(1000):
        answer = wire.call(11, pull_ext(topic, queue_id, offset))
        if answer.code == ResponseCode.SUCCESS:
            got = list(iter_records(answer.body))
            assert got, "a FOUND pull answer without records"
            records += got
            offset = int(answer.ext["nextBeginOffset"])
        elif answer.code == ResponseCode.PULL_OFFSET_MOVED and offset == 0:
            offset = int(answer.ext["nextBeginOffset"])
        elif answer.code == ResponseCode.PULL_NOT_FOUND:
            return records
        else:
            pytest.fail(f"pull of {topic}/{queue_id} at {offset}: {answer.code} {answer.remark}")
    pytest.fail(f"{topic}/{queue_id} did not end")


def stored_messages(wire: Wire) -> Counter:
    """(topic, queue id, body) of every stored message of every topic, counted."""
    listing = wire.call(206)
    assert listing.code == 0, listing.remark
    found: Counter = Counter()
    for topic in json.loads(listing.body)["topicList"]:
        route = wire.call(105, {"topic": topic})
        assert route.code == 0, (topic, route.remark)
        queues = json.loads(route.body)["queueDatas"][0]["readQueueNums"]
        for queue_id in range(queues):
            for record in read_queue(wire, topic, queue_id):
                assert (record.topic, record.queue_id) == (topic, queue_id), record
                found[(topic, queue_id, record.body)] += 1
    return found


def assert_route_served(remoting: Remoting) -> None:
    """A fresh connection gets GET_ROUTEINFO_BY_TOPIC answered, naming this broker."""
    with remoting.wire() as wire:
        answer = wire.call(105, {"topic": GUARD})
    assert answer.code == 0, answer.remark
    route = json.loads(answer.body)
    assert route["brokerDatas"][0]["brokerName"] == NAME
    assert route["brokerDatas"][0]["brokerAddrs"]["0"] == remoting.address
    assert route["queueDatas"][0]["writeQueueNums"] == QUEUES


def assert_refused(answer: Command, *words: str) -> None:
    assert answer.code != ResponseCode.SUCCESS, f"accepted: {answer.ext}"
    assert answer.code in ANSWER_CODES, f"code {answer.code}: {answer.remark}"
    remark = answer.remark or ""
    assert not remark.startswith(INTERNAL), f"an internal error, not a refusal: {remark}"
    assert all(word.lower() in remark.lower() for word in words), (
        f"remark {remark!r} does not name {words}"
    )


# -- unreadable frames ------------------------------------------------------------------------


def _random_frame() -> bytes:
    """Random bytes with a true length prefix, drawn until the codec refuses them."""
    rng = random.Random(SEED)
    while True:
        payload = bytes(rng.randrange(256) for _ in range(60))
        try:
            decode(payload)
        except FrameError:
            return struct.pack(">i", len(payload)) + payload


NESTED = 50_000  # far past any parser's recursion limit

UNREADABLE = {
    "random bytes": _random_frame(),
    "an HTTP request": b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
    "a TLS client hello": bytes.fromhex("16030100c4010000c00303") + bytes(64),
    "negative length": struct.pack(">i", -7) + bytes(16),
    "zero length": struct.pack(">i", 0) + bytes(8),
    "length 3 (no header length)": struct.pack(">i", 3) + b"abc",
    "length over RocketMQ's 16 MiB frame limit": struct.pack(">i", 16 * MIB + 1),
    "length 2**31-1": struct.pack(">i", 2**31 - 1),
    "header length past the frame": struct.pack(">ii", 10, 100) + b'{"code":1}'[:6],
    "header length 0xFFFFFF": struct.pack(">ii", 8, 0xFFFFFF) + b"{}{}",
    "header not JSON": frame_of("hello, broker"),
    "header JSON cut short": frame_of('{"code":105,"opaque":1'),
    "header empty": frame_of(b""),
    "header a JSON array": frame_of("[105, 1]"),
    "header a JSON string": frame_of('"code"'),
    "header JSON null": frame_of("null"),
    "code a string": frame_of('{"code":"105","opaque":1}'),
    "code a fraction": frame_of('{"code":105.5,"opaque":1}'),
    "code true": frame_of('{"code":true,"opaque":1}'),
    "code null": frame_of('{"code":null,"opaque":1}'),
    "code missing": frame_of('{"opaque":1,"extFields":{"topic":"RfGuard"}}'),
    "opaque a string": frame_of('{"code":105,"opaque":"1"}'),
    "flag NaN": frame_of('{"code":105,"opaque":1,"flag":NaN}'),
    "extFields a list": frame_of('{"code":105,"opaque":1,"extFields":["topic"]}'),
    "unknown serialize type 5": frame_of('{"code":105,"opaque":1}', kind=5),
    "binary header cut short": frame_of(b"\x00\x69\x00", kind=1),
    "binary remark length past header": frame_of(
        binary_header()[:13] + struct.pack(">i", 500) + b"x", kind=1
    ),
    "binary extFields length past header": frame_of(
        binary_header()[:-4] + struct.pack(">i", 1000), kind=1
    ),
    "binary extFields key length negative": frame_of(
        binary_header(ext=struct.pack(">h", -3) + b"abc" + struct.pack(">i", 1) + b"v"), kind=1
    ),
    "header JSON nested 50,000 deep": frame_of(
        '{"code":105,"opaque":1,"extFields":{"topic":' + "[" * NESTED + "]" * NESTED + "}}"
    ),
}


@pytest.mark.parametrize("data", UNREADABLE.values(), ids=UNREADABLE.keys())
def test_unreadable_frame_closes_only_its_connection(broker, data):
    """RocketMQ closes a connection whose frame it cannot read, answering nothing; every
    other connection goes on as before."""
    mark = broker.log_mark()
    with broker.wire() as bystander, broker.wire() as wire:
        assert bystander.call(105, {"topic": GUARD}).code == 0
        try:
            wire.send_bytes(data)
        except Closed:
            pass
        answered = wire.hang_up_seen()
        assert not answered, f"the broker answered an unreadable frame: {answered}"
        # a connection open all along is still served, and so is a new one
        assert bystander.call(105, {"topic": GUARD}).code == 0
    assert_route_served(broker)
    broker.assert_no_traceback_since(mark)


SURROGATE = "\\ud800"  # a lone surrogate as JSON writes it: valid JSON, not text
#: header fields that are not Unicode text: (frame, the field the refusal must name). The
#: broker answers each, naming the field, and serves on; no traceback reaches its log.
NOT_TEXT = {
    "route topic, a lone surrogate": (
        frame_of(f'{{"code":105,"opaque":7,"extFields":{{"topic":"{SURROGATE}"}}}}'),
        "topic",
    ),
    "topic stats topic, a lone surrogate": (
        frame_of(f'{{"code":202,"opaque":7,"extFields":{{"topic":"Rf{SURROGATE}"}}}}'),
        "topic",
    ),
    "update topic, a lone surrogate": (
        frame_of(f'{{"code":351,"opaque":7,"extFields":{{"topic":"{SURROGATE}"}}}}'),
        "topic",
    ),
    "pull expressionType, a lone surrogate": (
        frame_of(
            '{"code":11,"opaque":7,"extFields":{"consumerGroup":"RfAudit","topic":"RfGuard",'
            f'"queueId":"0","queueOffset":"0","sysFlag":"2","expressionType":"{SURROGATE}"}}}}'
        ),
        "expressionType",
    ),
    "KV namespace, a lone surrogate": (
        frame_of(
            f'{{"code":100,"opaque":7,"extFields":{{"namespace":"{SURROGATE}","key":"k",'
            '"value":"v"}}'
        ),
        "namespace",
    ),
    "KV value, a lone surrogate": (
        frame_of(
            '{"code":100,"opaque":7,"extFields":{"namespace":"ns","key":"k",'
            f'"value":"{SURROGATE}"}}}}'
        ),
        "value",
    ),
    "send properties, a lone surrogate": (
        frame_of(
            '{"code":310,"opaque":7,"extFields":{"a":"RfProducers","b":"RfGuard",'
            '"c":"TBW102","d":"4","e":"1","f":"0","g":"1","h":"0",'
            f'"i":"KEYS\\u0001x{SURROGATE}\\u0002"}}}}',
            b"must not be stored",
        ),
        "i",
    ),
    "a key, a lone surrogate": (
        frame_of(f'{{"code":105,"opaque":7,"extFields":{{"{SURROGATE}":"x","topic":"T"}}}}'),
        "'\\ud800'",
    ),
    "route topic, bytes not UTF-8": (
        frame_of(b'{"code":105,"opaque":7,"extFields":{"topic":"Rf\xff\xfe"}}'),
        "topic",
    ),
    "binary header remark, bytes not UTF-8": (
        frame_of(binary_header(opaque=7, remark=b"\xff\xfe"), kind=1),
        "remark",
    ),
}


@pytest.mark.parametrize(("data", "field"), NOT_TEXT.values(), ids=NOT_TEXT.keys())
def test_header_text_that_is_not_unicode_is_refused_naming_the_field(broker, data, field):
    """A header field that is not valid Unicode text gets a clear refusal that names it,
    the connection serves on, nothing is stored, and the log holds no traceback."""
    mark = broker.log_mark()
    with broker.wire() as wire:
        before = max_offsets(wire, GUARD)
        wire.send_bytes(data)
        answer = wire.response(7)
        assert answer.code == ResponseCode.INVALID_PARAMETER, answer.remark
        assert f"header field {field}" in (answer.remark or ""), answer.remark
        assert "not valid Unicode text" in (answer.remark or "")
        assert wire.call(105, {"topic": GUARD}).code == 0  # the same connection answers on
        assert max_offsets(wire, GUARD) == before, "a refused send stored a message"
    broker.assert_no_traceback_since(mark)


def test_json_bodies_that_are_not_unicode_are_refused_naming_where(broker):
    """A heartbeat whose body holds a lone surrogate (or bytes that are not UTF-8) is
    refused naming where; nothing joins the group, and no answer fails to encode."""
    mark = broker.log_mark()
    bodies = [
        b'{"clientID":"rf-\\ud800","consumerDataSet":[]}',
        b'{"clientID":"rf-ok","consumerDataSet":[{"groupName":"RfBad\xff"}]}',
    ]
    with broker.wire() as wire:
        for body in bodies:
            answer = wire.call(34, {}, body)
            assert answer.code != ResponseCode.SUCCESS
            assert "not valid Unicode text" in (answer.remark or ""), answer.remark
        listed = wire.call(38, {"consumerGroup": "RfBad"})
        assert listed.code != ResponseCode.SUCCESS  # nobody joined
    broker.assert_no_traceback_since(mark)


def test_frames_in_pieces_and_back_to_back_are_all_answered(broker):
    """The reader must not care how frames are cut into TCP segments."""
    mark = broker.log_mark()
    requests = [Command(105, {"topic": GUARD}, opaque=opaque) for opaque in (11, 12, 13)]
    data = b"".join(encode(request) for request in requests)
    with broker.wire() as wire:
        wire.send_bytes(data)  # three in one write
        assert sorted(wire.response(o).opaque for o in (11, 12, 13)) == [11, 12, 13]
        one = encode(Command(105, {"topic": GUARD}, opaque=14))
        for i in range(len(one)):  # one byte a write
            wire.send_bytes(one[i : i + 1])
        assert wire.response(14).code == 0
        # a binary header (serialize type 1) is read too, and answered in JSON
        header = binary_header(code=105, opaque=15, ext=binary_ext({"topic": GUARD}))
        wire.send_bytes(frame_of(header, kind=1))
        answer = wire.response(15)
        assert answer.code == 0 and json.loads(answer.body)["brokerDatas"]
    broker.assert_no_traceback_since(mark)


# -- requests the broker does not know --------------------------------------------------------


@pytest.mark.parametrize("code", [9999, 0, -5, 2**40], ids=lambda c: f"code {c}")
def test_unknown_request_code_gets_code_3_with_its_opaque(broker, code):
    mark = broker.log_mark()
    with broker.wire() as wire:
        answer = wire.call(code, {"topic": GUARD}, b"body")
        assert answer.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED, answer.remark
        assert str(code) in (answer.remark or "")
        assert wire.call(105, {"topic": GUARD}).code == 0  # the connection stays open
    broker.assert_no_traceback_since(mark)


def test_oneway_and_response_frames_get_no_answer(broker):
    """A oneway request (flag bit 1) gets no response, even an error; a frame flagged as a
    response (bit 0) answers nothing the broker asked, and is dropped."""
    mark = broker.log_mark()
    with broker.wire() as wire:
        silent = [
            Command(9999, opaque=101, flag=2),  # oneway, unknown code
            Command(11, {"topic": "NoSuchTopic"}, opaque=102, flag=2),  # oneway, bad pull
            Command(9999, opaque=103, flag=1),  # a "response" to nothing
            Command(105, {"topic": GUARD}, opaque=104, flag=3),
        ]
        for command in silent:
            wire.send_bytes(encode(command))
        time.sleep(0.3)  # the handlers of the oneway requests run meanwhile
        ping = wire.call(105, {"topic": GUARD})  # fails on a response to 101..104
        assert ping.code == 0
    broker.assert_no_traceback_since(mark)


# -- sends that must be refused ---------------------------------------------------------------

BAD_SENDS = {
    # field changes (one-letter names), the words the remark must hold
    "queueId abc": ({"e": "abc"}, "", ("queueId",)),
    "queueId missing": ({"e": None}, "", ("queueId",)),
    "queueId 99 of 4": ({"e": "99"}, "", ("queue",)),
    "queueId 2**70": ({"e": str(2**70)}, "", ("queue",)),
    "bornTimestamp missing": ({"g": None}, "", ("bornTimestamp",)),
    "bornTimestamp x": ({"g": "x"}, "", ("bornTimestamp",)),
    "bornTimestamp 2**70": ({"g": str(2**70)}, "", ("bornTimestamp",)),
    "flag 2**40": ({"h": str(2**40)}, "", ("flag",)),
    "flag 1.5": ({"h": "1.5"}, "", ("flag",)),
    "sysFlag zz": ({"f": "zz"}, "", ("sysFlag",)),
    "reconsumeTimes 2**40": ({"j": str(2**40)}, "", ("reconsumeTimes",)),
    "topic missing": ({"b": None}, "", ("topic",)),
    "topic with a space": ({"b": "a b"}, "", ("topic",)),
    "producerGroup missing": ({"a": None}, "", ("producerGroup",)),
    "DELAY property abc": ({}, "DELAY\x01abc\x02", ("DELAY",)),
    "DELAY property 1.5": ({}, "DELAY\x011.5\x02", ("DELAY",)),
}


@pytest.mark.parametrize("case", BAD_SENDS.values(), ids=BAD_SENDS.keys())
def test_send_with_a_bad_header_is_refused_and_stores_nothing(broker, case):
    changes, properties, words = case
    mark = broker.log_mark()
    with broker.wire() as wire:
        before = max_offsets(wire, GUARD)
        answer = wire.call(310, send_ext(GUARD, 1, properties, **changes), b"must not be stored")
        assert_refused(answer, *words)
        assert max_offsets(wire, GUARD) == before, "the refused send stored a message"
    broker.assert_no_traceback_since(mark)


@pytest.mark.parametrize("topic", ["%DLQ%rf-group", "SCHEDULE_TOPIC_XXXX"])
def test_a_send_to_the_brokers_own_topic_is_refused_and_the_connection_serves_on(broker, topic):
    mark = broker.log_mark()
    with broker.wire() as wire:
        answer = wire.call(310, send_ext(topic, 0), b"not for the broker's topics")
        assert answer.code == ResponseCode.NO_PERMISSION, answer.remark
        assert "the broker's own" in (answer.remark or "")
        assert wire.call(105, {"topic": GUARD}).code == 0  # the same connection answers on
    broker.assert_no_traceback_since(mark)


def test_properties_without_the_last_separator_keep_their_values(broker):
    """The properties text may end without its last separator (RocketMQ's parser takes
    it); the unique key the broker adds must not run into the last value: the stored
    message keeps its KEYS and carries the key the send answer named."""
    mark = broker.log_mark()
    with broker.wire() as wire:
        answer = wire.call(310, send_ext(PROPS, 2, "KEYS\x01k1\x02TAGS\x01t1"), b"props")
        if answer.code != ResponseCode.SUCCESS:  # refusing it is fine too
            assert_refused(answer)
            assert max_offsets(wire, PROPS) == [0] * QUEUES
        else:
            (record,) = read_queue(wire, PROPS, 2)
            stored = decode_properties(record.properties)
            assert stored.get("KEYS") == "k1"
            assert stored.get("TAGS") == "t1", f"stored properties {record.properties!r}"
            assert stored.get("UNIQ_KEY") == answer.ext["transactionId"]
    broker.assert_no_traceback_since(mark)


# -- batches whose sizes lie ------------------------------------------------------------------

GOOD_BATCH = headers.encode_batch([0, 0], [b"first", b"second"], [b"KEYS\x01a\x02", b""])
FIRST_END = 20 + 5 + 2 + 8  # the first message: head, body, properties length, properties


def _patched(data: bytes, position: int, fmt: str, value: int) -> bytes:
    out = bytearray(data)
    struct.pack_into(fmt, out, position, value)
    return bytes(out)


LYING_BATCHES = {
    "total size too big": _patched(GOOD_BATCH, 0, ">i", 999),
    "total size too small": _patched(GOOD_BATCH, 0, ">i", 10),
    "body length past the end": _patched(GOOD_BATCH, 16, ">i", 100_000),
    "body length negative": _patched(GOOD_BATCH, 16, ">i", -1),
    "properties length negative": _patched(GOOD_BATCH, 25, ">h", -2),
    "second total size lies": _patched(GOOD_BATCH, FIRST_END, ">i", 31),
    "second body length lies": _patched(GOOD_BATCH, FIRST_END + 16, ">i", 7),
    "second message cut short": GOOD_BATCH[:-3],
    "trailing bytes": GOOD_BATCH + b"\x00\x00\x00",
    "empty": b"",
}


@pytest.mark.parametrize("body", LYING_BATCHES.values(), ids=LYING_BATCHES.keys())
def test_batch_whose_sizes_lie_is_refused_whole(broker, body):
    """No message of a batch is stored when any part of it does not add up (a good first
    message before a lying second one included)."""
    mark = broker.log_mark()
    with broker.wire() as wire:
        before = max_offsets(wire, BATCH)
        answer = wire.call(320, send_ext(BATCH, 0, m="true"), body)
        assert_refused(answer, "batch")
        assert max_offsets(wire, BATCH) == before, "part of a refused batch was stored"
    broker.assert_no_traceback_since(mark)


def test_the_good_batch_is_stored_whole(broker):
    """The control of the test above: unchanged, the batch is stored, both messages."""
    with broker.wire() as wire:
        answer = wire.call(320, send_ext(BATCH, 3, m="true"), GOOD_BATCH)
        assert answer.code == 0, answer.remark
        assert len(answer.ext["msgId"].split(",")) == 2
        assert [r.body for r in read_queue(wire, BATCH, 3)] == [b"first", b"second"]


# -- reads that find nothing ------------------------------------------------------------------


def test_pull_of_a_topic_that_does_not_exist_is_code_17(broker):
    mark = broker.log_mark()
    with broker.wire() as wire:
        answer = wire.call(11, pull_ext("RfNoSuchTopic", 0, 0))
        assert answer.code == ResponseCode.TOPIC_NOT_EXIST, answer.remark
        assert "RfNoSuchTopic" in (answer.remark or "") and not answer.body
        # and a pull is not a send: it did not create the topic
        assert wire.call(105, {"topic": "RfNoSuchTopic"}).code == ResponseCode.TOPIC_NOT_EXIST
    broker.assert_no_traceback_since(mark)


def test_query_of_a_group_without_offset_is_code_22(broker):
    """QUERY_NOT_FOUND when the group committed nothing and asks not to start at 0
    (setZeroIfNotFound=false), on an empty queue and on one holding a message; once the
    group commits, the query finds that offset."""
    mark = broker.log_mark()
    with broker.wire() as wire:
        for queue_id in ("3", "0"):  # GUARD's queue 0 holds a message, queue 3 none
            query = {"consumerGroup": "RfNobody", "topic": GUARD, "queueId": queue_id}
            answer = wire.call(14, {**query, "setZeroIfNotFound": "false"})
            assert answer.code == ResponseCode.QUERY_NOT_FOUND, (answer.code, answer.remark)
            assert "offset" not in answer.ext
        commit = {"consumerGroup": "RfCommitter", "topic": GUARD, "queueId": "0"}
        assert wire.call(15, {**commit, "commitOffset": "1"}).code == 0
        answer = wire.call(14, {**commit, "setZeroIfNotFound": "false"})
        assert (answer.code, answer.ext.get("offset")) == (0, "1"), answer.remark
    broker.assert_no_traceback_since(mark)


def test_pull_with_a_subscription_over_the_limit_is_refused_naming_it(broker):
    mark = broker.log_mark()
    with broker.wire() as wire:
        answer = wire.call(11, pull_ext(GUARD, 0, 0, subscription="T" + " || T" * 5000))
        assert answer.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED, answer.remark
        assert "--max-subscription-chars" in (answer.remark or "")
    broker.assert_no_traceback_since(mark)


# -- heartbeats that are not HeartbeatData ----------------------------------------------------


def _heartbeat(**consumer_changes) -> bytes:
    body = heartbeat_body("rf-bad-heartbeat")
    body["consumerDataSet"][0].update(consumer_changes)
    return json.dumps(body).encode()


BAD_HEARTBEATS = {
    "not JSON": b"{clientID:",
    "a JSON list": b'["rf"]',
    "no clientID": b'{"consumerDataSet":[]}',
    "consumerDataSet a number": b'{"clientID":"rf","consumerDataSet":5}',
    "producerDataSet a number": b'{"clientID":"rf","producerDataSet":5}',
    "consumeType a list": _heartbeat(consumeType=["CONSUME_ACTIVELY"]),
    "consumeFromWhere an object": _heartbeat(consumeFromWhere={}),
    "subscriptionDataSet a number": _heartbeat(subscriptionDataSet=7),
    "groupName a number": _heartbeat(groupName=7),
    "a subscription over the broker's limit": _heartbeat(
        subscriptionDataSet=[{"topic": "RfLong", "subString": "T" + " || T" * 5000}]
    ),
    "body nested 50,000 deep": b'{"clientID":' + b"[" * NESTED + b"]" * NESTED + b"}",
}


@pytest.mark.parametrize("body", BAD_HEARTBEATS.values(), ids=BAD_HEARTBEATS.keys())
def test_heartbeat_with_a_bad_body_is_refused(broker, body):
    mark = broker.log_mark()
    with broker.wire() as wire:
        assert_refused(wire.call(34, {}, body))
    broker.assert_no_traceback_since(mark)


# -- the fuzz loop ----------------------------------------------------------------------------

TEXT_GARBAGE = (
    "", " ", "abc", "-1", "0", "3", "-2147483649", "2147483648", str(2**63), str(2**70),
    "1e3", "1.5", " 7", "0x10", "\u0663", "null", "true", "\x00", "\u00fc" * 3, "x" * 300,
    "%RETRY%" + CONSUMER_GROUP, "%DLQ%x", "a b", "TBW102", "RfFuzz2", "*", "a||",
    "\ud800", "Rf\udfff", "RMQ_SYS_TRANS_HALF_TOPIC", "rmq_sys_wheel_timer",
)  # fmt: skip
JSON_GARBAGE = (7, -1, 2**70, 1.5, True, None, [], [1], {}, {"a": 1}, "x", "")
PROPERTY_PIECES = (
    "KEYS", "TAGS", "UNIQ_KEY", "k", "\x01", "\x02", "\x01\x02", "\u00e9", " ", "\ud800",
    "REAL_TOPIC",
)  # fmt: skip


@dataclass
class Case:
    label: str
    frame: bytes  # with its length prefix
    request: Command | None  # what the broker reads from it (None: nothing, it hangs up)
    #: the template's kind when it went out unchanged (its answer is known), else None
    unchanged: str | None = None


@dataclass
class Fuzzer:
    rng: random.Random
    serial: int = 0
    notes: list[str] = field(default_factory=list)

    def case(self) -> Case:
        """A mutated request the loop may send (drawn again until it is one)."""
        for _ in range(100):
            self.serial += 1
            self.notes = []
            header, body = self.template()
            for _ in range(self.rng.choice((0, 1, 1, 2, 2, 3))):
                body = self.mutate(header, body)
            payload = self.serialize(header, body)
            if self.rng.random() < 0.3:
                payload = self.damage(payload)
            try:
                request = decode(payload)
            except FrameError:
                request = None
            if request is None or self.allowed(request):
                frame = struct.pack(">i", len(payload)) + payload
                unchanged = self.notes[0] if len(self.notes) == 1 else None
                return Case(f"#{self.serial} " + "; ".join(self.notes), frame, request, unchanged)
        raise AssertionError("the fuzzer draws only requests it may not send")

    def allowed(self, request: Command) -> bool:
        if request.is_response:
            return True  # dropped by the broker
        if request.code in KNOWN_CODES and request.code not in FUZZ_CODES:
            return False  # another request: topic creation, deletion, ...
        if request.is_oneway and request.code in SEND_CODES:
            return False  # stores without telling what: the audit could not count it
        if request.code == RequestCode.PULL_MESSAGE:
            try:  # a held pull answers after its suspend time: keep those short
                suspend = headers.whole(request.ext, "sysFlag", 0) & 2
                return (
                    not suspend
                    or 0 <= headers.whole(request.ext, "suspendTimeoutMillis", 15_000) <= 200
                )
            except ValueError:
                return True
        return True

    def template(self) -> tuple[dict, bytes]:
        rng = self.rng
        kind = rng.choice(("send", "send", "pull", "heartbeat", "route"))
        self.notes.append(kind)
        if kind == "send":
            ext = send_ext(FUZZ, rng.randrange(QUEUES), f"KEYS\x01k{self.serial}\x02TAGS\x01t\x02")
            code, body = 310, f"fuzz-{self.serial}".encode()
        elif kind == "pull":
            ext = pull_ext(FUZZ, rng.randrange(QUEUES), rng.randrange(4), group=CONSUMER_GROUP)
            code, body = 11, b""
        elif kind == "heartbeat":
            ext, code = {}, 34
            body = json.dumps(heartbeat_body(f"rf-fuzz-{self.serial % 5}")).encode()
        else:
            ext, code, body = {"topic": FUZZ}, 105, b""
        header = {
            "code": code,
            "extFields": ext,
            "flag": 0,
            "language": "JAVA",
            "opaque": self.serial,
            "serializeTypeCurrentRPC": "JSON",
            "version": 479,
        }
        return header, body

    def mutate(self, header: dict, body: bytes) -> bytes:
        """One change to the request's fields (the header in place); returns the body."""
        rng = self.rng
        ext = header.get("extFields")
        ext = ext if isinstance(ext, dict) else {}
        choice = rng.randrange(100)
        if choice < 30 and ext:
            name = rng.choice(sorted(ext))
            value = rng.choice(TEXT_GARBAGE) if rng.random() < 0.8 else rng.choice(JSON_GARBAGE)
            ext[name] = value
            self.notes.append(f"{name}={value!r:.40}")
        elif choice < 38 and ext:
            name = rng.choice(sorted(ext))
            del ext[name]
            self.notes.append(f"no {name}")
        elif choice < 44 and "i" in ext:
            ext["i"] = "".join(rng.choice(PROPERTY_PIECES) for _ in range(rng.randrange(1, 8)))
            self.notes.append(f"properties {ext['i']!r}")
        elif choice < 56:
            body = self.mutate_body(body)
        elif choice < 64:
            header["code"] = rng.choice((11, 34, 105, 310, 320, 10, 4321, -1))
            self.notes.append(f"code {header['code']}")
        elif choice < 70:
            header["flag"] = rng.choice((1, 2, 3, 4, -1))
            self.notes.append(f"flag {header['flag']}")
        elif choice < 76:
            name = rng.choice(("code", "opaque", "flag", "version", "language", "remark"))
            header[name] = rng.choice((*JSON_GARBAGE, "105"))
            self.notes.append(f"header {name}={header[name]!r}")
        elif choice < 80:
            header["extFields"] = rng.choice(([], "x", 5, None, {"": "", "x": {"y": [1]}}))
            self.notes.append(f"extFields={header['extFields']!r}")
        elif choice < 85:
            header["opaque"] = rng.choice((-self.serial, 2**31 + self.serial, 2**40 + self.serial))
            self.notes.append(f"opaque {header['opaque']}")
        elif choice < 90:
            header["serialize"] = "binary"
            self.notes.append("binary header")
        else:
            ext[rng.choice(("zz", "", "\u00e9", "a" * 200))] = rng.choice(TEXT_GARBAGE)
            self.notes.append("extra field")
        return body

    def mutate_body(self, body: bytes) -> bytes:
        rng = self.rng
        try:
            data = json.loads(body) if body else None
        except ValueError:
            data = None
        if isinstance(data, dict) and rng.random() < 0.7:
            path = self._replace_somewhere(data)
            self.notes.append(f"body {path}")
            return json.dumps(data).encode()
        choice = rng.randrange(4)
        if choice == 0:
            self.notes.append("empty body")
            return b""
        if choice == 1:
            self.notes.append("random body")
            return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 64)))
        if choice == 2 and body:
            self.notes.append("body cut")
            return body[: rng.randrange(len(body))]
        self.notes.append("body is JSON garbage")
        return json.dumps(rng.choice(JSON_GARBAGE)).encode()

    def _replace_somewhere(self, data) -> str:
        """Replace (or drop) one value somewhere inside ``data``; the path changed."""
        rng = self.rng
        path = []
        node = data
        while True:
            keys = list(node) if isinstance(node, dict) else list(range(len(node)))
            if not keys:
                return "/".join(path) + " (empty)"
            key = rng.choice(keys)
            path.append(str(key))
            child = node[key]
            if isinstance(child, dict | list) and child and rng.random() < 0.7:
                node = child
                continue
            if isinstance(node, dict) and rng.random() < 0.2:
                del node[key]
                return "/".join(path) + " dropped"
            node[key] = rng.choice(JSON_GARBAGE + TEXT_GARBAGE[:6])
            return "/".join(path) + f"={node[key]!r:.30}"

    def serialize(self, header: dict, body: bytes) -> bytes:
        """The frame without its length prefix."""
        if header.pop("serialize", None) == "binary":
            fields = (header.get(name) for name in ("code", "opaque", "flag", "version"))
            code, opaque, flag, version = fields
            ext = header.get("extFields")
            language = header.get("language")
            try:
                head = binary_header(
                    code=code,
                    language=LANGUAGES.index(language) if language in LANGUAGES else 7,
                    version=version,
                    opaque=opaque,
                    flag=flag,
                    ext=binary_ext({str(k): as_text(v) for k, v in ext.items() if v is not None}),
                )
                return struct.pack(">i", 1 << 24 | len(head)) + head + body
            except (struct.error, AttributeError, TypeError):
                pass  # a field that does not fit the binary layout: JSON it is
        text = json.dumps(header, separators=(",", ":"), ensure_ascii=self.rng.random() < 0.5)
        # a lone surrogate goes out as a JSON escape (ensure_ascii) or as the three bytes
        # UTF-8 forbids for it: both are text the broker must refuse by name
        data = text.encode("utf-8", "surrogatepass")
        return struct.pack(">i", len(data)) + data + body

    def damage(self, payload: bytes) -> bytes:
        """A byte-level change after the length prefix (which stays true)."""
        rng = self.rng
        data = bytearray(payload)
        position = rng.randrange(len(data))
        choice = rng.randrange(6)
        if choice == 0:
            data[position] ^= 1 << rng.randrange(8)
            self.notes.append(f"bit flipped at {position}")
        elif choice == 1:
            data[position] = rng.randrange(256)
            self.notes.append(f"byte {position} replaced")
        elif choice == 2:
            del data[position : position + rng.randrange(1, 8)]
            self.notes.append(f"bytes cut at {position}")
        elif choice == 3:
            data[position:position] = data[position : position + rng.randrange(1, 8)]
            self.notes.append(f"bytes repeated at {position}")
        elif choice == 4:
            del data[rng.randrange(len(data)) :]
            self.notes.append("truncated")
        else:
            struct.pack_into(
                ">i", data, 0, struct.unpack_from(">i", data)[0] + rng.choice((-2, -1, 1, 5))
            )
            self.notes.append("header length off")
        return bytes(data)


def sent_messages(request: Command, answer: Command) -> list[tuple[str, int, bytes]]:
    """(topic, queue id, body) of each message a successful send stored."""
    header = headers.send_header(request.ext, short_names=request.code != 10)
    if header.batch or request.code == RequestCode.SEND_BATCH_MESSAGE:
        bodies = headers.decode_batch(request.body)[1]
    else:
        bodies = [request.body]
    queue_id = int(answer.ext["queueId"])
    assert len(answer.ext["msgId"].split(",")) == len(bodies), answer.ext
    return [(header.topic, queue_id, body) for body in bodies]


def judge(case: Case, answer: Command) -> str | None:
    """What is wrong with the broker's answer to ``case`` (None: nothing)."""
    request = case.request
    assert request is not None
    remark = answer.remark or ""
    if answer.code not in ANSWER_CODES:
        return f"code {answer.code} is not a RocketMQ response code ({remark!r})"
    if remark.startswith(INTERNAL):
        return f"an internal error: {remark}"
    if request.code not in KNOWN_CODES and answer.code != ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
        return f"unknown code {request.code} answered {answer.code} ({remark!r})"
    if case.unchanged in ("send", "route", "heartbeat") and answer.code != 0:
        return f"a valid request refused: {answer.code} {remark!r}"
    if case.unchanged == "pull" and answer.code not in (0, 19, 21):
        return f"a valid pull answered {answer.code} {remark!r}"
    return None


def test_fuzzed_requests_get_deliberate_answers_and_store_only_what_was_acknowledged(broker):
    mark = broker.log_mark()
    with broker.wire() as audit:
        before = stored_messages(audit)
    fuzzer = Fuzzer(random.Random(SEED))
    problems: list[str] = []
    acknowledged: Counter = Counter()
    outcomes: Counter = Counter()
    started = time.monotonic()
    wire = broker.wire()
    try:
        for _ in range(CASES):
            case = fuzzer.case()
            request = case.request
            try:
                wire.send_bytes(case.frame)
                if request is None:  # unreadable: the broker must hang up, saying nothing
                    outcomes["hung up"] += 1
                    answered = wire.hang_up_seen()
                    if answered:
                        problems.append(f"{case.label}: answered unreadable frame: {answered}")
                    wire.close()
                    wire = broker.wire()
                elif request.is_oneway or request.is_response:
                    outcomes["no answer due"] += 1
                    ping = wire.call(105, {"topic": FUZZ})  # fails on an answer to the case
                    if ping.code != 0:
                        problems.append(f"{case.label}: ping after it answered {ping.code}")
                else:
                    answer = wire.response(request.opaque)
                    outcomes[f"code {answer.code}"] += 1
                    problem = judge(case, answer)
                    if problem:
                        problems.append(f"{case.label}: {problem}")
                    if answer.code == 0 and request.code in SEND_CODES:
                        acknowledged.update(sent_messages(request, answer))
            except (Closed, TimeoutError, AssertionError) as exc:
                problems.append(f"{case.label}: {type(exc).__name__}: {exc}")
                wire.close()
                wire = broker.wire()
            assert broker.process.running, (
                f"broker died at {case.label}:\n{broker.process.log_tail()}"
            )
    finally:
        wire.close()
    elapsed = time.monotonic() - started
    summary = f"seed {SEED}, {CASES} cases in {elapsed:.1f} s: {dict(outcomes)}"
    # the loop did reach the broker's handlers, not only its frame reader
    assert outcomes["hung up"] < CASES // 2 and outcomes["code 0"] > CASES // 10, summary
    assert sum(acknowledged.values()) > CASES // 20, summary

    with broker.wire() as wire:
        after = stored_messages(wire)
        # still serving normally: a send and the pull that reads it back
        sent = wire.call(310, send_ext(AFTER, 1, "KEYS\x01after\x02"), b"still here")
        assert sent.code == 0, sent.remark
        offset = int(sent.ext["queueOffset"])
        pulled = wire.call(11, pull_ext(AFTER, 1, offset))
        assert pulled.code == 0, pulled.remark
        record = next(iter_records(pulled.body))
        assert (record.body, record.queue_offset) == (b"still here", offset)
        assert decode_properties(record.properties)["KEYS"] == "after"
    stored = after - before
    for what, messages in (
        ("stored but never acknowledged", stored - acknowledged),
        ("acknowledged but not stored", acknowledged - stored),
        ("stored before the loop and gone", before - after),
    ):
        if messages:
            problems.append(f"{what}: {sorted(messages.items())[:10]}")
    assert not problems, f"{summary}\n{len(problems)} problems:\n" + "\n".join(problems[:40])
    broker.assert_no_traceback_since(mark)


# -- at the end -------------------------------------------------------------------------------


def test_broker_ends_clean_after_all_of_it(broker):
    """Last: the broker still runs, its log holds no traceback, it stops cleanly on SIGTERM
    and its store verifies."""
    process = broker.process
    assert process.running, process.log_tail()
    assert_route_served(broker)
    assert process.stop() == 0, process.log_tail()
    broker.assert_no_traceback_since(0)
    report = verify_store(process.store_dir)
    assert report.ok, report.summary()
