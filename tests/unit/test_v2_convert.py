"""RocketMQ 5 messages to stored properties and back, and receipt handles."""

from __future__ import annotations

import zlib

import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb

from rmq_spark.broker.v2.codes import Code, V2Error
from rmq_spark.broker.v2.convert import Handle, check_type, incoming, outgoing
from rmq_spark.codec.properties import decode_properties
from rmq_spark.codec.record import Record


def v2_message(**system):
    system.setdefault("message_id", "01ABC")
    user = system.pop("user", {})
    return pb.Message(
        topic=pb.Resource(name="T"),
        body=system.pop("body", b"payload"),
        user_properties=user,
        system_properties=pb.SystemProperties(**system),
    )


def test_a_fifo_message_round_trips_through_the_store_form():
    out = outgoing(
        v2_message(tag="TagA", keys=["k1", "k2"], message_group="g1", user={"a": "1"}),
        1024,
        now_ms=5,
    )
    assert out.message_type == "FIFO" and out.message_group == "g1" and out.tag == "TagA"
    stored = decode_properties(out.properties)
    assert stored == {
        "TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "01ABC", "__SHARDINGKEY": "g1", "a": "1",
    }  # fmt: skip
    back = incoming(
        Record("T", 1, out.body, out.properties, queue_offset=9, born_timestamp=5),
        topic="T",
        receipt_handle="1.9.ff",
        delivery_attempt=2,
        invisible_ms=30_000,
    )
    sp = back.system_properties
    assert (sp.tag, list(sp.keys), sp.message_id, sp.message_group) == (
        "TagA", ["k1", "k2"], "01ABC", "g1",
    )  # fmt: skip
    assert sp.message_type == pb.FIFO and sp.delivery_attempt == 2 and sp.queue_offset == 9
    assert sp.body_digest.checksum == f"{zlib.crc32(b'payload'):08X}"
    assert dict(back.user_properties) == {"a": "1"}


@pytest.mark.parametrize(
    ("system", "code"),
    [
        ({"message_id": ""}, Code.ILLEGAL_MESSAGE_ID),
        ({"body": b""}, Code.MESSAGE_BODY_EMPTY),
        ({"body": b"x" * 11}, Code.MESSAGE_BODY_TOO_LARGE),
        ({"tag": "a|b"}, Code.ILLEGAL_MESSAGE_TAG),
        ({"tag": " "}, Code.ILLEGAL_MESSAGE_TAG),
        ({"keys": ["has space"]}, Code.ILLEGAL_MESSAGE_KEY),
        ({"message_group": "x" * 64}, Code.ILLEGAL_MESSAGE_GROUP),
        ({"user": {"UNIQ_KEY": "forged"}}, Code.ILLEGAL_MESSAGE_PROPERTY_KEY),
        ({"user": {"empty": ""}}, Code.ILLEGAL_MESSAGE_PROPERTY_KEY),
        ({"user": {f"p{i}": "v" for i in range(129)}}, Code.MESSAGE_PROPERTIES_TOO_LARGE),
    ],
)
def test_bad_messages_get_the_code_rocketmq_uses(system, code):
    with pytest.raises(V2Error) as caught:
        outgoing(v2_message(**system), 10, now_ms=0)
    assert caught.value.code == code


@pytest.mark.parametrize(
    ("topic_type", "message_type", "ok"),
    [("NORMAL", "NORMAL", True), ("FIFO", "NORMAL", False), ("MIXED", "DELAY", True)],
)
def test_topic_type_check(topic_type, message_type, ok):
    if ok:
        check_type("T", topic_type, message_type)
    else:
        with pytest.raises(V2Error, match="takes FIFO messages, not NORMAL"):
            check_type("T", topic_type, message_type)


@pytest.mark.parametrize("text", ["", "1.2", "a.b.c", "1.2.xyz", "-1.2.3", "1.2.3.4"])
def test_malformed_receipt_handles_are_invalid(text):
    with pytest.raises(V2Error) as caught:
        Handle.decode(text)
    assert caught.value.code == Code.INVALID_RECEIPT_HANDLE


def test_receipt_handle_round_trip():
    handle = Handle(3, 12345, 0xDEADBEEF)
    assert Handle.decode(handle.encode()) == handle
