"""SendMessages with MessageColumns over real gRPC, against an in-process broker.

A batch sent in columns must store the very records the same batch sent as Messages stores
(only offsets and the store timestamp differ), answer with the same SendResults through the
Producer, and refuse bad columns with INVALID_ARGUMENT naming the message and the value.
"""

from __future__ import annotations

import grpc
import numpy as np
import pytest

from rmq_spark.client import Message, Producer
from rmq_spark.client.message import encode_columns
from rmq_spark.client.producer import ProducerConfig
from rmq_spark.codec.arrow_decode import decode_records
from rmq_spark.codec.record import IPV4_HOST, POS_BORNHOST, POS_QUEUEOFFSET
from rmq_spark.errors import InvalidArgumentError
from rmq_spark.structs import MessageQueue
from rmq_spark.wire.proto_gen.rocketlite.v1 import admin_pb2, common_pb2
from rmq_spark.wire.proto_gen.rocketlite.v1 import messaging_pb2 as m
from rmq_spark.wire.pull import pull_index
from tests.support.broker_harness import CHANNEL_OPTIONS, Stubs

Code = grpc.StatusCode
BORN_MS = 1_700_000_000_123
SMALL_COLUMNS = ProducerConfig(columns_min_batch=2)  # columns for the small test batches
#: QUEUEOFFSET and PHYSICALOFFSET, then STORETIMESTAMP (after an IPv4 born host)
VARYING = [
    (POS_QUEUEOFFSET, POS_QUEUEOFFSET + 16),
    (POS_BORNHOST + IPV4_HOST, POS_BORNHOST + IPV4_HOST + 8),
]


@pytest.fixture
def stubs(in_process_broker):
    channel = grpc.insecure_channel(in_process_broker.endpoint, options=CHANNEL_OPTIONS)
    grpc.channel_ready_future(channel).result(timeout=10)
    stubs = Stubs(channel)
    for topic in ("Plain", "Colum", "Errors"):
        request = admin_pb2.CreateTopicRequest(topic=topic, read_queue_nums=2, write_queue_nums=2)
        stubs.admin.CreateTopic(request)
    yield stubs
    channel.close()


def sample_messages() -> list[Message]:
    return [
        Message(b"plain", born_timestamp_ms=BORN_MS),
        Message(b"tagged", tags="TagA", born_timestamp_ms=BORN_MS + 1),
        Message(b"keys", tags="TagB", keys="k1 k2", flag=7, born_timestamp_ms=BORN_MS + 2),
        Message(
            "ünïcode body",
            tags="Tägß",
            keys=["k3"],
            properties={"user": "välue"},
            born_timestamp_ms=BORN_MS + 3,
        ),
        Message(b"", tags="TagA", properties={"x": "y"}, born_timestamp_ms=BORN_MS + 4),
        Message(b"\x00\x01\x02" * 50, born_timestamp_ms=BORN_MS + 5),
        # protobuf maps have no order: records of several user properties differ in order
        Message(b"m", properties={"one": "1", "a": "b", "c": "d"}, born_timestamp_ms=BORN_MS),
    ]


def pull_raw(stubs, topic: str, queue_id: int) -> list[bytes]:
    request = m.PullMessagesRequest(
        queue=common_pb2.MessageQueue(topic=topic, queue_id=queue_id), max_messages=1000
    )
    answer = stubs.messaging.PullMessages(request, timeout=10)
    data, out, at = answer.records, [], 0
    sizes, _ = pull_index(MessageQueue(topic, "", queue_id), answer)
    for size in sizes.tolist():
        out.append(data[at : at + size])
        at += size
    return out


def masked(record: bytes) -> bytes:
    out = bytearray(record)
    for start, stop in VARYING:
        out[start:stop] = bytes(stop - start)
    return bytes(out)


def send_columns(stubs, topic: str, columns: m.MessageColumns, **fields):
    request = m.SendMessagesRequest(topic=topic, queue_id=0, columns=columns, **fields)
    return stubs.messaging.SendMessages(request, timeout=10)


def expect_invalid(stubs, columns: m.MessageColumns, *fragments: str, **fields) -> str:
    with pytest.raises(grpc.RpcError) as info:
        send_columns(stubs, "Errors", columns, **fields)
    assert info.value.code() == Code.INVALID_ARGUMENT, info.value.details()
    details = info.value.details()
    for fragment in fragments:
        assert fragment in details, details
    return details


