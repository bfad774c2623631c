"""Reads over remoting: PULL_MESSAGE (11) and LITE_PULL_MESSAGE (361) with long polling,
and the offset calls (14, 15, 29, 30, 31, 32).

A pull's answer body is the stored records back to back, as they lie in the commit log:
the store gathers them and the connection writes that buffer as it is. A pull that finds
nothing new waits on the broker's long-poll notifier (no thread held) until a message its
filter takes is written to its queue, or its suspend timeout, then answers PULL_NOT_FOUND,
well before the 30 s after which RocketMQ's clients give up on a pull.

A pull is filtered by tags or by a SQL92 selector on the messages' properties: the one it
carries (PULL_SUBSCRIPTION, read by the broker core's one decoder on the pull's worker hop,
one that cannot be read answered SUBSCRIPTION_PARSE_FAILED), else the group's, which the
core decides from its live members' heartbeats, whatever protocol each came by
(:mod:`.filters`).
A pull whose messages all failed the filter answers PULL_RETRY_IMMEDIATELY with the next
offset past them, as RocketMQ's broker does.

Offsets are the broker's one consumer-offset table: a Java consumer's commits are what
``rocketlite offsets`` and the Spark source's ``startingOffsets=group`` read, and back.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from dataclasses import dataclass

from rmq_spark.auth.permissions import SUB, Need
from rmq_spark.auth.remoting_rules import RemotingRule, group_need, topic_need
from rmq_spark.broker.core.broker import Broker
from rmq_spark.broker.core.messaging import GetResult, Read
from rmq_spark.broker.remoting.answers import Refusal
from rmq_spark.broker.remoting.endpoint import Endpoint
from rmq_spark.broker.remoting.filters import group_read, refusal
from rmq_spark.broker.remoting.server import Connection
from rmq_spark.broker.workers import Workers
from rmq_spark.errors import InvalidArgumentError, NotFoundError, RocketliteError
from rmq_spark.filter import TAG, Selector
from rmq_spark.names import RETRY_PREFIX, retry_topic, validate_group, validate_topic
from rmq_spark.structs import PullStatus
from rmq_spark.wire.remoting import codes
from rmq_spark.wire.remoting.codes import RequestCode, ResponseCode
from rmq_spark.wire.remoting.frame import Command
from rmq_spark.wire.remoting.headers import INT32, encode_sizes, text, whole

#: rocketlite's own clients ask for the records' sizes with this field ("true"), and get
#: them in it (see rmq_spark.wire.remoting.headers.encode_sizes); RocketMQ's clients never do
SIZES_FIELD = "rocketliteSizes"
#: a held pull answers this long before the client's own 30 s timeout at the latest
MAX_SUSPEND_MS = 25_000
DEFAULT_PULL_BYTES = 4 << 20
#: an answer of this plus one message of the largest size stays under the 16 MiB frame
#: limit of RocketMQ's clients
MAX_PULL_BYTES = 8 << 20

_STATUS = {
    PullStatus.FOUND: (ResponseCode.SUCCESS, "FOUND"),
    PullStatus.NO_NEW_MSG: (ResponseCode.PULL_NOT_FOUND, "OFFSET_OVERFLOW_ONE"),
    PullStatus.NO_MATCHED_MSG: (ResponseCode.PULL_RETRY_IMMEDIATELY, "NO_MATCHED_MESSAGE"),
    PullStatus.OFFSET_ILLEGAL: (ResponseCode.PULL_OFFSET_MOVED, "OFFSET_ILLEGAL"),
}


@dataclass(frozen=True)
class PullRequest:
    group: str
    topic: str
    queue_id: int
    offset: int
    sys_flag: int
    max_count: int
    max_bytes: int
    #: whether the pull carries its subscription (PULL_SUBSCRIPTION); else the broker
    #: uses the group's
    carries_subscription: bool
    #: the carried subscription's expression type ("TAG", "SQL92", ...) and text, read on
    #: the pull's worker
    expression_type: str
    expression: str
    #: the version of the client's subscription (subVersion), 0 when not sent
    sub_version: int
    #: the offset to commit with the pull (PULL_COMMIT_OFFSET), else None
    commit: int | None
    suspend_ms: int
    sizes: bool


@dataclass(frozen=True)
class QueueRequest:
    """A request about one queue: its group ("" when it names none) and extra fields."""

    group: str
    topic: str
    queue_id: int
    #: the request's one number beside the queue: commitOffset, timestamp (or 0)
    number: int = 0
    flag: bool = False


def _queue_needs(value: PullRequest | QueueRequest) -> list[Need]:
    return [*topic_need(value.topic, SUB), *group_need(value.group)]


_QUEUE = RemotingRule(needs=_queue_needs)


class Consuming:
    def __init__(self, broker: Broker, workers: Workers) -> None:
        self._broker = broker
        self._core = broker.messaging
        self._workers = workers

    def endpoints(self) -> dict[int, Endpoint]:
        code = RequestCode
        return {
            code.PULL_MESSAGE: Endpoint(self.pull, _QUEUE, decode=self.decode_pull),
            code.LITE_PULL_MESSAGE: Endpoint(self.pull, _QUEUE, decode=self.decode_pull),
            code.QUERY_CONSUMER_OFFSET: Endpoint(self.query_offset, _QUEUE, decode=_offset_query),
            code.UPDATE_CONSUMER_OFFSET: Endpoint(self.update_offset, _QUEUE, decode=_commit),
            code.GET_MAX_OFFSET: Endpoint(self.max_offset, _QUEUE, decode=_queue),
            code.GET_MIN_OFFSET: Endpoint(self.min_offset, _QUEUE, decode=_queue),
            code.SEARCH_OFFSET_BY_TIMESTAMP: Endpoint(self.search_offset, _QUEUE, decode=_search),
            code.GET_EARLIEST_MSG_STORETIME: Endpoint(self.earliest_time, _QUEUE, decode=_queue),
        }

    # -- pulls ------------------------------------------------------------------------------

    def decode_pull(self, request: Command) -> PullRequest:
        ext = request.ext
        group, topic, queue_id = _group_queue(ext)
        sys_flag = whole(ext, "sysFlag", 0, INT32)
        config = self._broker.config
        max_count = min(max(whole(ext, "maxMsgNums", 32, INT32), 1), config.max_pull_messages)
        max_bytes = whole(ext, "maxMsgBytes", 0, INT32) or DEFAULT_PULL_BYTES
        carries = bool(sys_flag & codes.PULL_SUBSCRIPTION)
        commit = None
        if sys_flag & codes.PULL_COMMIT_OFFSET:
            commit = whole(ext, "commitOffset", -1)
        return PullRequest(
            group=group,
            topic=topic,
            queue_id=queue_id,
            offset=whole(ext, "queueOffset"),
            sys_flag=sys_flag,
            max_count=max_count,
            max_bytes=min(max(max_bytes, 1), config.max_pull_bytes, MAX_PULL_BYTES),
            carries_subscription=carries,
            expression_type=(ext.get("expressionType") or TAG).upper(),
            expression=ext.get("subscription") or "",
            sub_version=whole(ext, "subVersion", 0),
            commit=commit,
            suspend_ms=max(
                min(whole(ext, "suspendTimeoutMillis", 15_000, INT32), MAX_SUSPEND_MS), 0
            ),
            sizes=ext.get(SIZES_FIELD) == "true",
        )

    async def pull(self, connection: Connection, request: Command, pull: PullRequest) -> Command:
        group, topic, queue_id, offset = pull.group, pull.topic, pull.queue_id, pull.offset
        tag_codes, selector, carried = None, None, None
        if pull.carries_subscription:
            carried = (pull.expression_type, pull.expression)
        else:
            tag_codes, selector = self._group_filter(group, topic, pull.sub_version)
        self._check_pull(topic, queue_id)
        # below every queue's minimum: answered as OFFSET_MOVED
        read = Read(
            topic, queue_id, max(offset, -1), pull.max_count, pull.max_bytes, tag_codes,
            selector, group,
        )  # fmt: skip
        read, result = await self._workers.run(self._read, group, read, pull.commit, carried)
        if result.status == PullStatus.NO_NEW_MSG and pull.sys_flag & codes.PULL_SUSPEND:
            result = await self._core.hold(self._workers.run, read, result, pull.suspend_ms / 1000)
        code, remark = _STATUS[result.status]
        response = request.reply(
            code,
            remark,
            suggestWhichBrokerId="0",
            nextBeginOffset=str(result.next_begin_offset),
            minOffset=str(result.min_offset),
            maxOffset=str(result.max_offset),
        )
        response.body = result.data
        if pull.sizes and result.sizes is not None:
            response.ext[SIZES_FIELD] = encode_sizes(result.sizes)
        self._broker.pull_calls += 1
        self._broker.messages_pulled += result.count
        return response

    def _group_filter(
        self, group: str, topic: str, sub_version: int
    ) -> tuple[list[int] | None, Selector | None]:
        """The tag codes or the selector of the group's subscription to ``topic``: its live
        members' newest, from heartbeats of any protocol (RocketMQ's push consumer pulls
        without its own). Every member reads its group's retry topic."""
        found = self._broker.consumers.group_filter(group, topic)
        if found is not None:
            return group_read(found, sub_version, group, topic)
        if topic.startswith(RETRY_PREFIX) and topic == retry_topic(group):
            return None, None
        raise Refusal(
            ResponseCode.SUBSCRIPTION_NOT_EXIST,
            f"the consumer's subscription of {topic!r} in group {group!r} is not "
            "known yet (no heartbeat names it)",
        )

    def _check_pull(self, topic: str, queue_id: int) -> None:
        config = self._core.topic(topic)
        if config is None:
            raise Refusal(
                ResponseCode.TOPIC_NOT_EXIST,
                f"topic[{topic}] not exist, apply first please!",
            )
        try:
            self._core.check_readable(config, queue_id)
        except NotFoundError as exc:
            raise Refusal(ResponseCode.INVALID_PARAMETER, str(exc)) from None
        if queue_id < 0:
            raise Refusal(ResponseCode.INVALID_PARAMETER, f"queueId {queue_id} is negative")

    def _read(
        self, group: str, read: Read, commit: int | None, carried: tuple[str, str] | None
    ) -> tuple[Read, GetResult]:
        """Read the subscription the pull carries (``carried``: its type and text: tag
        codes, a SQL92 selector compiled), commit the offset it carries, then read: one hop
        to a worker. The read, filter and all, is returned for a long poll to read again."""
        if carried is not None:
            kind, expression = carried
            try:
                found = self._core.read_filter(kind, expression)
            except RocketliteError as exc:
                raise refusal(kind, exc) from None
            read = dataclasses.replace(read, tag_codes=found.tag_codes, selector=found.selector)
        if commit is not None and commit >= 0:
            self._core.commit_offsets(group, read.topic, {read.queue_id: commit})
        return read, self._core.read(read)

    # -- offsets ----------------------------------------------------------------------------

    async def query_offset(
        self, connection: Connection, request: Command, query: QueueRequest
    ) -> Command:
        group, topic, queue_id = query.group, query.topic, query.queue_id
        offset = self._core.committed(group, topic, queue_id)
        if offset is None:
            # RocketMQ 4.9's rule: a group with no offset starts at 0 while nothing of the
            # queue was deleted yet (a new group reads a young queue from its start).
            if query.flag and self._core.min_offset(topic, queue_id) == 0:
                offset = 0
            else:
                raise Refusal(
                    ResponseCode.QUERY_NOT_FOUND,
                    "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first",
                )
        return request.reply(offset=str(offset))

    async def update_offset(
        self, connection: Connection, request: Command, commit: QueueRequest
    ) -> Command:
        topic, queue_id, offset = commit.topic, commit.queue_id, commit.number
        if queue_id < 0 or offset < 0:
            raise InvalidArgumentError(f"queueId {queue_id} and commitOffset {offset} must be >= 0")
        if self._core.topic(topic) is None:
            raise Refusal(ResponseCode.TOPIC_NOT_EXIST, f"topic {topic!r} does not exist")
        write = functools.partial(
            self._core.commit_offsets, commit.group, topic, {queue_id: offset}
        )
        await self._workers.run(write)
        return request.reply()

    async def max_offset(
        self, connection: Connection, request: Command, queue: QueueRequest
    ) -> Command:
        self._check_queue(queue)
        return request.reply(offset=str(self._core.max_offset(queue.topic, queue.queue_id)))

    async def min_offset(
        self, connection: Connection, request: Command, queue: QueueRequest
    ) -> Command:
        self._check_queue(queue)
        return request.reply(offset=str(self._core.min_offset(queue.topic, queue.queue_id)))

    async def search_offset(
        self, connection: Connection, request: Command, search: QueueRequest
    ) -> Command:
        self._check_queue(search)
        topic, queue_id, timestamp = search.topic, search.queue_id, search.number
        core = self._core

        def find() -> int:
            if not search.flag:
                return core.offset_at(topic, queue_id, timestamp)
            return core.last_offset_at(topic, queue_id, timestamp)

        return request.reply(offset=str(await self._workers.run(find)))

    async def earliest_time(
        self, connection: Connection, request: Command, queue: QueueRequest
    ) -> Command:
        self._check_queue(queue)
        topic, queue_id = queue.topic, queue.queue_id
        core = self._core

        def earliest() -> int:
            stored = core.queue_store_timestamp(topic, queue_id, core.min_offset(topic, queue_id))
            if stored is None:
                raise Refusal(ResponseCode.SYSTEM_ERROR, f"queue {queue_id} of {topic!r} is empty")
            return stored

        return request.reply(timestamp=str(await self._workers.run(earliest)))

    def _check_queue(self, queue: QueueRequest) -> None:
        if self._core.topic(queue.topic) is None:
            raise Refusal(ResponseCode.TOPIC_NOT_EXIST, f"topic {queue.topic!r} does not exist")
        if queue.queue_id < 0:
            raise InvalidArgumentError(f"queueId {queue.queue_id} must be >= 0")


def _queue(request: Command) -> QueueRequest:
    return QueueRequest("", *_topic_queue(request.ext))


def _offset_query(request: Command) -> QueueRequest:
    zero_if_none = request.ext.get("setZeroIfNotFound", "true").lower() != "false"
    return QueueRequest(*_group_queue(request.ext), flag=zero_if_none)


def _commit(request: Command) -> QueueRequest:
    return QueueRequest(*_group_queue(request.ext), number=whole(request.ext, "commitOffset"))


def _search(request: Command) -> QueueRequest:
    ext = request.ext
    upper = ext.get("boundaryType", "lower").lower() == "upper"
    return QueueRequest("", *_topic_queue(ext), number=whole(ext, "timestamp"), flag=upper)


def _topic_queue(ext: Mapping[str, str]) -> tuple[str, int]:
    """The topic and queue id a request names (checked as names and int32)."""
    return validate_topic(text(ext, "topic"), allow_system=True), whole(
        ext, "queueId", bounds=INT32
    )


def _group_queue(ext: Mapping[str, str]) -> tuple[str, str, int]:
    """The consumer group, topic and queue id a request names."""
    return (validate_group(text(ext, "consumerGroup")), *_topic_queue(ext))
