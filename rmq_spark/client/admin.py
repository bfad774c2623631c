"""Administration: topics on every broker, broker facts, queue and consumer-group offsets."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, cast

import pyarrow as pa

from rmq_spark.client import offsets as offset_rpc
from rmq_spark.client.cluster import Cluster
from rmq_spark.client.connection import ClientConfig, Connection
from rmq_spark.client.endpoints import Endpoints
from rmq_spark.client.offsets import CommittedOffset, QueueOffsets, QueueProgress
from rmq_spark.client.route import TopicRoute
from rmq_spark.codec.arrow_decode import decode_records
from rmq_spark.codec.record import parse_offset_msg_id
from rmq_spark.errors import InvalidArgumentError, NotFoundError, RocketliteError
from rmq_spark.names import check_message_type, validate_key_query, validate_topic
from rmq_spark.structs import MessageQueue, Permission
from rmq_spark.wire.proto_gen.rocketlite.v1 import admin_pb2, common_pb2, messaging_pb2

__all__ = ["AclEntryInfo", "Admin", "BrokerInfo", "TopicInfo", "UserInfo"]

_FLUSH_MODE_NAMES = {admin_pb2.FLUSH_MODE_ASYNC: "ASYNC", admin_pb2.FLUSH_MODE_SYNC: "SYNC"}


@dataclass(frozen=True)
class TopicInfo:
    """A topic's configuration on one broker."""

    topic: str
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: Permission
    #: what RocketMQ 5 producers may send: NORMAL, FIFO, DELAY, TRANSACTION or MIXED
    message_type: str = "NORMAL"

    @classmethod
    def from_pb(cls, broker_name: str, pb: admin_pb2.TopicConfig) -> TopicInfo:
        return cls(
            pb.topic,
            broker_name,
            pb.read_queue_nums,
            pb.write_queue_nums,
            Permission(pb.perm),
            pb.message_type or "NORMAL",
        )


@dataclass(frozen=True)
class BrokerInfo:
    """What a broker says about itself (``GetBrokerInfo``); ``limits``, ``store_stats`` and
    ``server_stats`` are plain dicts with the protocol's field names."""

    broker_name: str
    endpoint: str
    advertised_endpoint: str
    version: str
    store_host: str
    broker_perm: Permission
    flush_mode: str
    start_timestamp_ms: int
    now_timestamp_ms: int
    limits: dict[str, int]
    store_stats: dict[str, Any]
    server_stats: dict[str, Any]

    @classmethod
    def from_pb(cls, endpoint: str, pb: admin_pb2.GetBrokerInfoResponse) -> BrokerInfo:
        return cls(
            broker_name=pb.broker_name,
            endpoint=endpoint,
            advertised_endpoint=pb.endpoint,
            version=pb.version,
            store_host=pb.store_host,
            broker_perm=Permission(pb.broker_perm),
            flush_mode=_FLUSH_MODE_NAMES.get(pb.flush_mode, "UNSPECIFIED"),
            start_timestamp_ms=pb.start_timestamp_ms,
            now_timestamp_ms=pb.now_timestamp_ms,
            limits=_fields(pb.limits),
            store_stats=_fields(pb.store_stats),
            server_stats=_fields(pb.server_stats),
        )


@dataclass(frozen=True)
class UserInfo:
    """A user of one broker's ACL file (never its secret)."""

    username: str
    broker_name: str
    user_type: str  # "Super" | "Normal"
    enabled: bool
    #: where the secret comes from: "password" (inline), "secretFile" or "secretEnv"
    secret_source: str


@dataclass(frozen=True)
class AclEntryInfo:
    """One entry of a user's ACL on one broker."""

    username: str
    broker_name: str
    resource: str
    actions: tuple[str, ...]
    decision: str  # "Allow" | "Deny"
    source_ips: tuple[str, ...] = ()


def _fields(pb: Any) -> dict[str, Any]:
    return {f.name: getattr(pb, f.name) for f in pb.DESCRIPTOR.fields}


def _check_queue_count(name: str, value: int | None) -> None:
    if value is not None and (not isinstance(value, int) or not 1 <= value <= 1024):
        raise InvalidArgumentError(f"{name}={value!r} must be a queue count 1..1024")


def _check_perm(perm: int | None) -> None:
    if perm is not None and perm not in (2, 4, 6):
        raise InvalidArgumentError(f"perm={perm!r} must be 2 (write), 4 (read) or 6 (both)")


