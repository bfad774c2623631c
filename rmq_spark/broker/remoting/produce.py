"""Writes over remoting: SEND_MESSAGE (10, the Go client's), SEND_MESSAGE_V2 (310, Java's),
SEND_BATCH_MESSAGE (320), END_TRANSACTION (37) and CONSUMER_SEND_MSG_BACK (36).

Each request is decoded once (:meth:`Producing.decode_send`, :func:`decode_end`,
:func:`decode_send_back`) and its rule reads that value: the topic checked is the topic
written; a transaction end is checked against the half message it ends (its real topic,
producer group and positions); a send-back against the topic of the record it copies.

A message is stored as the producer sent it: its properties text, flag, born time and the
compression bits of its sysFlag (a compressed body stays compressed; consumers inflate it).
The broker adds a UNIQ_KEY when the producer sent none. ``DELAY`` goes through the delay
levels, ``TRAN_MSG`` makes a half message, and everything else through
:class:`~rmq_spark.broker.write_path.WritePath`, the one write path every protocol shares.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

from rmq_spark.auth.permissions import PUB, SUB, Need
from rmq_spark.auth.remoting_rules import RemotingRule, group_need, topic_need
from rmq_spark.broker.core.broker import Broker
from rmq_spark.broker.core.ids import RoundRobin, UniqueIdGenerator
from rmq_spark.broker.core.messaging import AppendResult, MessagingCore, TopicConfig
from rmq_spark.broker.delivery import retry
from rmq_spark.broker.remoting.answers import Refusal, failure_reply
from rmq_spark.broker.remoting.endpoint import Endpoint
from rmq_spark.broker.remoting.group_commit import GroupCommit
from rmq_spark.broker.remoting.server import Connection
from rmq_spark.broker.transactions.state import HalfState, check_end
from rmq_spark.broker.workers import Workers
from rmq_spark.codec import properties as props
from rmq_spark.codec.record import (
    offset_msg_id_prefix,
    offset_msg_ids,
)
from rmq_spark.errors import InvalidArgumentError, NotFoundError, shown
from rmq_spark.names import RETRY_PREFIX, check_sendable, validate_group, validate_topic
from rmq_spark.wire.remoting import headers
from rmq_spark.wire.remoting.codes import RequestCode, ResponseCode
from rmq_spark.wire.remoting.frame import Command

#: sysFlag bits a producer may set: compressed, multi tags, compression type
SENDER_SYSFLAG_MASK = 0x1 | 0x2 | 0x700
TRAN_MSG = "TRAN_MSG"
PGROUP = "PGROUP"
#: EndTransaction's commitOrRollback values (MessageSysFlag transaction types)
TRANSACTION_COMMIT = 8
TRANSACTION_ROLLBACK = 12
REGION = "DefaultRegion"


@dataclass(frozen=True)
class SendPlan:
    header: headers.SendHeader
    topic: str
    bodies: list[bytes]
    properties: list[bytes]
    tags: list[str | None]
    flags: list[int]
    unique_keys: list[str]
    transaction: bool
    delay_level: int


@dataclass(frozen=True)
class EndRequest:
    """An END_TRANSACTION, decoded; ``half`` is the half message it ends, once resolved."""

    transaction_id: str
    #: True to commit, False to roll back, None for "unknown" (the broker asks again later)
    commit: bool | None
    producer_group: str | None
    commit_log_offset: int | None
    half_queue_offset: int | None
    topic: str | None
    half: HalfState | None = None


@dataclass(frozen=True)
class SendBackRequest:
    group: str
    physical_offset: int
    delay_level: int
    max_reconsume_times: int
    origin_topic: str


def _send_needs(plan: SendPlan) -> list[Need]:
    return topic_need(plan.topic, PUB)


def _end_needs(end: EndRequest) -> list[Need]:
    """Pub on the topic the half message will be written to: its own, whatever the request
    says (a topic given that is not the half message's is then refused by the handler)."""
    return topic_need(end.half.real_topic if end.half is not None else end.topic or "", PUB)


def _send_back_needs(back: SendBackRequest) -> list[Need]:
    """Sub on the group, and on the topic the copied record must belong to (the handler
    refuses a record of any other topic than that one or the group's retry topic)."""
    return [*group_need(back.group), *topic_need(back.origin_topic, SUB)]


class Producing:
    def __init__(self, broker: Broker, workers: Workers) -> None:
        self._broker = broker
        self._workers = workers
        self._groups = GroupCommit(broker, workers)
        self._round_robin = RoundRobin()
        self._unique_ids = UniqueIdGenerator(broker.store_host)

    def endpoints(self) -> dict[int, Endpoint]:
        send = RemotingRule(needs=_send_needs)
        return {
            RequestCode.SEND_MESSAGE: Endpoint(
                rule=send,
                decode=functools.partial(self.decode_send, short_names=False),
                fast=self.send,
            ),
            RequestCode.SEND_MESSAGE_V2: Endpoint(
                rule=send, decode=self.decode_send, fast=self.send
            ),
            RequestCode.SEND_BATCH_MESSAGE: Endpoint(
                rule=send, decode=self.decode_send, fast=self.send
            ),
            RequestCode.END_TRANSACTION: Endpoint(
                self.end_transaction,
                RemotingRule(needs=_end_needs),
                decode=decode_end,
                resolve=self.find_half,
            ),
            RequestCode.CONSUMER_SEND_MSG_BACK: Endpoint(
                self.send_back, RemotingRule(needs=_send_back_needs), decode=decode_send_back
            ),
        }

    def decode_send(self, request: Command, short_names: bool = True) -> SendPlan:
        """What to store for a send, read once from its header and body. Refusal
        MESSAGE_ILLEGAL names what is wrong; NO_PERMISSION for a topic of the broker's."""
        try:
            header = headers.send_header(request.ext, short_names=short_names)
            batch = header.batch or request.code == RequestCode.SEND_BATCH_MESSAGE
            return self._plan(request, header, batch)
        except (InvalidArgumentError, UnicodeError) as exc:
            raise Refusal(ResponseCode.MESSAGE_ILLEGAL, str(exc)) from None

    def send(self, connection: Connection, request: Command, plan: SendPlan) -> None:
        """Serve a decoded and authorized send on the event loop. The common one (a topic
        that exists, no delay, no transaction) goes straight into group commit and is
        answered when its group is stored, with no task or coroutine of its own; the others
        get a task (:meth:`_send_later`) for the work that waits on a worker."""
        header = plan.header
        config = self._broker.messaging.topic(plan.topic)
        if config is None or plan.transaction or plan.delay_level or plan.topic[0] == "%":
            connection.spawn(self._send_later(connection, request, header, plan, config))
            return
        queue_id = self._queue_id(header, plan.topic, config)
        self._groups.submit(
            plan.topic,
            queue_id,
            plan.bodies,
            plan.properties,
            plan.tags,
            functools.partial(self._stored, connection, request, plan, queue_id),
            **self._fields(connection, header, plan),
        )

    async def _send_later(
        self,
        connection: Connection,
        request: Command,
        header: headers.SendHeader,
        plan: SendPlan,
        config: TopicConfig | None,
    ) -> None:
        """A send that waits: creating its topic, a half message, or a delayed one."""
        try:
            topic = plan.topic
            if config is None or topic.startswith(RETRY_PREFIX):
                # creating a topic writes its table: on a worker
                config = await self._workers.run(self._writable_topic, topic)
            queue_id = self._queue_id(header, topic, config)
            fields = self._fields(connection, header, plan)
            if plan.transaction:
                prepare = functools.partial(
                    self._broker.transactions.prepare,
                    topic,
                    queue_id,
                    plan.bodies[0],
                    plan.properties[0],
                    plan.tags[0],
                    transaction_id=plan.unique_keys[0],
                    born_host=connection.peer,
                    born_timestamp_ms=header.born_timestamp,
                )
                result = await self._workers.run(prepare)
            elif plan.delay_level:
                submit = functools.partial(
                    self._broker.delays.submit,
                    topic,
                    queue_id,
                    plan.bodies,
                    plan.properties,
                    plan.tags,
                    plan.delay_level,
                    **fields,
                )
                result = await self._workers.run(submit)
            else:
                result = await self._groups.put(
                    topic, queue_id, plan.bodies, plan.properties, plan.tags, **fields
                )
        except Exception as exc:
            self._answer(connection, request, exc)
        else:
            self._stored(connection, request, plan, queue_id, result)

    def _queue_id(self, header: headers.SendHeader, topic: str, config: TopicConfig) -> int:
        """The queue the producer chose, or the next of the topic's (a negative id)."""
        if header.queue_id >= 0:
            return header.queue_id
        return self._round_robin.next(topic) % config.write_queue_nums

    @staticmethod
    def _fields(connection: Connection, header: headers.SendHeader, plan: SendPlan) -> dict:
        """What the store writes for every message of a send beside its body and
        properties."""
        return {
            "born_host": connection.peer,
            "born_timestamps": [header.born_timestamp] * len(plan.bodies),
            "flags": plan.flags,
            "reconsume_times": header.reconsume_times,
            "sysflag": header.sys_flag & SENDER_SYSFLAG_MASK,
        }

    def _stored(
        self,
        connection: Connection,
        request: Command,
        plan: SendPlan,
        queue_id: int,
        outcome: AppendResult | BaseException,
    ) -> None:
        """Answer a send with where its messages went, or with why they did not."""
        if isinstance(outcome, BaseException):
            self._answer(connection, request, outcome)
            return
        prefix = offset_msg_id_prefix(self._broker.store_host)
        ids = offset_msg_ids(prefix, outcome.physical_offsets)
        self._answer(
            connection,
            request,
            request.reply(
                msgId=",".join(ids),
                queueId=str(queue_id),
                queueOffset=str(outcome.first_queue_offset),
                transactionId=plan.unique_keys[0],
                MSG_REGION=REGION,
                TRACE_ON="true",
            ),
        )

    @staticmethod
    def _answer(connection: Connection, request: Command, answer: Command | BaseException) -> None:
        """Send ``answer`` (an error becomes its response code), unless the send was
        oneway."""
        if request.is_oneway:
            return
        if isinstance(answer, BaseException):
            answer = failure_reply(request, answer)
        connection.send(answer)

    def _plan(self, request: Command, header: headers.SendHeader, batch: bool) -> SendPlan:
        """What to store for a send, checked (InvalidArgumentError names what is wrong)."""
        topic = self._topic(header.topic)
        config = self._broker.config
        if batch:
            flags, bodies, blobs = headers.decode_batch(
                bytes(request.body), max_count=config.max_batch_messages
            )
        else:
            flags, bodies = [header.flag], [bytes(request.body)]
            blobs = [header.properties.encode()]
        for i, body in enumerate(bodies):
            if len(body) > config.max_message_bytes:
                raise InvalidArgumentError(
                    f"message {i} has a body of {len(body):,} bytes; this broker takes at most "
                    f"{config.max_message_bytes:,} (--max-message-bytes)"
                )
        parsed = [props.decode_properties(blob) for blob in blobs]
        unique = self._unique_keys(parsed)
        blobs = [
            blob if fields.get(props.UNIQ_KEY) else _with_unique_key(blob, key)
            for blob, fields, key in zip(blobs, parsed, unique, strict=True)
        ]
        first = parsed[0]
        delay = headers.whole(first, props.DELAY, 0) if not batch else 0
        return SendPlan(
            header=header,
            topic=topic,
            bodies=bodies,
            properties=blobs,
            tags=[fields.get(props.TAGS) for fields in parsed],
            flags=flags,
            unique_keys=unique,
            transaction=not batch and first.get(TRAN_MSG, "").lower() == "true",
            delay_level=max(delay, 0),
        )

    def _writable_topic(self, topic: str) -> TopicConfig:
        if topic.startswith(RETRY_PREFIX):
            # A consumer's fallback when CONSUMER_SEND_MSG_BACK failed: a plain send there.
            self._broker.messaging.topics.ensure_system_topic(topic, retry.RETRY_QUEUE_NUMS)
        return self._broker.writes.topic_for_write(topic)

    def _topic(self, name: str) -> str:
        topic = check_sendable(validate_topic(name, allow_system=True))
        if topic.startswith(RETRY_PREFIX):
            validate_group(topic[len(RETRY_PREFIX) :])
        elif topic.startswith("%"):
            raise Refusal(
                ResponseCode.NO_PERMISSION,
                f"topic {topic!r} is the broker's own; send to a topic of yours",
            )
        return topic

    def _unique_keys(self, parsed: list[dict[str, str]]) -> list[str]:
        missing = sum(1 for fields in parsed if not fields.get(props.UNIQ_KEY))
        made = iter(self._unique_ids.next_ids(missing) if missing else ())
        return [fields.get(props.UNIQ_KEY) or next(made) for fields in parsed]

    def find_half(self, end: EndRequest) -> EndRequest:
        """The request with the half message it would end (on a worker): who may end it is
        decided on that half message, not on what the request says of it."""
        return dataclasses.replace(end, half=self._broker.transactions.half(end.transaction_id))

    async def end_transaction(
        self, connection: Connection, request: Command, end: EndRequest
    ) -> Command:
        half = end.half
        if half is None:
            # not pending: ended already (answered as such) or never prepared here
            outcome = self._broker.transactions.status(end.transaction_id)
            if outcome is None:
                raise NotFoundError(
                    f"no pending transaction {end.transaction_id!r} on broker "
                    f"{self._broker.name}: it was never prepared here, or resolved long ago"
                )
            return request.reply(
                ResponseCode.SYSTEM_ERROR,
                f"transaction {end.transaction_id!r} is already resolved ({outcome}); "
                "nothing was written",
            )
        # RocketMQ's rule: the request names the half message by its producer group and
        # positions, each as stored
        check_end(
            half,
            producer_group=end.producer_group,
            commit_log_offset=end.commit_log_offset,
            half_queue_offset=end.half_queue_offset,
            topic=end.topic,
        )
        if end.commit is None:
            return request.reply()  # unknown: the broker's check asks again later
        finish = functools.partial(
            self._broker.transactions.end, end.transaction_id, end.commit, expect=half
        )
        await self._workers.run(finish)
        return request.reply()

    async def send_back(
        self, connection: Connection, request: Command, back: SendBackRequest
    ) -> Command:
        send_back = functools.partial(_send_back, self._broker.messaging, back)
        await self._workers.run(send_back)
        return request.reply()


def decode_end(request: Command) -> EndRequest:
    """END_TRANSACTION's header. The transaction is named by ``msgId`` (its UNIQ_KEY) or
    ``transactionId``; two that differ are refused, as is any field that is not a number
    where one is due."""
    ext = request.ext
    resolution = headers.whole(ext, "commitOrRollback", bounds=headers.INT32)
    named = {v for v in (ext.get("msgId"), ext.get("transactionId")) if v}
    if not named:
        raise InvalidArgumentError("END_TRANSACTION names no msgId or transactionId")
    if len(named) > 1:
        raise InvalidArgumentError(
            f"END_TRANSACTION names two transactions: msgId {shown(ext['msgId'])} and "
            f"transactionId {shown(ext['transactionId'])}"
        )
    topic = ext.get("topic") or None
    if topic is not None:
        validate_topic(topic, allow_system=True)

    def position(name: str) -> int | None:
        return headers.whole(ext, name) if ext.get(name) else None

    return EndRequest(
        transaction_id=named.pop(),
        commit={TRANSACTION_COMMIT: True, TRANSACTION_ROLLBACK: False}.get(resolution),
        producer_group=ext.get("producerGroup") or None,
        commit_log_offset=position("commitLogOffset"),
        half_queue_offset=position("tranStateTableOffset"),
        topic=topic,
    )


def decode_send_back(request: Command) -> SendBackRequest:
    ext = request.ext
    origin = ext.get("originTopic", "")
    if origin:
        validate_topic(origin, allow_system=True)
    physical = headers.whole(ext, "offset")
    if physical < 0:
        raise InvalidArgumentError(f"offset {physical} must be >= 0")
    return SendBackRequest(
        group=validate_group(headers.text(ext, "group")),
        physical_offset=physical,
        delay_level=headers.whole(ext, "delayLevel", 0, headers.INT32),
        max_reconsume_times=headers.whole(ext, "maxReconsumeTimes", 0, headers.INT32),
        origin_topic=origin,
    )


def _send_back(core: MessagingCore, back: SendBackRequest) -> None:
    """RocketMQ's send-back rule (:func:`retry.plan_send_back`): delay level 0 lets the
    broker pick, a negative level dead-letters now. The record copied must be one the group
    could have consumed: of the topic its rule authorized, or of the group's retry topic."""
    record, msg_id = core.find_record(back.physical_offset)
    retry.check_send_back_source(record.topic, back.group, back.origin_topic)
    plan = retry.plan_send_back(
        record,
        group=back.group,
        record_msg_id=msg_id,
        original_topic=back.origin_topic,
        delay_level=max(back.delay_level, 0),
        max_reconsume_times=back.max_reconsume_times or core.retry_max_times(back.group),
        dead_letter_now=back.delay_level < 0,
        consumer_reconsume_times=record.reconsume_times,
    )
    core.send_back(record, plan)


def _with_unique_key(blob: bytes, key: str) -> bytes:
    """``blob`` with UNIQ_KEY set to ``key`` (an empty one replaced); a last property
    without its closing separator (the parser takes that too) is closed first."""
    fields = props.decode_properties(blob)
    fields[props.UNIQ_KEY] = key
    return props.encode_properties(fields)
