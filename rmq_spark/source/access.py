"""How the driver reaches the brokers: rocketlite's gRPC endpoints (option ``endpoints``) or a
RocketMQ name server over the remoting protocol (option ``nameServer``: an Apache RocketMQ
4.9+/5.x cluster, or rocketlite's remoting port).

Planning and offsets are written once, against :class:`BrokerAccess`; each kind of access
answers the same five questions (a store directory read without a broker, option
``storePath``, answers them too: :mod:`rmq_spark.source.store_access`): what the brokers
hold (a
:class:`~rmq_spark.source.discovery.Snapshot`), a group's committed offsets, offsets by
time, committing a group's offsets, and the bytes of offset ranges (gRPC only: RocketMQ's
protocol has no call for it, so ``maxBytesPerTrigger`` needs ``endpoints``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

import pyarrow as pa

from rmq_spark.client.cluster import Cluster
from rmq_spark.client.connection import NO_RETRY
from rmq_spark.client.offsets import QueueOffsets, commit_offsets, query_committed
from rmq_spark.client.remoting import RemotingClient
from rmq_spark.client.remoting.replicas import MASTER_ID
from rmq_spark.codec.arrow_decode import decode_records
from rmq_spark.errors import NotFoundError, RocketliteError, UnavailableError
from rmq_spark.source import discovery
from rmq_spark.source.discovery import BrokerSnapshot, Snapshot, client_config, describe_queues
from rmq_spark.source.key_lookup import MAX_PER_BROKER
from rmq_spark.source.options import SourceOptions
from rmq_spark.source.sql_filter import SQL92, refuses_sql92, task_only_reason
from rmq_spark.structs import MessageQueue
from rmq_spark.wire.proto_gen.rocketlite.v1 import messaging_pb2
from rmq_spark.wire.v1 import mq_to_pb

log = logging.getLogger("rmq_spark.source")

#: parallel calls to the brokers of a name server (each queue costs two small calls)
_REMOTING_THREADS = 8


class BrokerAccess(Protocol):
    #: the brokers in words, for messages ("endpoints a, b" / "name server h:9876")
    where: str

    def snapshot(self, options: SourceOptions) -> Snapshot: ...

    def committed(self, group: str, queues: list[MessageQueue]) -> dict[MessageQueue, int]: ...

    def offsets_at(self, timestamps: dict[MessageQueue, int]) -> dict[MessageQueue, int]: ...

    def commit(self, group: str, offsets: Mapping[MessageQueue, int]) -> None: ...

    def endpoint_of(self, broker_name: str) -> str: ...

    #: the most messages a key lookup gets from one broker for one topic
    max_key_matches: int

    def offsets_by_key(
        self, topic: str, key: str, max_count: int
    ) -> dict[MessageQueue, list[int]]: ...

    def sql92_refusals(self, selector: str, at: Mapping[MessageQueue, int]) -> dict[str, str]:
        """The broker groups of ``at``'s queues that do not apply ``selector`` to pulls, and
        why: one pull of one message at the given offset of one queue of each group."""
        ...

    def close(self) -> None: ...


def refusals_to_probe(at: Mapping[MessageQueue, int]) -> dict[str, tuple[MessageQueue, int]]:
    """One queue of each broker group of ``at`` (the first by name), at its offset."""
    chosen: dict[str, tuple[MessageQueue, int]] = {}
    for mq in sorted(at, key=lambda q: (q.broker_name, q.topic, q.queue_id)):
        chosen.setdefault(mq.broker_name, (mq, at[mq]))
    return chosen


def filter_in_task(
    access: BrokerAccess,
    options: SourceOptions,
    at: Mapping[MessageQueue, int],
    known: dict[str, str | None],
) -> frozenset[str]:
    """The broker groups of ``at`` whose pulls the tasks must filter themselves (option
    sqlFilter on brokers that do not apply SQL92 selectors). Groups are asked once, their
    answers kept in ``known`` (None: the group filters); each refusal is said once."""
    selector = options.selector
    if selector is None or options.store_path is not None:
        return frozenset()
    unknown = {mq: offset for mq, offset in at.items() if mq.broker_name not in known}
    if unknown:
        refused = access.sql92_refusals(selector, unknown)
        for name in sorted({mq.broker_name for mq in unknown}):
            known[name] = refused.get(name)
            if name in refused:
                log.warning(
                    "broker group %s does not apply the SQL92 selector of option sqlFilter "
                    "(%s): its messages are pulled whole and the Spark tasks apply the "
                    "selector (an Apache RocketMQ broker filters with enablePropertyFilter="
                    "true in its broker.conf)",
                    name,
                    refused[name],
                )
    names = {mq.broker_name for mq in at}
    return frozenset(name for name in names if known.get(name) is not None)


def open_access(options: SourceOptions) -> BrokerAccess:
    if options.store_path is not None:
        from rmq_spark.source.store_access import StoreAccess

        return StoreAccess(options)
    if options.name_server is not None:
        client = RemotingClient(options.name_server, client_config(options))
        return RemotingAccess(client, options)
    return GrpcAccess(Cluster(options.endpoints, client_config(options)))


class GrpcAccess:
    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.where = f"endpoints {', '.join(cluster.endpoints)}"

    def snapshot(self, options: SourceOptions) -> Snapshot:
        return discovery.take_snapshot(self.cluster, options)

    def committed(self, group: str, queues: list[MessageQueue]) -> dict[MessageQueue, int]:
        return query_committed(self.cluster, group, queues)

    def offsets_at(self, timestamps: dict[MessageQueue, int]) -> dict[MessageQueue, int]:
        return discovery.offsets_at(self.cluster, timestamps)

    def commit(self, group: str, offsets: Mapping[MessageQueue, int]) -> None:
        commit_offsets(self.cluster, group, offsets, increase_only=False)

    def endpoint_of(self, broker_name: str) -> str:
        return self.cluster.endpoint_of(broker_name)

    max_key_matches = MAX_PER_BROKER

    def offsets_by_key(self, topic: str, key: str, max_count: int) -> dict[MessageQueue, list[int]]:
        """Queue offsets of ``topic``'s messages under ``key``, from every broker's index."""
        request = messaging_pb2.QueryMessagesByKeyRequest(
            topic=topic, key=key, max_count=min(max_count, self.max_key_matches)
        )
        answers = self.cluster.fan_out(
            lambda conn: conn.call(conn.messaging.QueryMessagesByKey, request)
        )
        found: dict[MessageQueue, list[int]] = {}
        for endpoint, answer in sorted(answers.items()):
            if isinstance(answer, NotFoundError):
                continue  # the topic is not on that broker
            if isinstance(answer, RocketliteError):
                raise type(answer)(f"look-up of key {key!r} on {endpoint}: {answer}") from answer
            if answer.records:
                name = self.cluster.broker_name_of(endpoint)
                _add_found(found, decode_records(b"".join(answer.records)), topic, name)
        return found

    def sql92_refusals(self, selector: str, at: Mapping[MessageQueue, int]) -> dict[str, str]:
        refused: dict[str, str] = {}
        for name, (mq, offset) in refusals_to_probe(at).items():
            conn = self.cluster.connection(self.cluster.endpoint_of(name))
            request = messaging_pb2.PullMessagesRequest(
                queue=mq_to_pb(mq),
                queue_offset=offset,
                max_messages=1,
                subscription_expression=selector,
                expression_type=SQL92,
            )
            try:
                conn.call(conn.messaging.PullMessages, request, retry=NO_RETRY)
            except RocketliteError as exc:
                if refuses_sql92(exc):
                    refused[name] = str(exc)
                # anything else: the tasks' pulls meet it and say what is wrong
        return refused

    def close(self) -> None:
        self.cluster.close()


class RemotingAccess:
    def __init__(self, client: RemotingClient, options: SourceOptions) -> None:
        self.client = client
        self._options = options
        self.where = f"name server {';'.join(client.name_servers)}"
        self._pool = ThreadPoolExecutor(_REMOTING_THREADS, thread_name_prefix="rmq-source")

    def snapshot(self, options: SourceOptions) -> Snapshot:
        """Routes of the source's topics, then min and max offset of every readable queue,
        each from a live replica of its broker group (the master, else a slave). A group
        none of whose replicas answers is a failure of the snapshot, named with its
        queues; so is a group the route gives queues but no address."""
        topics = list(options.topics)
        if options.topic_pattern is not None:
            topics = [t for t in self.client.topics() if options.subscribes(t)]
        queues: list[MessageQueue] = []
        for topic in topics:
            try:
                queues += self.client.route(topic).readable
            except NotFoundError:
                continue  # not created yet: no queue to read (as with endpoints)
        answers = list(self._pool.map(self._queue_offsets, queues))
        groups: dict[str, dict[MessageQueue, QueueOffsets]] = {}
        answered_by: dict[str, int] = {}
        missing: dict[str, list[MessageQueue]] = {}
        errors: dict[str, RocketliteError] = {}
        for mq, answer in zip(queues, answers, strict=True):
            name = mq.broker_name
            if isinstance(answer, RocketliteError):
                missing.setdefault(name, []).append(mq)
                errors[name] = answer
            else:
                offsets, broker_id = answer
                groups.setdefault(name, {})[mq] = offsets
                answered_by[name] = max(answered_by.get(name, MASTER_ID), broker_id)
        failures: dict[str, RocketliteError] = {}
        for name, lost in sorted(missing.items()):
            groups.pop(name, None)  # a group answers for all of its queues or not at all
            failures[f"broker group {name}"] = UnavailableError(
                f"{describe_queues(lost)} of broker group {name!r} "
                f"({self._replicas_text(name)}) cannot be read: {errors[name]}"
            )
        for key, error in failures.items():
            log.warning("%s did not answer: %s", key, error)
        for name, broker_id in sorted(answered_by.items()):
            if broker_id != MASTER_ID and name in groups:
                log.warning(
                    "broker group %s is read from its slave (broker id %d): its master is "
                    "down or not in the route",
                    name,
                    broker_id,
                )
        return Snapshot(
            {
                name: BrokerSnapshot(
                    name,
                    self.client.read_address(name) or "?",
                    qs,
                    broker_id=answered_by[name],
                    replicas=self.client.replicas_of(name),
                )
                for name, qs in groups.items()
            },
            failures,
        )

    def _replicas_text(self, broker_name: str) -> str:
        replicas = self.client.replicas_of(broker_name)
        if not replicas:
            return "the route names no address of it"
        return ", ".join(f"broker id {i} at {a}" for i, a in sorted(replicas.items()))

    def _queue_offsets(self, mq: MessageQueue) -> tuple[QueueOffsets, int] | RocketliteError:
        try:
            low, high, broker_id = self.client.queue_offsets(mq)
        except RocketliteError as exc:
            return exc
        return QueueOffsets(low, high), broker_id

    def committed(self, group: str, queues: list[MessageQueue]) -> dict[MessageQueue, int]:
        answers = self._pool.map(lambda mq: self.client.committed_offset(group, mq), queues)
        return {
            mq: offset for mq, offset in zip(queues, answers, strict=True) if offset is not None
        }

    def offsets_at(self, timestamps: dict[MessageQueue, int]) -> dict[MessageQueue, int]:
        found = self._pool.map(lambda item: self.client.offset_at(*item), timestamps.items())
        return dict(zip(timestamps, found, strict=True))

    def commit(self, group: str, offsets: Mapping[MessageQueue, int]) -> None:
        list(self._pool.map(lambda item: self.client.commit_offset(group, *item), offsets.items()))

    def endpoint_of(self, broker_name: str) -> str:
        """Where a broker group is read (its master, else a live slave), from the routes of
        the source's topics (a restarted driver may plan a batch before any snapshot)."""
        address = self.client.read_address(broker_name)
        if address is None:
            self.snapshot(self._options)  # learns the routes of every topic read
            address = self.client.read_address(broker_name)
        if address is None:
            raise NotFoundError(
                f"no route of the source's topics names broker {broker_name!r} at "
                f"{self.where}; is it still registered with the name server?"
            )
        return address

    #: Apache RocketMQ's brokers answer at most 64 messages a query (maxMsgsNumBatch)
    max_key_matches = 64

    def offsets_by_key(self, topic: str, key: str, max_count: int) -> dict[MessageQueue, list[int]]:
        found: dict[MessageQueue, list[int]] = {}
        try:
            answers = self.client.query_messages(
                topic, key, max_count=min(max_count, self.max_key_matches)
            )
        except NotFoundError:
            return found  # no route: the topic does not exist
        for batch, name in answers:
            _add_found(found, batch, topic, name)
        return found

    def sql92_refusals(self, selector: str, at: Mapping[MessageQueue, int]) -> dict[str, str]:
        probes = refusals_to_probe(at)
        reason = task_only_reason(selector)
        if reason is not None:  # not given to brokers at all
            return dict.fromkeys(probes, f"not sent to brokers: {reason}")
        refused: dict[str, str] = {}
        for name, (mq, offset) in probes.items():
            try:
                self.client.pull(
                    mq, offset, max_messages=1, expression=selector, expression_type=SQL92
                )
            except RocketliteError as exc:
                if refuses_sql92(exc):
                    refused[name] = str(exc)
        return refused

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.client.close()


def _add_found(
    found: dict[MessageQueue, list[int]], batch: pa.RecordBatch, topic: str, broker: str
) -> None:
    """Add the queue offsets of a batch of decoded records to ``found``."""
    queue_ids = batch.column("queueId").to_pylist()
    offsets = batch.column("queueOffset").to_pylist()
    for queue_id, offset in zip(queue_ids, offsets, strict=True):
        found.setdefault(MessageQueue(topic, broker, queue_id), []).append(offset)