class Admin:
    """Topics, brokers and offsets across a set of brokers.

    >>> with Admin("127.0.0.1:10911,127.0.0.1:10912") as admin:     # doctest: +SKIP
    ...     admin.create_topic("orders", queues=4)                 # on every broker
    ...     admin.describe_topic("orders").readable                # 8 queues, sorted
    """

    def __init__(
        self, endpoints: str | Iterable[str] | Endpoints, config: ClientConfig | None = None
    ) -> None:
        self.config = config or ClientConfig()
        self._cluster = Cluster(endpoints, self.config)

    # --- messages ------------------------------------------------------------------------

    def view_message(self, offset_msg_id: str) -> tuple[pa.RecordBatch, str]:
        """The message named by an offset message id, decoded (one row), and the name of
        the broker that stores it. The id names the store host; every endpoint is asked
        because an advertised address may differ from the one dialled."""
        parse_offset_msg_id(offset_msg_id)  # a clear error for a malformed id, before any call
        request = messaging_pb2.ViewMessageRequest(
            message=messaging_pb2.MessageRef(offset_msg_id=offset_msg_id)
        )
        answers = self._cluster.fan_out(lambda conn: conn.call(conn.messaging.ViewMessage, request))
        for endpoint, answer in sorted(answers.items()):
            if not isinstance(answer, RocketliteError):
                return decode_records(answer.record), self._cluster.broker_name_of(endpoint)
        errors = [a for a in answers.values() if not isinstance(a, NotFoundError)]
        if errors:
            raise errors[0]
        raise NotFoundError(
            f"no broker of {sorted(answers)} stores message {offset_msg_id!r}; "
            "is it an offset message id (offsetMsgId) of these brokers?"
        )

    def query_messages(
        self,
        topic: str,
        key: str,
        *,
        max_count: int = 64,
        begin_ms: int | None = None,
        end_ms: int | None = None,
    ) -> list[tuple[pa.RecordBatch, str]]:
        """The messages of ``topic`` stored under ``key``: one of their KEYS, or their
        UNIQ_KEY (``SendResult.msg_id``), found in the message index of every broker of the
        topic. Per broker that holds some, in broker-name order: the messages decoded
        (newest first, at most ``max_count`` per broker, as RocketMQ's maxNum counts) and
        the broker's name. ``begin_ms`` / ``end_ms`` bound the store time (epoch ms,
        inclusive; the index keeps it to the second). A key is findable a moment (about
        200 ms) after its message is stored. StoreError when a broker keeps no index.

        >>> for batch, broker in admin.query_messages("orders", "order-1"):  # doctest: +SKIP
        ...     print(broker, batch.column("body").to_pylist())
        """
        validate_key_query(topic, key, max_count, begin_ms, end_ms)
        request = messaging_pb2.QueryMessagesByKeyRequest(
            topic=topic, key=key, max_count=max_count, begin_timestamp_ms=begin_ms or 0
        )
        if end_ms is not None:
            request.end_timestamp_ms = end_ms
        brokers = sorted(self.describe_topic(topic).brokers)
        answers = self._on_brokers(
            brokers,
            lambda conn: conn.call(conn.messaging.QueryMessagesByKey, request),
            f"look-up of key {key!r} in topic {topic!r}",
        )
        return [
            (decode_records(b"".join(answer.records)), name)
            for name, answer in sorted(answers.items())
            if answer.records
        ]

    # --- topics --------------------------------------------------------------------------

    def create_topic(
        self,
        topic: str,
        queues: int = 4,
        *,
        broker: str | Iterable[str] | None = None,
        perm: int = 6,
        read_queues: int | None = None,
        write_queues: int | None = None,
        message_type: str = "NORMAL",
    ) -> dict[str, TopicInfo]:
        """Create ``topic`` with ``queues`` read and write queues on every broker (or the
        brokers named); returns the stored config per broker name. Creating it again with
        the same config is a no-op; a different one is AlreadyExistsError.
        ``message_type`` (NORMAL, FIFO, DELAY, TRANSACTION, MIXED) is what RocketMQ 5
        producers may send to it."""
        validate_topic(topic)
        check_message_type(message_type)
        for name, value in (("queues", queues), ("read_queues", read_queues),
                            ("write_queues", write_queues)):  # fmt: skip
            _check_queue_count(name, value)
        _check_perm(perm)
        request = admin_pb2.CreateTopicRequest(
            topic=topic,
            read_queue_nums=read_queues or queues,
            write_queue_nums=write_queues or queues,
            perm=cast(common_pb2.Permission, perm),
            message_type=message_type,
        )
        answers = self._on_brokers(
            broker,
            lambda conn: conn.call(conn.admin.CreateTopic, request),
            f"create topic {topic!r}",
        )
        self._cluster.routes.invalidate(topic)
        return {name: TopicInfo.from_pb(name, a.topic) for name, a in answers.items()}

    def update_topic(
        self,
        topic: str,
        *,
        queues: int | None = None,
        read_queues: int | None = None,
        write_queues: int | None = None,
        perm: int | None = None,
        broker: str | Iterable[str] | None = None,
        message_type: str | None = None,
    ) -> dict[str, TopicInfo]:
        """Change queue counts, permission or message type on every broker that has the
        topic (or those named). ``queues`` sets both counts; unset values stay as they are."""
        if message_type is not None:
            check_message_type(message_type)
        for name, value in (("queues", queues), ("read_queues", read_queues),
                            ("write_queues", write_queues)):  # fmt: skip
            _check_queue_count(name, value)
        _check_perm(perm)
        request = admin_pb2.UpdateTopicRequest(
            topic=topic,
            read_queue_nums=read_queues or queues,
            write_queue_nums=write_queues or queues,
            perm=cast("common_pb2.Permission | None", perm),
            message_type=message_type,
        )
        brokers = broker if broker is not None else list(self.describe_topic(topic).brokers)
        answers = self._on_brokers(
            brokers,
            lambda conn: conn.call(conn.admin.UpdateTopic, request),
            f"update topic {topic!r}",
        )
        self._cluster.routes.invalidate(topic)
        return {name: TopicInfo.from_pb(name, a.topic) for name, a in answers.items()}

    def delete_topic(self, topic: str, *, broker: str | Iterable[str] | None = None) -> list[str]:
        """Delete the topic (its queues and every group's offsets on it) from every broker
        that has it, or those named; returns the broker names it was deleted from."""
        brokers = broker if broker is not None else list(self.describe_topic(topic).brokers)
        request = admin_pb2.DeleteTopicRequest(topic=topic)
        answers = self._on_brokers(
            brokers,
            lambda conn: conn.call(conn.admin.DeleteTopic, request),
            f"delete topic {topic!r}",
        )
        self._cluster.routes.invalidate(topic)
        return sorted(answers)

    def list_topics(self, include_system: bool = False) -> dict[str, list[TopicInfo]]:
        """Every topic on every broker: topic name -> its config on each broker, sorted."""
        request = admin_pb2.ListTopicsRequest(include_system_topics=include_system)
        answers = self._on_brokers(
            None, lambda conn: conn.call(conn.admin.ListTopics, request), "list topics"
        )
        merged: dict[str, list[TopicInfo]] = {}
        for name, answer in sorted(answers.items()):
            for pb in answer.topics:
                merged.setdefault(pb.topic, []).append(TopicInfo.from_pb(name, pb))
        return dict(sorted(merged.items()))

    def describe_topic(self, topic: str) -> TopicRoute:
        """The topic's merged route, fetched now (NotFoundError when no broker has it)."""
        return self._cluster.routes.refresh(topic)

    def broker_info(self) -> dict[str, BrokerInfo]:
        """What every reachable broker says about itself, by broker name."""
        found = self._cluster.discover_brokers()
        infos = [BrokerInfo.from_pb(ep, pb) for ep, pb in found.items()]
        return {info.broker_name: info for info in sorted(infos, key=lambda i: i.broker_name)}

    # --- users and grants (brokers started with --acl; super users only) -----------------

    def create_user(self, username: str, secret: str, *, super_user: bool = False) -> list[str]:
        """Add a user to every broker's ACL file; returns the broker names."""
        request = admin_pb2.CreateUserRequest(
            username=username,
            secret=secret,
            user_type=admin_pb2.USER_TYPE_SUPER if super_user else admin_pb2.USER_TYPE_NORMAL,
        )
        answers = self._on_brokers(
            None,
            lambda conn: conn.call(conn.admin.CreateUser, request),
            f"create user {username!r}",
        )
        return sorted(answers)

    def delete_user(self, username: str) -> list[str]:
        """Remove a user and its grants from every broker's ACL file."""
        request = admin_pb2.DeleteUserRequest(username=username)
        answers = self._on_brokers(
            None,
            lambda conn: conn.call(conn.admin.DeleteUser, request),
            f"delete user {username!r}",
        )
        return sorted(answers)

    def list_users(self) -> list[UserInfo]:
        """Every user of every broker, sorted by name then broker (no secrets)."""
        answers = self._on_brokers(
            None,
            lambda conn: conn.call(conn.admin.ListUsers, admin_pb2.ListUsersRequest()),
            "list users",
        )
        rows = [
            UserInfo(
                u.username,
                name,
                "Super" if u.user_type == admin_pb2.USER_TYPE_SUPER else "Normal",
                u.enabled,
                u.secret_source,
            )
            for name, answer in answers.items()
            for u in answer.users
        ]
        return sorted(rows, key=lambda r: (r.username, r.broker_name))

    def grant(
        self,
        username: str,
        resource: str,
        actions: Iterable[str],
        *,
        deny: bool = False,
        source_ips: Iterable[str] = (),
    ) -> list[str]:
        """Set the user's entry for ``resource`` (``Topic:orders``, ``Group:billing``,
        ``Topic:orders-*``, ...) on every broker: ``actions`` (Pub, Sub, Create, Update,
        Delete, Get, List, Any, All) allowed, or denied with ``deny``, from ``source_ips``
        (CIDRs; empty = anywhere). An earlier entry for the same resource is replaced."""
        request = admin_pb2.GrantAclRequest(
            username=username,
            resource=resource,
            actions=list(actions),
            decision=admin_pb2.ACL_DECISION_DENY if deny else admin_pb2.ACL_DECISION_ALLOW,
            source_ips=list(source_ips),
        )
        answers = self._on_brokers(
            None,
            lambda conn: conn.call(conn.admin.GrantAcl, request),
            f"grant {resource} to {username!r}",
        )
        return sorted(answers)

    def revoke(self, username: str, resource: str) -> list[str]:
        """Remove the user's entries for ``resource`` on every broker."""
        request = admin_pb2.RevokeAclRequest(username=username, resource=resource)
        answers = self._on_brokers(
            None,
            lambda conn: conn.call(conn.admin.RevokeAcl, request),
            f"revoke {resource} from {username!r}",
        )
        return sorted(answers)

    def list_acls(self, username: str | None = None) -> list[AclEntryInfo]:
        """The entries of ``username`` (or of every user) on every broker."""
        request = admin_pb2.ListAclsRequest(username=username or "")
        answers = self._on_brokers(
            None, lambda conn: conn.call(conn.admin.ListAcls, request), "list ACLs"
        )
        rows = [
            AclEntryInfo(
                acl.username,
                name,
                e.resource,
                tuple(e.actions),
                "Deny" if e.decision == admin_pb2.ACL_DECISION_DENY else "Allow",
                tuple(e.source_ips),
            )
            for name, answer in answers.items()
            for acl in answer.acls
            for e in acl.entries
        ]
        return sorted(rows, key=lambda r: (r.username, r.broker_name))

    # --- offsets -------------------------------------------------------------------------

    def query_offsets(
        self, queues: Iterable[MessageQueue], timestamp_ms: int | None = None
    ) -> dict[MessageQueue, QueueOffsets]:
        """Min and max offset of each queue, plus the first offset stored at or after
        ``timestamp_ms`` (broker's clock) when given."""
        return offset_rpc.query_queue_offsets(self._cluster, queues, timestamp_ms)

    def consumer_offsets(self, group: str, topic: str) -> dict[MessageQueue, int]:
        """The group's committed offsets on the topic's queues; never-committed queues are
        absent."""
        return offset_rpc.query_committed(self._cluster, group, self.describe_topic(topic).queues)

    def consumer_progress(self, group: str, topic: str | None = None) -> list[QueueProgress]:
        """Per queue: broker min / max, the group's committed offset and the lag."""
        return offset_rpc.consumer_progress(self._cluster, group, topic)

    def commit_offsets(
        self, group: str, offsets: Mapping[MessageQueue, int], increase_only: bool = False
    ) -> dict[MessageQueue, CommittedOffset]:
        """Set the group's offsets (a reset by default; ``increase_only`` keeps higher ones)."""
        return offset_rpc.commit_offsets(self._cluster, group, offsets, increase_only=increase_only)

    # --- plumbing ------------------------------------------------------------------------

    def _on_brokers(
        self,
        brokers: str | Iterable[str] | None,
        fn: Callable[[Connection], Any],
        what: str,
    ) -> dict[str, Any]:
        """Run ``fn`` on the named brokers (all endpoints when None): answers by broker
        name. Fails whole, naming the brokers that failed and those already done."""
        if brokers is None:
            answers = self._cluster.fan_out(fn)
        else:
            names = [brokers] if isinstance(brokers, str) else list(brokers)
            endpoints = [self._cluster.endpoint_of(name) for name in names]
            answers = {}
            for ep in endpoints:
                try:
                    answers[ep] = fn(self._cluster.connection(ep))
                except RocketliteError as exc:
                    answers[ep] = exc
        failed = {ep: a for ep, a in answers.items() if isinstance(a, RocketliteError)}
        done = {ep: a for ep, a in answers.items() if ep not in failed}
        by_name = {self._broker_name(ep, a): a for ep, a in done.items()}
        if failed:
            first = next(iter(failed.values()))
            detail = "; ".join(f"{ep}: {e}" for ep, e in failed.items())
            succeeded = f" (done on {', '.join(sorted(by_name))})" if by_name else ""
            error = type(first)(f"{what} failed on {detail}{succeeded}")
            raise error from first
        return by_name

    def _broker_name(self, endpoint: str, answer: Any) -> str:
        name = getattr(answer, "broker_name", "")  # only some answers carry it
        if name:
            self._cluster.note_broker(name, endpoint)
            return name
        return self._cluster.broker_name_of(endpoint)

    def close(self) -> None:
        self._cluster.close()

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
