"""Writes over remoting: SEND_MESSAGE (10, the Go client's), SEND_MESSAGE_V2 (310, Java's),
SEND_BATCH_MESSAGE (320), END_TRANSACTION (37) and CONSUMER_SEND_MSG_BACK (36).

A message is stored as the producer sent it: its properties text, flag, born time and the
compression bits of its sysFlag (a compressed body stays compressed; consumers inflate it).
The broker adds a UNIQ_KEY when the producer sent none. ``DELAY`` goes through the delay
levels, ``TRAN_MSG`` makes a half message, and everything else through
:meth:`Broker.put_messages`, the one write path every protocol shares.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from rmq_spark.broker import retry
from rmq_spark.broker.core import Broker
from rmq_spark.broker.group_commit import GroupCommit
from rmq_spark.broker.remoting.answers import Refusal, failure_reply
from rmq_spark.broker.send import RoundRobin, UniqueIdGenerator
from rmq_spark.broker.status import Workers
from rmq_spark.codec import properties as props
from rmq_spark.codec.record import (
    decode_record,
    offset_msg_id,
    offset_msg_id_prefix,
    offset_msg_ids,
)
from rmq_spark.errors import InvalidArgumentError, NotFoundError
from rmq_spark.names import RETRY_PREFIX, SCHEDULE_TOPIC, validate_group, validate_topic
from rmq_spark.remoting import headers
from rmq_spark.remoting.codes import RequestCode, ResponseCode
from rmq_spark.remoting.frame import Command
from rmq_spark.store import AppendResult
from rmq_spark.store.topics import TopicConfig

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
    topic: str
    bodies: list[bytes]
    properties: list[bytes]
    tags: list[str | None]
    flags: list[int]
    unique_keys: list[str]
    transaction: bool
    delay_level: int


class Producing:
    def __init__(self, broker: Broker, workers: Workers) -> None:
        self._broker = broker
        self._workers = workers
        self._groups = GroupCommit(broker, workers)
        self._round_robin = RoundRobin()
        self._unique_ids = UniqueIdGenerator(broker.store_host)

    def handlers(self):
        return {
            RequestCode.END_TRANSACTION: self.end_transaction,
            RequestCode.CONSUMER_SEND_MSG_BACK: self.send_back,
        }

    def fast_handlers(self):
        return {
            RequestCode.SEND_MESSAGE: functools.partial(self.send, short_names=False),
            RequestCode.SEND_MESSAGE_V2: self.send,
            RequestCode.SEND_BATCH_MESSAGE: self.send,
        }

    def send(self, connection, request: Command, short_names: bool = True) -> bool:
        """Serve a send, parsed once here on the event loop. The common one (a topic that
        exists, no delay, no transaction) goes straight into group commit and is answered
        when its group is stored, with no task or coroutine of its own; the others get a
        task (:meth:`_send_later`) for the work that waits on a worker."""
        try:
            header = headers.send_header(request.ext, short_names=short_names)
            batch = header.batch or request.code == RequestCode.SEND_BATCH_MESSAGE
            plan = self._plan(request, header, batch)
        except InvalidArgumentError as exc:
            self._answer(connection, request, Refusal(ResponseCode.MESSAGE_ILLEGAL, str(exc)))
            return True
        except Exception as exc:  # answered here: nothing may escape into the transport
            self._answer(connection, request, exc)
            return True
        config = self._broker.store.topics.find(plan.topic)
        if config is None or plan.transaction or plan.delay_level or plan.topic[0] == "%":
            connection.spawn(self._send_later(connection, request, header, plan, config))
            return True
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
        return True

    async def _send_later(
        self,
        connection,
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
    def _fields(connection, header: headers.SendHeader, plan: SendPlan) -> dict:
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
        connection,
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
    def _answer(connection, request: Command, answer: Command | BaseException) -> None:
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
        if batch:
            flags, bodies, blobs = headers.decode_batch(bytes(request.body))
        else:
            flags, bodies = [header.flag], [bytes(request.body)]
            blobs = [header.properties.encode()]
        parsed = [props.decode_properties(blob) for blob in blobs]
        unique = self._unique_keys(parsed)
        blobs = [
            blob if fields.get(props.UNIQ_KEY) else _with_unique_key(blob, key)
            for blob, fields, key in zip(blobs, parsed, unique, strict=True)
        ]
        first = parsed[0]
        delay = headers.whole(first, props.DELAY, 0) if not batch else 0
        return SendPlan(
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
            self._broker.store.topics.ensure_system_topic(topic, retry.RETRY_QUEUE_NUMS)
        return self._broker.topic_for_write(topic)

    def _topic(self, name: str) -> str:
        topic = validate_topic(name, allow_system=True)
        if topic == SCHEDULE_TOPIC or (
            topic.startswith("%") and not topic.startswith(RETRY_PREFIX)
        ):
            raise Refusal(
                ResponseCode.NO_PERMISSION,
                f"topic {topic!r} is the broker's own; send to a topic of yours",
            )
        if topic.startswith(RETRY_PREFIX):
            validate_group(topic[len(RETRY_PREFIX) :])
        return topic

    def _unique_keys(self, parsed: list[dict[str, str]]) -> list[str]:
        missing = sum(1 for fields in parsed if not fields.get(props.UNIQ_KEY))
        made = iter(self._unique_ids.next_ids(missing) if missing else ())
        return [fields.get(props.UNIQ_KEY) or next(made) for fields in parsed]

    async def end_transaction(self, connection, request: Command) -> Command:
        ext = request.ext
        resolution = headers.whole(ext, "commitOrRollback", bounds=headers.INT32)
        transaction_id = ext.get("msgId") or ext.get("transactionId")
        if not transaction_id:
            raise InvalidArgumentError("END_TRANSACTION names no msgId or transactionId")
        if resolution not in (TRANSACTION_COMMIT, TRANSACTION_ROLLBACK):
            return request.reply()  # unknown: the broker's check asks again later
        end = functools.partial(
            self._broker.transactions.end,
            transaction_id,
            resolution == TRANSACTION_COMMIT,
            topic=ext.get("topic") or None,
        )
        await self._workers.run(end)
        return request.reply()

    async def send_back(self, connection, request: Command) -> Command:
        ext = request.ext
        group = validate_group(headers.text(ext, "group"))
        physical = headers.whole(ext, "offset")
        delay_level = headers.whole(ext, "delayLevel", 0, headers.INT32)
        max_times = headers.whole(ext, "maxReconsumeTimes", 0, headers.INT32)
        origin_topic = ext.get("originTopic", "")

        send_back = functools.partial(
            _send_back, self._broker, physical, group, origin_topic, delay_level, max_times
        )
        await self._workers.run(send_back)
        return request.reply()


def _send_back(
    broker: Broker, physical: int, group: str, origin_topic: str, level: int, max_times: int
) -> None:
    """RocketMQ's send-back rule (:func:`retry.plan_send_back`): delay level 0 lets the
    broker pick, a negative level dead-letters now."""
    if physical < 0:
        raise InvalidArgumentError(f"offset {physical} must be >= 0")
    record = decode_record(broker.store.read_record(physical))
    if record.physical_offset != physical:
        raise NotFoundError(f"no message starts at commit-log offset {physical}")
    plan = retry.plan_send_back(
        record,
        group=group,
        record_msg_id=offset_msg_id(record.store_host, physical),
        original_topic=origin_topic,
        delay_level=max(level, 0),
        max_reconsume_times=max_times or broker.subscription_groups.retry_max_times(group),
        dead_letter_now=level < 0,
        consumer_reconsume_times=record.reconsume_times,
    )
    retry.write_send_back(broker, record, plan)


def _with_unique_key(blob: bytes, key: str) -> bytes:
    """``blob`` with UNIQ_KEY set to ``key`` (an empty one replaced); a last property
    without its closing separator (the parser takes that too) is closed first."""
    fields = props.decode_properties(blob)
    fields[props.UNIQ_KEY] = key
    return props.encode_properties(fields)