def good_columns(count: int = 3, tag: str = "T") -> m.MessageColumns:
    messages = [Message(f"body-{i}".encode(), tags=tag or None) for i in range(count)]
    chunks = encode_columns(messages, BORN_MS, 1 << 20)
    assert chunks is not None and len(chunks) == 1
    return chunks[0].columns


# -- same records either way --------------------------------------------------------------


def test_columns_store_the_same_records_as_messages(stubs):
    messages = sample_messages()
    per_message = [message.to_pb(0) for message in messages]
    stubs.messaging.SendMessages(
        m.SendMessagesRequest(topic="Plain", queue_id=0, messages=per_message), timeout=10
    )
    chunks = encode_columns(messages, 0, 1 << 20)
    assert chunks is not None and len(chunks) == 1
    answer = send_columns(stubs, "Colum", chunks[0].columns)
    assert answer.columns_result.first_queue_offset == 0
    assert not answer.entries

    plain, cols = pull_raw(stubs, "Plain", 0), pull_raw(stubs, "Colum", 0)
    assert len(plain) == len(cols) == len(messages)
    # Records name their topic: compare after swapping it (same length on purpose).
    assert [masked(r).replace(b"Plain", b"Colum") for r in plain[:-1]] == list(
        map(masked, cols[:-1])
    )
    decoded = decode_records(b"".join(cols), check_crc=True).to_pylist()
    expected = decode_records(b"".join(plain), check_crc=True).to_pylist()
    assert [dict(r["properties"]) for r in decoded] == [dict(r["properties"]) for r in expected]
    assert [r["body"] for r in decoded] == [message.body for message in messages]
    assert [r["bornTimestamp"] for r in decoded] == [BORN_MS + i for i in range(6)] + [BORN_MS]
    assert dict(decoded[3]["properties"])["user"] == "välue"


def test_consume_queue_tag_codes_match(stubs):
    messages = sample_messages()
    chunks = encode_columns(messages, 0, 1 << 20)
    assert chunks is not None
    send_columns(stubs, "Colum", chunks[0].columns)
    request = m.PullMessagesRequest(
        queue=common_pb2.MessageQueue(topic="Colum", queue_id=0),
        max_messages=100,
        subscription_expression="TagA || Tägß",
    )
    answer = stubs.messaging.PullMessages(request, timeout=10)
    bodies = [r["body"] for r in decode_records(answer.records).to_pylist()]
    assert bodies == [b"tagged", "ünïcode body".encode(), b""]


def test_producer_results_match_between_messages_and_columns(in_process_broker, stubs):
    endpoint = in_process_broker.endpoint
    results = {}
    for name, min_batch in (("messages", 0), ("columns", 2)):
        config = ProducerConfig(columns_min_batch=min_batch)
        with Producer(endpoint, config=config) as producer:
            batch = sample_messages()
            results[name] = (batch, producer.send_batch("Plain", batch, queue=1))
    for batch, sent in results.values():
        assert [r.msg_id for r in sent] == [message.unique_key for message in batch]
        assert len({r.offset_msg_id for r in sent}) == len(batch)
        assert {r.message_queue.broker_name for r in sent} == {"broker-t"}
        assert len({r.store_timestamp_ms for r in sent}) == 1
    first, second = results["messages"][1], results["columns"][1]
    assert [r.queue_offset for r in first] == list(range(7))
    assert [r.queue_offset for r in second] == list(range(7, 14))
    assert [r.message_queue for r in first] == [r.message_queue for r in second]
    # offset ids name records that ViewMessage finds, as with Messages
    for result in (first[2], second[2]):
        view = m.ViewMessageRequest(message=m.MessageRef(offset_msg_id=result.offset_msg_id))
        record = stubs.messaging.ViewMessage(view, timeout=10).record
        assert decode_records(record).to_pylist()[0]["body"] == b"keys"


def test_large_batch_in_columns_and_split_requests(in_process_broker, stubs):
    config = ProducerConfig(max_batch_bytes=20_000)
    with Producer(in_process_broker.endpoint, config=config) as producer:
        batch = [(f"{i:0100d}".encode(), "TagA") for i in range(1000)]
        sent = producer.send_batch("Colum", batch, queue=1)
    assert [r.queue_offset for r in sent] == list(range(1000))
    assert len({r.offset_msg_id for r in sent}) == 1000


