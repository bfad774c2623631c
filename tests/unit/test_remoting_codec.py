"""The remoting protocol's pure codecs against literal bytes: frames with JSON and binary
headers, the one-letter send header, batch bodies, route JSON and error codes."""

from __future__ import annotations

import json
import struct

import pytest

from rmq_spark.broker.remoting.answers import Refusal, response_code
from rmq_spark.errors import (
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    StoreFailedError,
)
from rmq_spark.structs import MessageQueue
from rmq_spark.wire.remoting import bodies, headers
from rmq_spark.wire.remoting.frame import Command, FrameError, decode, encode, split_frames


def _json_frame(header: bytes, body: bytes = b"") -> bytes:
    """A frame without its length prefix, as split_frames hands it to decode."""
    return struct.pack(">i", len(header)) + header + body


def test_a_java_request_decodes_with_its_fields():
    header = (
        b'{"code":105,"extFields":{"topic":"T"},"flag":0,"language":"JAVA","opaque":7,'
        b'"serializeTypeCurrentRPC":"JSON","version":479}'
    )
    command = decode(_json_frame(header, b"body"))
    assert (command.code, command.opaque, command.flag, command.version) == (105, 7, 0, 479)
    assert command.ext == {"topic": "T"}
    assert command.language == "JAVA"
    assert command.body == b"body"
    assert not command.is_response and not command.is_oneway


@pytest.mark.parametrize(
    ("ext", "expected"),
    [
        # ali-ons and the C++ client send raw numbers and booleans: read as Java writes them
        ({"queueId": 3, "sysFlag": 0}, {"queueId": "3", "sysFlag": "0"}),
        ({"batch": True, "unitMode": False}, {"batch": "true", "unitMode": "false"}),
        ({"x": None, "y": "v"}, {"y": "v"}),
        ({"t": 1.0}, {"t": "1"}),
    ],
)
def test_ext_values_of_other_clients_become_strings(ext, expected):
    header = json.dumps({"code": 11, "extFields": ext, "opaque": 1}).encode()
    assert decode(_json_frame(header)).ext == expected


def test_encode_writes_a_frame_java_reads():
    frame = encode(Command(code=0, ext={"offset": "12"}, opaque=9, flag=1, body=b"xy"))
    length, word = struct.unpack_from(">ii", frame)
    assert length == len(frame) - 4
    assert word >> 24 == 0  # JSON: the C++ client and ali-ons read this word unmasked
    header = json.loads(frame[8 : 8 + word])
    assert header == {
        "code": 0,
        "extFields": {"offset": "12"},
        "flag": 1,
        "language": "JAVA",
        "opaque": 9,
        "serializeTypeCurrentRPC": "JSON",
        "version": 0,
    }
    assert frame.endswith(b"xy")


def test_a_null_remark_is_left_out_and_a_remark_round_trips():
    assert b"remark" not in encode(Command(code=0))
    again = decode(split_frames(encode(Command(code=17, remark="no route")), 1 << 20)[0][0])
    assert again.remark == "no route"


def _binary_header(code, language, version, opaque, flag, remark, ext) -> bytes:
    fields = b""
    for key, value in ext:
        fields += struct.pack(">h", len(key)) + key + struct.pack(">i", len(value)) + value
    remark_part = struct.pack(">i", len(remark)) + remark
    fixed = struct.pack(">hBhii", code, language, version, opaque, flag)
    return fixed + remark_part + struct.pack(">i", len(fields)) + fields


def test_a_binary_header_decodes_with_empty_values_as_null_and_the_last_repeat_winning():
    header = _binary_header(
        310, 9, 317, 42, 2, b"", [(b"b", b"T1"), (b"e", b"1"), (b"empty", b""), (b"b", b"T2")]
    )
    frame = struct.pack(">i", (1 << 24) | len(header)) + header + b"payload"
    command = decode(frame)
    assert (command.code, command.language, command.version) == (310, "GO", 317)
    assert command.opaque == 42 and command.is_oneway
    assert command.remark is None
    assert command.ext == {"b": "T2", "e": "1"}
    assert command.body == b"payload"


def test_split_frames_keeps_a_partial_frame_for_later():
    one = encode(Command(code=34, opaque=1))
    two = encode(Command(code=11, opaque=2, body=b"abc"))
    data = one + two[:10]
    frames, used = split_frames(data, 1 << 20)
    assert len(frames) == 1 and used == len(one)
    frames, used = split_frames(data[used:] + two[10:], 1 << 20)
    assert [decode(f).opaque for f in frames] == [2] and used == len(two)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (struct.pack(">i", -5) + b"xxxx", "outside"),
        (struct.pack(">i", 2) + b"xx", "outside"),
        (struct.pack(">i", (1 << 20) + 1), "outside"),
        (b"GET / HTTP/1.1\r\n", "outside"),  # a stray HTTP client: its length is absurd
    ],
)
def test_split_frames_refuses_lengths_that_cannot_be_a_frame(data, message):
    with pytest.raises(FrameError, match=message):
        split_frames(data, 1 << 20)


