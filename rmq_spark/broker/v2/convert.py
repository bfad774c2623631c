"""RocketMQ 5 messages to and from what the store keeps, and receipt handles. Pure.

A v2 message's system properties become RocketMQ's message properties, as a RocketMQ 5
proxy stores them: ``TAGS``, ``KEYS`` (space separated), ``UNIQ_KEY`` (the client's message
id), ``__SHARDINGKEY`` (the FIFO message group), ``TIMER_DELIVER_MS`` (a delay message's
delivery time) and ``TRAN_MSG`` (a transaction's half message); user properties are kept
as they are. Reading turns them back, so messages sent by either protocol read the same by
both.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from google.protobuf.timestamp_pb2 import Timestamp
from rocketmq.grpc_protocol import definition_pb2 as pb

from rmq_spark.broker.v2.codes import Code, V2Error
from rmq_spark.codec import properties as props
from rmq_spark.codec.record import Record, offset_msg_id
from rmq_spark.errors import shown

SHARDING_KEY = "__SHARDINGKEY"
TIMER_DELIVER_MS = props.TIMER_DELIVER_MS
TRAN_MSG = "TRAN_MSG"
#: properties a v2 reader gets as system properties (or not at all), never as user ones
SYSTEM_PROPERTIES = frozenset(
    {*props.RESERVED_PROPERTIES, SHARDING_KEY, TIMER_DELIVER_MS, TRAN_MSG, "MIN_OFFSET",
     props.TIMER_ENQUEUE_MS, props.TIMER_DEQUEUE_MS,
     "MAX_OFFSET", "CONSUME_START_TIME", "FIRST_POP_TIME", "POP_CK", "TRACE_ON",
     "MSG_REGION", "PGROUP", "CLUSTER", "TRANSACTION_CHECK_TIMES",
     "CHECK_IMMUNITY_TIME_IN_SECONDS", "TX_ID", "TX_OUTCOME", "TX_REAL_FLOOR"}
)  # fmt: skip
MAX_USER_PROPERTIES = 128
MAX_MESSAGE_GROUP_BYTES = 64
TYPE_NAMES = {
    pb.NORMAL: "NORMAL",
    pb.FIFO: "FIFO",
    pb.DELAY: "DELAY",
    pb.TRANSACTION: "TRANSACTION",
}


@dataclass
class Outgoing:
    """One v2 message as the store's append takes it."""

    message_id: str
    message_type: str
    body: bytes
    properties: bytes
    tag: str | None
    born_timestamp_ms: int
    message_group: str
    delivery_ms: int | None


def message_type_of(message: pb.Message) -> str:
    """The type a message is sent as (the client's own word, else inferred)."""
    given = TYPE_NAMES.get(message.system_properties.message_type)
    if given is not None:
        return given
    sp = message.system_properties
    if sp.message_group:
        return "FIFO"
    if sp.HasField("delivery_timestamp"):
        return "DELAY"
    return "NORMAL"


def check_type(topic: str, topic_type: str, message_type: str) -> None:
    if topic_type != "MIXED" and topic_type != message_type:
        raise V2Error(
            Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
            f"topic {topic} takes {topic_type} messages, not {message_type}; send to a "
            f"topic of that type or change the topic with 'rocketlite topic update {topic} "
            f"--message-type {message_type}'",
        )


def outgoing(message: pb.Message, max_body_bytes: int, now_ms: int) -> Outgoing:
    """Check one message of a SendMessage and turn it into stored fields."""
    sp = message.system_properties
    if not sp.message_id:
        raise V2Error(Code.ILLEGAL_MESSAGE_ID, "message_id is empty; every message needs one")
    if not message.body:
        raise V2Error(Code.MESSAGE_BODY_EMPTY, f"message {sp.message_id} has an empty body")
    if len(message.body) > max_body_bytes:
        raise V2Error(
            Code.MESSAGE_BODY_TOO_LARGE,
            f"message body of {len(message.body):,} bytes is over this broker's limit of "
            f"{max_body_bytes:,} (--max-message-bytes)",
        )
    if sp.body_encoding == pb.GZIP:
        raise V2Error(Code.UNSUPPORTED, "GZIP bodies are not supported; send IDENTITY")
    fields: dict[str, str] = {}
    if sp.HasField("tag"):
        if not sp.tag.strip() or "|" in sp.tag or not sp.tag.isprintable():
            raise V2Error(
                Code.ILLEGAL_MESSAGE_TAG,
                f"tag {shown(sp.tag)} is blank or holds '|' or control characters",
            )
        fields[props.TAGS] = sp.tag
    if sp.keys:
        bad = [k for k in sp.keys if not k.strip() or " " in k or not k.isprintable()]
        if bad:
            raise V2Error(
                Code.ILLEGAL_MESSAGE_KEY,
                f"key {shown(bad[0])} is blank or holds spaces or control characters",
            )
        fields[props.KEYS] = " ".join(sp.keys)
    fields[props.UNIQ_KEY] = sp.message_id
    group = sp.message_group if sp.HasField("message_group") else ""
    if sp.HasField("message_group"):
        if not group.strip() or len(group.encode()) >= MAX_MESSAGE_GROUP_BYTES:
            raise V2Error(
                Code.ILLEGAL_MESSAGE_GROUP,
                f"message group {shown(group)} is blank or {MAX_MESSAGE_GROUP_BYTES} bytes "
                "or longer",
            )
        fields[SHARDING_KEY] = group
    delivery_ms = None
    if sp.HasField("delivery_timestamp"):
        delivery_ms = epoch_ms(sp.delivery_timestamp)
        fields[TIMER_DELIVER_MS] = str(delivery_ms)
    if message_type_of(message) == "TRANSACTION":
        fields[TRAN_MSG] = "true"
    user = dict(message.user_properties)
    if len(user) > MAX_USER_PROPERTIES:
        raise V2Error(
            Code.MESSAGE_PROPERTIES_TOO_LARGE,
            f"{len(user)} user properties; at most {MAX_USER_PROPERTIES}",
        )
    for name, value in user.items():
        if name in SYSTEM_PROPERTIES or not name or not name.isprintable():
            raise V2Error(
                Code.ILLEGAL_MESSAGE_PROPERTY_KEY,
                f"property name {shown(name)} is reserved or not printable; rename it",
            )
        if value == "" or "\x01" in value or "\x02" in value:
            raise V2Error(
                Code.ILLEGAL_MESSAGE_PROPERTY_KEY,
                f"property {shown(name)} has an empty value or a separator character",
            )
    fields.update(user)
    try:
        encoded = props.encode_properties(fields)
    except ValueError as exc:
        raise V2Error(Code.MESSAGE_PROPERTIES_TOO_LARGE, str(exc)) from exc
    born = epoch_ms(sp.born_timestamp) if sp.HasField("born_timestamp") else now_ms
    if not 0 <= born <= now_ms + 86_400_000:
        born = now_ms  # a clock far off (or a unit mix-up): the broker's time instead
    return Outgoing(
        message_id=sp.message_id,
        message_type=message_type_of(message),
        body=message.body,
        properties=encoded,
        tag=fields.get(props.TAGS),
        born_timestamp_ms=born or now_ms,
        message_group=group,
        delivery_ms=delivery_ms,
    )