def test_delayed_batch_in_columns(in_process_broker, stubs):
    with Producer(in_process_broker.endpoint, config=SMALL_COLUMNS) as producer:
        sent = producer.send_batch("Colum", [b"a", b"b", b"c", b"d"], queue=1, delay_level=1)
    assert [r.queue_offset for r in sent] == [None] * 4
    assert [r.message_queue.queue_id for r in sent] == [1] * 4


def test_reserved_user_property_keeps_the_per_message_error(in_process_broker, stubs):
    with Producer(in_process_broker.endpoint, config=SMALL_COLUMNS) as producer:
        batch = [Message(b"x")] * 3 + [Message(b"y", properties={"DELAY": "3"})]
        with pytest.raises(InvalidArgumentError, match=r"messages\[3\].*DELAY.*reserved"):
            producer.send_batch("Colum", batch)


def test_producer_falls_back_for_a_broker_without_columns(in_process_broker_factory, monkeypatch):
    from rmq_spark.broker.v1 import messaging

    # A broker from before MessageColumns ignores the field and sees an empty batch.
    original = messaging.MessagingServicer.SendMessages

    async def old_broker(self, request, context):
        request.ClearField("columns")
        return await original(self, request, context)

    monkeypatch.setattr(messaging.MessagingServicer, "SendMessages", old_broker)
    local = in_process_broker_factory()
    local.broker.store.topics.create("Colum", 1)
    with Producer(local.endpoint, config=SMALL_COLUMNS) as producer:
        first = producer.send_batch("Colum", [b"a", b"b", b"c", b"d"], queue=0)
        second = producer.send_batch("Colum", [b"e", b"f", b"g", b"h"], queue=0)
        assert producer._no_columns == {local.endpoint}
    assert [r.queue_offset for r in first + second] == list(range(8))


# -- refused columns ----------------------------------------------------------------------


def test_messages_and_columns_together_are_refused(stubs):
    request = m.SendMessagesRequest(
        topic="Errors", messages=[m.Message(body=b"x")], columns=good_columns()
    )
    with pytest.raises(grpc.RpcError) as info:
        stubs.messaging.SendMessages(request, timeout=10)
    assert info.value.code() == Code.INVALID_ARGUMENT
    assert "both messages (1) and columns" in info.value.details()


def test_size_columns_are_checked(stubs):
    columns = good_columns()
    expect_invalid(stubs, m.MessageColumns(), "columns.body_sizes is empty")
    bad = m.MessageColumns()
    bad.CopyFrom(columns)
    del bad.properties_sizes[-1]
    expect_invalid(stubs, bad, "properties_sizes has 2 sizes for 3 messages")
    bad.CopyFrom(columns)
    bad.body_sizes[1] = -1
    expect_invalid(stubs, bad, "columns.body_sizes[1]=-1 is negative")
    bad.CopyFrom(columns)
    bad.body_sizes[2] += 1
    expect_invalid(stubs, bad, "columns.body_sizes add up to", "columns.bodies has")
    bad.CopyFrom(columns)
    bad.properties_sizes[0] += 1
    bad.properties_sizes[1] -= 1
    expect_invalid(stubs, bad, "columns.properties of message 0")


def test_body_and_properties_limits_name_the_message(stubs, in_process_broker):
    limit = in_process_broker.broker.config.max_message_bytes
    columns = m.MessageColumns(bodies=b"x" * (limit + 1), body_sizes=[0, limit + 1], tags=[""])
    blob = b"UNIQ_KEY\x01A\x02"
    columns.properties = blob * 2
    columns.properties_sizes.extend([len(blob)] * 2)
    expect_invalid(stubs, columns, f"columns.body_sizes[1]={limit + 1}", "exceed")
    big = b"UNIQ_KEY\x01A\x02u\x01" + b"v" * 32767 + b"\x02"
    columns = m.MessageColumns(
        bodies=b"", body_sizes=[0, 0], properties=blob + big, properties_sizes=[len(blob), len(big)]
    )
    expect_invalid(stubs, columns, f"columns.properties_sizes[1]={len(big)}", "32767")