@pytest.mark.parametrize(
    ("frame", "message"),
    [
        (struct.pack(">i", 50) + b"{}", "bad header length"),
        (struct.pack(">i", 3) + b"{x}", "not JSON"),
        (struct.pack(">i", 2) + b"[]", "not an object"),
        (_json_frame(b'{"code":"105"}'), "not a whole number"),
        (_json_frame(b'{"code":105,"extFields":[1]}'), "extFields"),
        (struct.pack(">i", (1 << 24) | 4) + b"\x00\x01\x00\x00", "cut short"),
        (struct.pack(">i", (2 << 24) | 2) + b"{}", "serialize type 2"),
        (b"\x00", "no header length"),
    ],
)
def test_decode_refuses_malformed_headers_with_a_reason(frame, message):
    with pytest.raises(FrameError, match=message):
        decode(frame)


V2_EXT = {
    "a": "pg",
    "b": "TopicA",
    "c": "TBW102",
    "d": "4",
    "e": "2",
    "f": "769",
    "g": "1700000000000",
    "h": "0",
    "i": "TAGS\x01TagA\x02",
    "j": "0",
    "k": "false",
    "m": "false",
}


def test_send_v2_header_maps_the_one_letter_names():
    header = headers.send_header(V2_EXT)
    assert header.producer_group == "pg"
    assert (header.topic, header.queue_id, header.sys_flag) == ("TopicA", 2, 769)
    assert header.born_timestamp == 1_700_000_000_000
    assert header.properties == "TAGS\x01TagA\x02"
    assert header.batch is False and header.max_reconsume_times is None


def test_send_v1_header_uses_the_long_names_the_go_client_sends():
    long_names = {headers.SEND_V2_NAMES[k]: v for k, v in V2_EXT.items()}
    assert headers.send_header(long_names, short_names=False) == headers.send_header(V2_EXT)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"e": "abc"}, "queueId='abc' is not a whole number"),
        ({"b": None}, "topic is missing"),
        ({"e": None}, "queueId is missing"),
    ],
)
def test_send_header_names_the_bad_field(change, message):
    ext = {k: v for k, v in {**V2_EXT, **change}.items() if v is not None}
    with pytest.raises(InvalidArgumentError, match=message):
        headers.send_header(ext)


def test_batch_bodies_round_trip_and_lies_are_refused():
    flags, payloads, props = [0, 7], [b"first", b""], [b"UNIQ_KEY\x01a\x02", b""]
    body = headers.encode_batch(flags, payloads, props)
    assert headers.decode_batch(body) == (flags, payloads, props)
    with pytest.raises(InvalidArgumentError, match="cut short"):
        headers.decode_batch(body[:-3])
    lying = struct.pack(">i", 999) + body[4:]
    with pytest.raises(InvalidArgumentError, match="total size 999"):
        headers.decode_batch(lying)
    with pytest.raises(InvalidArgumentError, match="empty"):
        headers.decode_batch(b"")


def test_route_answers_point_every_queue_row_at_a_master_address():
    route = json.loads(bodies.route_data("broker-a", "10.0.0.5:9876", "C", [("broker-a", 8, 4, 6)]))
    broker = route["brokerDatas"][0]
    assert broker["brokerAddrs"] == {"0": "10.0.0.5:9876"}  # key 0: the master
    assert route["queueDatas"][0]["brokerName"] == broker["brokerName"] == "broker-a"
    assert (route["queueDatas"][0]["readQueueNums"], route["queueDatas"][0]["writeQueueNums"]) == (
        8,
        4,
    )
    # compact: the Go client splits the address map on ',' and ':' and keeps spaces
    assert " " not in bodies.route_data("b", "h:1", "C", [("b", 1, 1, 6)])


def test_queue_keyed_tables_use_fastjson_object_keys():
    text = bodies.mq_keyed(
        {MessageQueue("T", "broker-a", 1): {"maxOffset": 5, "minOffset": 0}}, topicPutTps=0.0
    )
    assert text == (
        '{"offsetTable":{{"brokerName":"broker-a","queueId":1,"topic":"T"}:'
        '{"maxOffset":5,"minOffset":0}},"topicPutTps":0.0}'
    )


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (Refusal(22, "no offset"), 22),
        (NotFoundError("topic 'x' does not exist"), 17),
        (PermissionDeniedError("read-only"), 16),
        (InvalidArgumentError("bad"), 29),
        (StoreFailedError("disk"), 14),  # retriable: producers try another broker
    ],
)
def test_errors_become_rocketmq_response_codes(error, code):
    assert response_code(error) == code


@pytest.mark.parametrize(
    "value", ["plain", 'a "quoted" word', "back\\slash", "line\nbreak", "ünïcode", ""]
)
def test_header_values_round_trip_whatever_they_hold(value):
    command = Command(code=0, ext={"k": value, "queueId": "3"}, opaque=4, flag=1)
    again = decode(split_frames(encode(command), 1 << 20)[0][0])
    assert again.ext == {"k": value, "queueId": "3"}
    assert (again.code, again.opaque, again.flag) == (0, 4, 1)


def test_an_answer_whose_text_is_not_unicode_still_encodes():
    """A remark or field holding a lone surrogate (say, echoing a client's bad value) goes
    out as a JSON escape, never as an encoding error."""
    answer = Command(code=29, ext={"topic": "T\ud800"}, remark="bad \udfff", opaque=3, flag=1)
    frames, _ = split_frames(encode(answer), 1 << 20)
    back = decode(frames[0])
    assert (back.remark, back.ext["topic"], back.opaque) == ("bad \udfff", "T\ud800", 3)
    assert back.bad_text == "topic"  # and read back, it is named as not text