def epoch_ms(stamp: Timestamp) -> int:
    """A timestamp in ms, without protobuf's range check (a client that put milliseconds
    in the seconds field gets a clear refusal later, not an internal error)."""
    return stamp.seconds * 1000 + stamp.nanos // 1_000_000


def _timestamp(ms: int) -> Timestamp:
    stamp = Timestamp()
    stamp.FromMilliseconds(ms)
    return stamp


def incoming(
    record: Record,
    *,
    topic: str,
    receipt_handle: str = "",
    delivery_attempt: int = 0,
    invisible_ms: int = 0,
) -> pb.Message:
    """A stored record as a v2 message (``topic`` is the name the consumer asked for)."""
    fields = props.decode_properties(record.properties)
    sp = pb.SystemProperties(
        message_id=fields.get(props.UNIQ_KEY)
        or offset_msg_id(record.store_host, record.physical_offset),
        body_digest=pb.Digest(type=pb.CRC32, checksum=f"{zlib.crc32(record.body):08X}"),
        body_encoding=pb.IDENTITY,
        born_timestamp=_timestamp(record.born_timestamp),
        born_host=record.born_host,
        store_timestamp=_timestamp(record.store_timestamp),
        store_host=record.store_host,
        queue_id=record.queue_id,
        queue_offset=record.queue_offset,
    )
    if fields.get(props.TAGS):
        sp.tag = fields[props.TAGS]
    if fields.get(props.KEYS):
        sp.keys.extend(fields[props.KEYS].split(" "))
    if fields.get(SHARDING_KEY):
        sp.message_group = fields[SHARDING_KEY]
        sp.message_type = pb.FIFO
    elif fields.get(TIMER_DELIVER_MS, "").isdigit():
        sp.message_type = pb.DELAY
        sp.delivery_timestamp.CopyFrom(_timestamp(int(fields[TIMER_DELIVER_MS])))
    elif fields.get(TRAN_MSG) == "true":
        sp.message_type = pb.TRANSACTION
    else:
        sp.message_type = pb.NORMAL
    if receipt_handle:
        sp.receipt_handle = receipt_handle
        sp.delivery_attempt = delivery_attempt
        sp.invisible_duration.FromMilliseconds(invisible_ms)
    user = {k: v for k, v in fields.items() if k not in SYSTEM_PROPERTIES}
    return pb.Message(
        topic=pb.Resource(name=topic),
        user_properties=user,
        system_properties=sp,
        body=record.body,
    )


# -- receipt handles -----------------------------------------------------------------------


@dataclass(frozen=True)
class Handle:
    """What a receipt handle names: one delivery of one message of one queue."""

    queue_id: int
    offset: int
    token: int

    def encode(self) -> str:
        return f"{self.queue_id}.{self.offset}.{self.token:x}"

    @classmethod
    def decode(cls, text: str) -> Handle:
        parts = text.split(".")
        try:
            if len(parts) != 3:
                raise ValueError
            handle = cls(int(parts[0]), int(parts[1]), int(parts[2], 16))
        except ValueError:
            raise V2Error(
                Code.INVALID_RECEIPT_HANDLE,
                f"receipt handle {shown(text)} was not made by this broker; use the handle "
                "of a message as it was received",
            ) from None
        if handle.queue_id < 0 or handle.offset < 0 or handle.token < 0:
            raise V2Error(Code.INVALID_RECEIPT_HANDLE, f"receipt handle {shown(text)} is bad")
        return handle