@pytest.mark.parametrize(
    ("blob", "fragment"),
    [
        (b"UNIQ_KEY\x01A\x02DELAY\x013\x02", "property name DELAY is reserved"),
        (b"UNIQ_KEY\x01A\x02REAL_TOPIC\x01x\x02", "property name REAL_TOPIC is reserved"),
        (b"UNIQ_KEY\x01A\x02MAX_RECONSUME_TIMES\x011\x02", "MAX_RECONSUME_TIMES is reserved"),
        (b"UNIQ_KEY\x01A\x02WAIT\x01true\x02", "property name WAIT is reserved"),
        (b"KEYS\x01k\x02", "UNIQ_KEY is missing or empty"),
        (b"UNIQ_KEY\x01\x02", "property 'UNIQ_KEY' has an empty value"),
        (b"UNIQ_KEY\x01A\x02UNIQ_KEY\x01B\x02", "UNIQ_KEY is set twice"),
        (b"UNIQ_KEY\x01A\x02KEYS\x01a\x02KEYS\x01b\x02", "KEYS is set twice"),
        (b"UNIQ_KEY\x01A\x02TAGS\x01T\x02", "TAGS property 'T' does not match"),
        (b"UNIQ_KEY\x01A", "do not end with \\x02"),
        (b"UNIQ_KEY\x01A\x01B\x02", "is not name\\x01value"),
        (b"UNIQ_KEY\x01A\x02\x01v\x02", "has an empty name"),
        (b"UNIQ_KEY\x01A\x02u\x01\xff\x02", "not valid UTF-8"),
        (b"", "do not end with \\x02"),
    ],
)
def test_bad_property_blobs_name_the_message(stubs, blob, fragment):
    good = b"UNIQ_KEY\x01GOOD\x02"
    columns = m.MessageColumns(
        bodies=b"abc",
        body_sizes=[1, 1, 1],
        properties=good + good + blob,
        properties_sizes=[len(good), len(good), len(blob)],
    )
    expect_invalid(stubs, columns, "columns.properties of message 2", fragment)


def test_tags_must_agree_with_the_blobs(stubs):
    blob = b"TAGS\x01TagA\x02UNIQ_KEY\x01A\x02"
    columns = m.MessageColumns(
        bodies=b"ab",
        body_sizes=[1, 1],
        properties=blob * 2,
        properties_sizes=[len(blob)] * 2,
        tags=["TagA", "TagB"],
        tag_indexes=[0, 1],
    )
    expect_invalid(stubs, columns, "message 1", "TAGS property 'TagA' does not match", "'TagB'")
    columns.tag_indexes[1] = 2
    expect_invalid(stubs, columns, "columns.tag_indexes[1]=2 is out of range")
    del columns.tag_indexes[:]
    expect_invalid(stubs, columns, "columns.tags has 2 values but columns.tag_indexes is empty")
    columns.tags[:] = ["TagAB"]
    expect_invalid(stubs, columns, "message 0", "does not match the message's tag 'TagAB'")
    columns.tags[:] = ["TagB"]  # same length, other bytes
    expect_invalid(stubs, columns, "message 0", "does not match the message's tag 'TagB'")
    columns.tags[:] = ["TagA"]
    assert send_columns(stubs, "Errors", columns).columns_result.first_queue_offset == 0


def test_number_columns_are_checked(stubs):
    columns = good_columns()
    columns.born_timestamps_ms.extend([1, 2])
    expect_invalid(stubs, columns, "columns.born_timestamps_ms has 2 values for 3 messages")
    columns.born_timestamps_ms.append(-5)
    expect_invalid(stubs, columns, "columns.born_timestamps_ms[2]=-5 is negative")
    columns = good_columns()
    columns.flags.extend([1])
    expect_invalid(stubs, columns, "columns.flags has 1 values for 3 messages")
    expect_invalid(stubs, good_columns(), "delay_level=99", delay_level=99)


def test_born_and_flags_columns_are_stored(stubs):
    columns = good_columns(tag="")
    columns.born_timestamps_ms.extend([0, BORN_MS, BORN_MS + 9])
    columns.flags.extend([0, 3, 5])
    send_columns(stubs, "Colum", columns)
    rows = decode_records(b"".join(pull_raw(stubs, "Colum", 0))).to_pylist()
    assert [r["flag"] for r in rows] == [0, 3, 5]
    assert rows[0]["bornTimestamp"] > BORN_MS  # 0 = the broker's receive time
    assert [r["bornTimestamp"] for r in rows[1:]] == [BORN_MS, BORN_MS + 9]
    assert all(not dict(r["properties"]).get("TAGS") for r in rows)
    assert np.all(np.diff([r["queueOffset"] for r in rows]) == 1)
