"""Hostile requests against a broker process: every one must get a deliberate answer.

A seeded generator builds a few hundred requests for every RPC of the messaging, offset and
admin services. Most start from a valid request and get exactly one defect (negative ids or
offsets, huge counts, unknown or invalid names, oversized bodies, reserved or malformed
properties, garbage subscription expressions, empty batches, queues of another broker), so
the status code they must get is known; some are valid and must succeed; some combine
several defects, and some are valid bytes of one request type sent to another RPC (protobuf
parses them, fields land where they may), where any deliberate answer will do. Some carry a
string field, at any depth, whose bytes are not text (a lone surrogate as UTF-8 would write
it, bytes UTF-8 never uses, a sequence cut short): INVALID_ARGUMENT, never UNKNOWN. "Deliberate"
means: OK or one of the documented error codes, never INTERNAL or UNKNOWN, and the broker
keeps serving. At the end a normal send and pull work, the broker stops cleanly, its log
holds no internal error, and the store passes verify_store.

Set RMQ_FUZZ_SEED to replay a run, RMQ_FUZZ_REQUESTS to change its length.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from dataclasses import dataclass

import grpc
import pytest
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import DecodeError

from rmq_spark.codec.record import offset_msg_id
from rmq_spark.store.verify import verify_store
from rmq_spark.wire.proto_gen.rocketlite.v1 import admin_pb2, common_pb2, offsets_pb2
from rmq_spark.wire.proto_gen.rocketlite.v1 import messaging_pb2 as m

SEED = int(os.environ.get("RMQ_FUZZ_SEED", "20250611"))
REQUESTS = int(os.environ.get("RMQ_FUZZ_REQUESTS", "600"))

Code = grpc.StatusCode
OK = Code.OK
INVALID = Code.INVALID_ARGUMENT
NOT_FOUND = Code.NOT_FOUND
DELIBERATE = frozenset(
    {
        OK,
        INVALID,
        NOT_FOUND,
        Code.ALREADY_EXISTS,
        Code.PERMISSION_DENIED,
        Code.RESOURCE_EXHAUSTED,
        Code.FAILED_PRECONDITION,
        Code.OUT_OF_RANGE,
    }
)

MAX_MESSAGE_BYTES = 16 << 10
MAX_REQUEST_BYTES = 256 << 10
BROKER_FLAGS = [
    "--max-message-bytes",
    str(MAX_MESSAGE_BYTES),
    "--max-request-bytes",
    str(MAX_REQUEST_BYTES),
    "--max-suspend-timeout-ms",
    "100",
    "--delay-levels",
    "100ms 200ms",
]
NAME = "broker-f"
TOPIC = "Fuzz"  # 4 queues, read + write; never changed by the fuzzer
READ_ONLY = "FuzzRO"
WRITE_ONLY = "FuzzWO"
QUEUES = 4
INT32 = (-(2**31), -1, 2**31 - 1)
INT64 = (-(2**63), -1, 2**63 - 1)
BAD_TOPICS = ("", " ", "a b", "t" * 128, "tópico", "a/b", "a.b", "x\ty", "%RETRY%G", "%DLQ%G")
#: names refused everywhere; the system prefixes above are valid where topics are read
BAD_READ_TOPICS = BAD_TOPICS[:-2]
BAD_GROUPS = ("", "g g", "g" * 256, "g/h", "grüppe")
BAD_EXPRESSIONS = ("||", "a||", "||a", "a | b", "a || * ", "*||a", " | ", "a||||b")
GOOD_EXPRESSIONS = ("*", "", "   ", "TagA", "TagA||TagB", " 标签 || x ")
RESERVED = ("TAGS", "KEYS", "UNIQ_KEY", "DELAY", "WAIT", "RETRY_TOPIC", "REAL_TOPIC", "REAL_QID")

SERVICES = {
    m.SendMessagesRequest: "MessagingService/SendMessages",
    m.PullMessagesRequest: "MessagingService/PullMessages",
    m.QueryOffsetsRequest: "MessagingService/QueryOffsets",
    m.ViewMessageRequest: "MessagingService/ViewMessage",
    m.ConsumerSendBackRequest: "MessagingService/ConsumerSendBack",
    offsets_pb2.UpdateConsumerOffsetsRequest: "OffsetService/UpdateConsumerOffsets",
    offsets_pb2.QueryConsumerOffsetsRequest: "OffsetService/QueryConsumerOffsets",
    offsets_pb2.GetConsumerProgressRequest: "OffsetService/GetConsumerProgress",
    admin_pb2.CreateTopicRequest: "AdminService/CreateTopic",
    admin_pb2.UpdateTopicRequest: "AdminService/UpdateTopic",
    admin_pb2.DeleteTopicRequest: "AdminService/DeleteTopic",
    admin_pb2.GetTopicRouteRequest: "AdminService/GetTopicRoute",
    admin_pb2.ListTopicsRequest: "AdminService/ListTopics",
    admin_pb2.GetBrokerInfoRequest: "AdminService/GetBrokerInfo",
}

#: RPCs that may receive another type's bytes: not the topic-changing ones, which would
#: change the topics whose answers the single-defect cases predict
CROSS_TYPE_TARGETS = [
    t
    for t in SERVICES
    if t
    not in (
        admin_pb2.CreateTopicRequest,
        admin_pb2.UpdateTopicRequest,
        admin_pb2.DeleteTopicRequest,
    )
]


@dataclass
class Case:
    label: str
    request: object  # a request message
    #: the codes this request may get; None = any deliberate answer
    expected: frozenset[grpc.StatusCode] | None
    #: send the request's bytes to this RPC instead of its own (cross-type requests)
    method: str | None = None
    #: send these bytes instead of the request's (a request whose strings are not text)
    raw: bytes | None = None

    @property
    def path(self) -> str:
        return "/rocketlite.v1." + (self.method or SERVICES[type(self.request)])


def mq(topic: str = TOPIC, queue_id: int = 0, broker_name: str = "") -> common_pb2.MessageQueue:
    return common_pb2.MessageQueue(topic=topic, broker_name=broker_name, queue_id=queue_id)


def codes(*items: grpc.StatusCode) -> frozenset[grpc.StatusCode]:
    return frozenset(items)


Mutation = tuple[str, Callable[[object], None], frozenset[grpc.StatusCode]]

#: string field bytes that are not text: protobuf refuses to parse them
NOT_UTF8 = {
    "a lone surrogate": "\ud800".encode("utf-8", "surrogatepass"),
    "a low surrogate after text": "tag\udfff".encode("utf-8", "surrogatepass"),
    "byte 0xff": b"\xff",
    "a sequence cut short": b"caf\xc3",
    "a stray continuation byte": b"ok\x80",
    "past U+10FFFF": b"\xf4\x90\x80\x80",
}


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def string_paths(message: Descriptor, depth: int = 0) -> list[list[FieldDescriptor]]:
    """Every path to a string field of ``message`` (through message fields, repeated ones
    and maps included), down to three levels."""
    paths: list[list[FieldDescriptor]] = []
    for field in message.fields:
        if field.type == FieldDescriptor.TYPE_STRING:
            paths.append([field])
        elif field.type == FieldDescriptor.TYPE_MESSAGE and depth < 3:
            paths += [[field, *rest] for rest in string_paths(field.message_type, depth + 1)]
    return paths


def field_bytes(path: list[FieldDescriptor], payload: bytes) -> bytes:
    """The wire bytes of one occurrence of the string at ``path`` holding ``payload``:
    appended to a message, it sets that string (or adds an element or a map entry)."""
    field, *rest = path
    inner = field_bytes(rest, payload) if rest else payload
    return _varint(field.number << 3 | 2) + _varint(len(inner)) + inner


class Fuzzer:
    """Makes cases from a seeded random generator; ``known_ids`` are offset message ids of
    records the broker really holds (filled in as valid sends succeed)."""

    def __init__(self, rng: random.Random, store_host: str) -> None:
        self.rng = rng
        self.store_host = store_host
        self.known_ids: list[str] = []
        self.scratch = 0

    # -- values --------------------------------------------------------------------------

    def text(self, max_len: int = 12) -> str:
        alphabet = "abcXYZ019_-|% ü标\u200b✓"
        return "".join(self.rng.choice(alphabet) for _ in range(self.rng.randint(0, max_len)))

    def message(self) -> m.Message:
        rng = self.rng
        return m.Message(
            body=rng.randbytes(rng.choice((0, 1, 100, 4000))),
            tags=rng.choice(("", "TagA", "TagB", "标签")),
            keys=rng.sample(("k1", "k2", "order-7"), rng.randint(0, 2)),
            # Values are never empty: RocketMQ drops such properties, so a send refuses them.
            properties={f"p{i}": self.text() or "v" for i in range(rng.randint(0, 3))},
            flag=rng.choice((0, 7, *INT32)),
            born_timestamp_ms=rng.choice((0, 1, 1_700_000_000_000, 2**63 - 1)),
        )

    def oversized(self, size: int) -> bytes:
        return b"\xab" * size

    # -- per RPC ---------------------------------------------------------------------------

    def send(self) -> tuple[m.SendMessagesRequest, list[Mutation]]:
        rng = self.rng
        request = m.SendMessagesRequest(
            topic=TOPIC, messages=[self.message() for _ in range(rng.randint(1, 3))]
        )
        first = request.messages[0]

        def set_queue(v):
            return lambda r: setattr(r, "queue_id", v)

        mutations: list[Mutation] = [
            ("unknown topic", lambda r: setattr(r, "topic", "NoSuchTopic"), codes(NOT_FOUND)),
            (
                "invalid topic",
                lambda r: setattr(r, "topic", rng.choice((*BAD_TOPICS, "SCHEDULE_TOPIC_XXXX"))),
                codes(INVALID),
            ),
            (
                "read-only topic",
                lambda r: setattr(r, "topic", READ_ONLY),
                codes(Code.PERMISSION_DENIED),
            ),
            ("empty batch", lambda r: r.ClearField("messages"), codes(INVALID)),
            (
                "reserved property",
                lambda r: first.properties.update({rng.choice(RESERVED): "x"}),
                codes(INVALID),
            ),
            (
                "separator in property",
                lambda r: first.properties.update({"a": "x\x01y"}),
                codes(INVALID),
            ),
            (
                "separator in name",
                lambda r: first.properties.update({"a\x02b": "x"}),
                codes(INVALID),
            ),
            ("empty property name", lambda r: first.properties.update({"": "x"}), codes(INVALID)),
            ("empty property value", lambda r: first.properties.update({"k": ""}), codes(INVALID)),
            (
                "huge properties",
                lambda r: first.properties.update({"big": "v" * 40_000}),
                codes(INVALID),
            ),
            ("separator in tags", lambda r: setattr(first, "tags", "a\x01b"), codes(INVALID)),
            (
                "separator in unique key",
                lambda r: setattr(first, "unique_key", "u\x02"),
                codes(INVALID),
            ),
            (
                "key with space",
                lambda r: first.keys.append(rng.choice(("a b", "", " "))),
                codes(INVALID),
            ),
            (
                "body over the limit",
                lambda r: setattr(first, "body", self.oversized(MAX_MESSAGE_BYTES + 1)),
                codes(INVALID),
            ),
            (
                "body over gRPC's limit",
                lambda r: setattr(first, "body", self.oversized(MAX_REQUEST_BYTES + 1)),
                codes(Code.RESOURCE_EXHAUSTED),
            ),
            (
                "queue id out of range",
                set_queue(rng.choice((-1, QUEUES, 1000, *INT32))),
                codes(INVALID),
            ),
            ("empty sharding key", lambda r: setattr(r, "sharding_key", ""), codes(INVALID)),
            (
                "bad delay level",
                lambda r: setattr(r, "delay_level", rng.choice((3, 19, *INT32))),
                codes(INVALID),
            ),
            (
                "negative born time",
                lambda r: setattr(first, "born_timestamp_ms", rng.choice((-1, -(2**63)))),
                codes(INVALID),
            ),
            ("valid queue id", set_queue(rng.randrange(QUEUES)), codes(OK)),
            (
                "valid sharding key",
                lambda r: setattr(r, "sharding_key", self.text(30) or "k"),
                codes(OK),
            ),
            ("valid delay", lambda r: setattr(r, "delay_level", rng.choice((1, 2))), codes(OK)),
            (
                "many small messages",
                lambda r: r.messages.extend(m.Message(body=b"s") for _ in range(500)),
                codes(OK),
            ),
        ]
        return request, mutations

    def pull(self) -> tuple[m.PullMessagesRequest, list[Mutation]]:
        rng = self.rng
        request = m.PullMessagesRequest(
            queue=mq(queue_id=rng.randrange(QUEUES)), queue_offset=rng.randint(0, 5)
        )

        def field(name, value):
            return lambda r: setattr(r, name, value)

        mutations: list[Mutation] = [
            ("unknown topic", lambda r: setattr(r.queue, "topic", "NoSuchTopic"), codes(NOT_FOUND)),
            (
                "invalid topic",
                lambda r: setattr(r.queue, "topic", rng.choice(BAD_READ_TOPICS)),
                codes(INVALID),
            ),
            (
                "write-only topic",
                lambda r: setattr(r.queue, "topic", WRITE_ONLY),
                codes(Code.PERMISSION_DENIED),
            ),
            (
                "another broker",
                lambda r: setattr(r.queue, "broker_name", "broker-z"),
                codes(NOT_FOUND),
            ),
            (
                "negative queue",
                lambda r: setattr(r.queue, "queue_id", rng.choice((-1, -(2**31)))),
                codes(INVALID),
            ),
            (
                "queue beyond range",
                lambda r: setattr(r.queue, "queue_id", rng.choice((QUEUES, 2**31 - 1))),
                codes(NOT_FOUND),
            ),
            ("negative offset", field("queue_offset", rng.choice((-1, -(2**63)))), codes(INVALID)),
            ("huge offset", field("queue_offset", 2**63 - 1), codes(OK)),
            (
                "negative max messages",
                field("max_messages", rng.choice((-1, -(2**31)))),
                codes(INVALID),
            ),
            ("huge max messages", field("max_messages", 2**31 - 1), codes(OK)),
            ("negative max bytes", field("max_bytes", rng.choice((-1, -(2**63)))), codes(INVALID)),
            ("huge max bytes", field("max_bytes", 2**63 - 1), codes(OK)),
            ("tiny max bytes", field("max_bytes", 1), codes(OK)),
            (
                "bad expression",
                field("subscription_expression", rng.choice(BAD_EXPRESSIONS)),
                codes(INVALID),
            ),
            (
                "good expression",
                field("subscription_expression", rng.choice(GOOD_EXPRESSIONS)),
                codes(OK),
            ),
            (
                "negative suspend",
                field("suspend_timeout_ms", rng.choice((-1, -(2**63)))),
                codes(INVALID),
            ),
            ("huge suspend", field("suspend_timeout_ms", 2**63 - 1), codes(OK)),
            ("commit without group", field("commit_offset", 3), codes(INVALID)),
            ("invalid group", field("consumer_group", rng.choice(BAD_GROUPS[1:])), codes(INVALID)),
            (
                "negative commit",
                lambda r: r.MergeFrom(m.PullMessagesRequest(consumer_group="G", commit_offset=-5)),
                codes(INVALID),
            ),
            (
                "commit",
                lambda r: r.MergeFrom(
                    m.PullMessagesRequest(
                        consumer_group="G", commit_offset=rng.choice((0, 2, 2**63 - 1))
                    )
                ),
                codes(OK),
            ),
        ]
        return request, mutations

    def query_offsets(self) -> tuple[m.QueryOffsetsRequest, list[Mutation]]:
        rng = self.rng
        request = m.QueryOffsetsRequest(
            queries=[m.QueueOffsetsQuery(queue=mq(queue_id=q)) for q in range(rng.randint(1, 4))]
        )
        last = request.queries[-1]
        mutations: list[Mutation] = [
            ("no queries", lambda r: r.ClearField("queries"), codes(INVALID)),
            (
                "unknown topic",
                lambda r: setattr(last.queue, "topic", "NoSuchTopic"),
                codes(NOT_FOUND),
            ),
            (
                "invalid topic",
                lambda r: setattr(last.queue, "topic", rng.choice(BAD_READ_TOPICS)),
                codes(INVALID),
            ),
            (
                "queue beyond range",
                lambda r: setattr(last.queue, "queue_id", 2**31 - 1),
                codes(NOT_FOUND),
            ),
            ("negative queue", lambda r: setattr(last.queue, "queue_id", -1), codes(INVALID)),
            (
                "negative timestamp",
                lambda r: setattr(last, "timestamp_ms", rng.choice((-1, -(2**63)))),
                codes(INVALID),
            ),
            (
                "timestamps",
                lambda r: setattr(
                    last, "timestamp_ms", rng.choice((0, 1_700_000_000_000, 2**63 - 1))
                ),
                codes(OK),
            ),
            (
                "many queries",
                lambda r: r.queries.extend(m.QueueOffsetsQuery(queue=mq()) for _ in range(2000)),
                codes(OK),
            ),
        ]
        return request, mutations

    def view(self) -> tuple[m.ViewMessageRequest, list[Mutation]]:
        rng = self.rng
        request = m.ViewMessageRequest()
        ref = request.message

        def known(r):
            if self.known_ids:
                ref.offset_msg_id = rng.choice(self.known_ids)

        mutations: list[Mutation] = [
            ("no reference", lambda r: None, codes(INVALID)),
            (
                "negative offset",
                lambda r: setattr(ref, "physical_offset", rng.choice((-1, -(2**63)))),
                codes(INVALID),
            ),
            (
                "any offset",
                lambda r: setattr(ref, "physical_offset", rng.randint(0, 1 << 20)),
                codes(OK, NOT_FOUND),
            ),
            ("huge offset", lambda r: setattr(ref, "physical_offset", 2**63 - 1), codes(NOT_FOUND)),
            (
                "malformed id",
                lambda r: setattr(
                    ref, "offset_msg_id", rng.choice(("", "XYZ", "0" * 31, "G" * 32, "0" * 40))
                ),
                codes(INVALID),
            ),
            (
                "another host",
                lambda r: setattr(ref, "offset_msg_id", offset_msg_id("10.9.8.7:10911", 0)),
                codes(NOT_FOUND),
            ),
            (
                "this host, any offset",
                lambda r: setattr(
                    ref, "offset_msg_id", offset_msg_id(self.store_host, rng.randint(0, 1 << 20))
                ),
                codes(OK, NOT_FOUND),
            ),
            ("a stored record", known, codes(OK, INVALID)),  # INVALID only before any send
        ]
        return request, mutations

    def send_back(self) -> tuple[m.ConsumerSendBackRequest, list[Mutation]]:
        rng = self.rng
        request = m.ConsumerSendBackRequest(consumer_group="G", original_topic=TOPIC)
        if self.known_ids:
            request.message.offset_msg_id = rng.choice(self.known_ids)
        mutations: list[Mutation] = [
            (
                "invalid group",
                lambda r: setattr(r, "consumer_group", rng.choice(BAD_GROUPS)),
                codes(INVALID),
            ),
            ("no reference", lambda r: r.ClearField("message"), codes(INVALID)),
            (
                "another host",
                lambda r: setattr(r.message, "offset_msg_id", offset_msg_id("10.9.8.7:1", 0)),
                codes(NOT_FOUND),
            ),
            (
                "nothing there",
                lambda r: setattr(r.message, "physical_offset", 2**62),
                codes(NOT_FOUND),
            ),
            (
                "odd numbers",
                lambda r: r.MergeFrom(
                    m.ConsumerSendBackRequest(
                        delay_level=rng.choice(INT32), max_reconsume_times=rng.choice(INT32)
                    )
                ),
                None,
            ),
            ("dead letter now", lambda r: setattr(r, "dead_letter_now", True), None),
            ("as it is", lambda r: None, None),
        ]
        return request, mutations

    def offsets(self) -> tuple[object, list[Mutation]]:
        rng = self.rng
        kind = rng.choice(("update", "query", "progress"))
        if kind == "update":
            request = offsets_pb2.UpdateConsumerOffsetsRequest(
                consumer_group="G",
                offsets=[
                    offsets_pb2.QueueOffset(queue=mq(queue_id=q), offset=rng.randint(0, 9))
                    for q in range(2)
                ],
                increase_only=rng.random() < 0.5,
            )
            item = request.offsets[1]
            mutations: list[Mutation] = [
                (
                    "invalid group",
                    lambda r: setattr(r, "consumer_group", rng.choice(BAD_GROUPS)),
                    codes(INVALID),
                ),
                ("nothing to commit", lambda r: r.ClearField("offsets"), codes(INVALID)),
                (
                    "negative offset",
                    lambda r: setattr(item, "offset", rng.choice((-1, -(2**63)))),
                    codes(INVALID),
                ),
                ("queue twice", lambda r: setattr(item.queue, "queue_id", 0), codes(INVALID)),
                (
                    "unknown topic",
                    lambda r: setattr(item.queue, "topic", "NoSuchTopic"),
                    codes(NOT_FOUND),
                ),
                (
                    "invalid topic",
                    lambda r: setattr(item.queue, "topic", rng.choice(BAD_READ_TOPICS)),
                    codes(INVALID),
                ),
                (
                    "another broker",
                    lambda r: setattr(item.queue, "broker_name", "broker-z"),
                    codes(NOT_FOUND),
                ),
                (
                    "queue beyond range",
                    lambda r: setattr(item.queue, "queue_id", 2**31 - 1),
                    codes(NOT_FOUND),
                ),
                ("huge offset", lambda r: setattr(item, "offset", 2**63 - 1), codes(OK)),
                ("as it is", lambda r: None, codes(OK)),
            ]
        elif kind == "query":
            request = offsets_pb2.QueryConsumerOffsetsRequest(consumer_group="G", queues=[mq()])
            queue = request.queues[0]
            mutations = [
                (
                    "invalid group",
                    lambda r: setattr(r, "consumer_group", rng.choice(BAD_GROUPS)),
                    codes(INVALID),
                ),
                ("every queue", lambda r: r.ClearField("queues"), codes(OK)),
                (
                    "unknown topic is just absent",
                    lambda r: setattr(queue, "topic", "NoSuchTopic"),
                    codes(OK),
                ),
                (
                    "invalid topic",
                    lambda r: setattr(queue, "topic", rng.choice(BAD_READ_TOPICS)),
                    codes(INVALID),
                ),
                ("negative queue", lambda r: setattr(queue, "queue_id", -1), codes(INVALID)),
                (
                    "another broker",
                    lambda r: setattr(queue, "broker_name", "broker-z"),
                    codes(NOT_FOUND),
                ),
            ]
        else:
            request = offsets_pb2.GetConsumerProgressRequest(consumer_group="G", topic=TOPIC)
            mutations = [
                (
                    "invalid group",
                    lambda r: setattr(r, "consumer_group", rng.choice(BAD_GROUPS)),
                    codes(INVALID),
                ),
                ("every topic", lambda r: setattr(r, "topic", ""), codes(OK)),
                ("unknown topic", lambda r: setattr(r, "topic", "NoSuchTopic"), codes(NOT_FOUND)),
                (
                    "invalid topic",
                    lambda r: setattr(r, "topic", rng.choice(BAD_READ_TOPICS[1:])),
                    codes(INVALID),
                ),
            ]
        return request, mutations

    def admin(self) -> tuple[object, list[Mutation]]:
        rng = self.rng
        kind = rng.choice(("create", "update", "delete", "route", "list", "info"))
        self.scratch += 1
        scratch = f"Scratch{self.scratch}"
        if kind == "create":
            request = admin_pb2.CreateTopicRequest(
                topic=scratch, read_queue_nums=2, write_queue_nums=2
            )
            mutations: list[Mutation] = [
                (
                    "invalid name",
                    lambda r: setattr(r, "topic", rng.choice(BAD_TOPICS)),
                    codes(INVALID),
                ),
                (
                    "bad queue count",
                    lambda r: setattr(
                        r,
                        rng.choice(("read_queue_nums", "write_queue_nums")),
                        rng.choice((-1, 1025, *INT32)),
                    ),
                    codes(INVALID),
                ),
                (
                    "bad perm",
                    lambda r: setattr(r, "perm", rng.choice((1, 3, 5, 7, 8, 2**31 - 1, -1))),
                    codes(INVALID),
                ),
                (
                    "conflicting config",
                    lambda r: setattr(r, "topic", TOPIC),
                    codes(Code.ALREADY_EXISTS),
                ),
                ("new topic", lambda r: None, codes(OK)),
            ]
        elif kind == "update":
            request = admin_pb2.UpdateTopicRequest(topic=READ_ONLY)
            mutations = [
                ("unknown topic", lambda r: setattr(r, "topic", "NoSuchTopic"), codes(NOT_FOUND)),
                (
                    "invalid name",
                    lambda r: setattr(r, "topic", rng.choice(BAD_READ_TOPICS)),
                    codes(INVALID),
                ),
                (
                    "bad queue count",
                    lambda r: setattr(r, "read_queue_nums", rng.choice((0, -1, 1025, *INT32))),
                    codes(INVALID),
                ),
                (
                    "bad perm",
                    lambda r: setattr(r, "perm", rng.choice((0, 1, 3, 7, -1))),
                    codes(INVALID),
                ),
                ("no change", lambda r: None, codes(OK)),
            ]
        elif kind == "delete":
            request = admin_pb2.DeleteTopicRequest(topic="NoSuchTopic")
            mutations = [
                ("unknown topic", lambda r: None, codes(NOT_FOUND)),
                (
                    "invalid name",
                    lambda r: setattr(r, "topic", rng.choice(BAD_READ_TOPICS)),
                    codes(INVALID),
                ),
            ]
        elif kind == "route":
            request = admin_pb2.GetTopicRouteRequest(topic=TOPIC)
            mutations = [
                ("unknown topic", lambda r: setattr(r, "topic", "NoSuchTopic"), codes(NOT_FOUND)),
                (
                    "invalid name",
                    lambda r: setattr(r, "topic", rng.choice(BAD_READ_TOPICS)),
                    codes(INVALID),
                ),
                ("as it is", lambda r: None, codes(OK)),
            ]
        elif kind == "list":
            request = admin_pb2.ListTopicsRequest(include_system_topics=rng.random() < 0.5)
            mutations = [("list", lambda r: None, codes(OK))]
        else:
            request = admin_pb2.GetBrokerInfoRequest()
            mutations = [("info", lambda r: None, codes(OK))]
        return request, mutations

    # -- cases -----------------------------------------------------------------------------

    MAKERS = ("send", "pull", "query_offsets", "view", "send_back", "offsets", "admin")

    def case(self) -> Case:
        rng = self.rng
        roll = rng.random()
        if roll < 0.08:
            return self.cross_type()
        if roll < 0.14:
            return self.not_text()
        maker = rng.choice(self.MAKERS)
        request, mutations = getattr(self, maker)()
        if roll < 0.2:  # several defects at once: only "deliberate" is known
            chosen = rng.sample(mutations, min(len(mutations), rng.randint(2, 4)))
            for _, mutate, _ in chosen:
                mutate(request)
            return Case(f"{maker}: " + " + ".join(c[0] for c in chosen), request, None)
        label, mutate, expected = rng.choice(mutations)
        mutate(request)
        return Case(f"{maker}: {label}", request, expected)

    def not_text(self) -> Case:
        """A valid request with one string field, anywhere in it, whose bytes are not text."""
        rng = self.rng
        maker = rng.choice(("send", "pull", "query_offsets", "send_back", "offsets", "admin"))
        request, _ = getattr(self, maker)()
        paths = string_paths(request.DESCRIPTOR)
        if not paths:  # a request of no strings (ListTopics, GetBrokerInfo): another one
            return self.not_text()
        path = rng.choice(paths)
        label, payload = rng.choice(list(NOT_UTF8.items()))
        raw = request.SerializeToString() + field_bytes(path, payload)
        where = ".".join(f.name for f in path)
        return Case(f"{maker}: {where} is {label}", request, codes(INVALID), raw=raw)

    def cross_type(self) -> Case:
        """A valid request of one type sent to another RPC: protobuf parses it, with the
        fields it knows in the wrong places and the rest kept as unknown fields."""
        rng = self.rng
        while True:
            maker = rng.choice(self.MAKERS)
            request, mutations = getattr(self, maker)()
            rng.choice(mutations)[1](request)
            target = rng.choice(CROSS_TYPE_TARGETS)
            data = request.SerializeToString()
            if len(data) > MAX_REQUEST_BYTES:
                continue
            try:
                target.FromString(data)
            except DecodeError:
                continue  # not parseable as the target: gRPC itself would refuse it
            return Case(
                f"{maker} request sent to {SERVICES[target]}", request, None, SERVICES[target]
            )


@pytest.fixture
def fuzz_broker(broker_factory, connect):
    broker = broker_factory(NAME, *BROKER_FLAGS)
    stubs = connect(broker.endpoint)
    for topic, perm in ((TOPIC, 6), (READ_ONLY, 4), (WRITE_ONLY, 2)):
        stubs.admin.CreateTopic(
            admin_pb2.CreateTopicRequest(
                topic=topic, read_queue_nums=QUEUES, write_queue_nums=QUEUES, perm=perm
            )
        )
    return broker, stubs


def call(channel: grpc.Channel, case: Case) -> tuple[grpc.StatusCode, bytes, str]:
    rpc = channel.unary_unary(case.path)  # raw bytes in and out
    try:
        data = case.raw if case.raw is not None else case.request.SerializeToString()
        return OK, rpc(data, timeout=15), ""
    except grpc.RpcError as exc:
        return exc.code(), b"", exc.details() or ""


def test_hostile_requests_get_deliberate_answers(fuzz_broker):
    broker, stubs = fuzz_broker
    fuzzer = Fuzzer(random.Random(SEED), broker.endpoint)
    problems = []
    seen = {}
    not_text = 0
    for i in range(REQUESTS):
        case = fuzzer.case()
        code, answer, details = call(stubs.channel, case)
        seen[code] = seen.get(code, 0) + 1
        if case.raw is not None:
            not_text += 1
            if "is not a valid" not in details:  # the server's refusal of what it cannot parse
                problems.append(f"#{i} {case.label}: got {code.name} ({details!r})")
        allowed = case.expected if case.expected is not None else DELIBERATE
        if code not in allowed or code not in DELIBERATE:
            problems.append(
                f"#{i} {case.label}: got {code.name} ({details!r}); "
                f"expected {sorted(c.name for c in allowed)}"
            )
        if code == OK and isinstance(case.request, m.SendMessagesRequest) and case.method is None:
            response = m.SendMessagesResponse.FromString(answer)
            fuzzer.known_ids.extend(e.offset_msg_id for e in response.entries[:2])
        assert broker.running, f"broker died at #{i} {case.label}:\n{broker.log_tail()}"
    assert not problems, f"seed {SEED}: {len(problems)} bad answers:\n" + "\n".join(problems[:40])
    assert seen.get(OK, 0) > REQUESTS // 10 and sum(seen.values()) - seen.get(OK, 0) > REQUESTS // 2
    assert not_text > REQUESTS // 50, f"only {not_text} requests with strings that are not text"

    # Still serving normally.
    stubs.admin.CreateTopic(admin_pb2.CreateTopicRequest(topic="AfterFuzz"))
    stubs.messaging.SendMessages(
        m.SendMessagesRequest(
            topic="AfterFuzz", queue_id=1, messages=[m.Message(body=b"still here")]
        )
    )
    got = stubs.messaging.PullMessages(m.PullMessagesRequest(queue=mq("AfterFuzz", 1)))
    assert got.status == m.PULL_STATUS_FOUND and b"still here" in got.records

    assert broker.stop() == 0
    log = broker.log_text()
    assert "internal error" not in log and "Traceback" not in log, broker.log_tail(60)
    report = verify_store(broker.store_dir)
    assert report.ok, report.summary()


def test_fast_property_encoding_agrees_with_the_reference():
    """The send path's fast encoder must accept exactly what the field-by-field reference
    accepts, with the same bytes; hostile messages come from the same generator."""
    from rmq_spark.broker.v1.send import fast_properties, message_properties
    from rmq_spark.errors import InvalidArgumentError

    fuzzer = Fuzzer(random.Random(SEED), "127.0.0.1:1")
    checked = refused = 0
    while checked < 3000:
        request, mutations = fuzzer.send()
        for _, mutate, _ in fuzzer.rng.sample(mutations, 2):
            mutate(request)
        for message in request.messages[:5]:
            unique_key = message.unique_key or "ID"
            try:
                expected = message_properties(message, unique_key)
            except InvalidArgumentError:
                expected = None
                refused += 1
            assert fast_properties(message, unique_key) == expected, message
            checked += 1
    assert refused > 100
