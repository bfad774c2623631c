"""AdminService: topics, routes and broker facts (docs/protocol.md, "Admin").

Each broker answers for itself only; clients merge the routes of several brokers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import grpc

import rmq_spark
from rmq_spark.auth import acl_admin
from rmq_spark.broker.core import checks
from rmq_spark.broker.core.broker import Broker
from rmq_spark.broker.core.messaging import TopicConfig
from rmq_spark.broker.core.routes import queue_perm
from rmq_spark.broker.v1.queues import queue_pb
from rmq_spark.broker.v1.status import blocking
from rmq_spark.broker.workers import Workers
from rmq_spark.clock import now_ms
from rmq_spark.errors import StoreError
from rmq_spark.names import check_manageable, validate_topic
from rmq_spark.structs import Permission
from rmq_spark.wire.proto_gen.rocketlite.v1 import admin_pb2, admin_pb2_grpc, common_pb2

if TYPE_CHECKING:
    # loaded when the broker has an ACL (server.create_server)
    from rmq_spark.auth.acl_file import AclFile

_FLUSH_MODES = {"ASYNC": admin_pb2.FLUSH_MODE_ASYNC, "SYNC": admin_pb2.FLUSH_MODE_SYNC}


class AdminServicer(admin_pb2_grpc.AdminServiceServicer):
    def __init__(self, broker: Broker, workers: Workers, acl: AclFile | None = None) -> None:
        self._broker = broker
        self._workers = workers
        #: the broker's AclFile (rmq_spark.auth.acl_file), None without --acl
        self._acl = acl

    @blocking
    def CreateTopic(
        self, request: admin_pb2.CreateTopicRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.CreateTopicResponse:
        topic = check_manageable(validate_topic(request.topic))
        default = self._broker.config.default_topic_queues
        read = checks.non_negative(request.read_queue_nums, "read_queue_nums") or default
        write = checks.non_negative(request.write_queue_nums, "write_queue_nums") or default
        # Same config again is a no-op (retried creates succeed); a different one conflicts.
        config = self._broker.messaging.topics.create(
            topic,
            default,
            read_queues=read,
            write_queues=write,
            perm=request.perm or int(Permission.READ_WRITE),
            message_type=request.message_type or "NORMAL",
        )
        return admin_pb2.CreateTopicResponse(topic=topic_config_pb(config))

    @blocking
    def UpdateTopic(
        self, request: admin_pb2.UpdateTopicRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.UpdateTopicResponse:
        topic = check_manageable(validate_topic(request.topic, allow_system=True))
        config = self._broker.messaging.topics.update(
            topic,
            read_queues=_optional(request, "read_queue_nums"),
            write_queues=_optional(request, "write_queue_nums"),
            perm=_optional(request, "perm"),
            message_type=_optional(request, "message_type"),
        )
        return admin_pb2.UpdateTopicResponse(topic=topic_config_pb(config))

    @blocking
    def DeleteTopic(
        self, request: admin_pb2.DeleteTopicRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.DeleteTopicResponse:
        topic = check_manageable(validate_topic(request.topic, allow_system=True))
        self._broker.messaging.delete_topic(topic)  # held pulls on it answer NOT_FOUND now
        return admin_pb2.DeleteTopicResponse()

    @blocking
    def GetTopicRoute(
        self, request: admin_pb2.GetTopicRouteRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.GetTopicRouteResponse:
        topic = validate_topic(request.topic, allow_system=True)
        config = self._broker.messaging.topics.get(topic)
        broker_perm = self._broker.config.broker_perm
        return admin_pb2.GetTopicRouteResponse(
            topic=topic_config_pb(config),
            broker_name=self._broker.name,
            endpoint=self._broker.endpoint,
            broker_perm=cast("common_pb2.Permission", broker_perm),
            queues=[
                admin_pb2.QueueRoute(
                    queue=queue_pb(self._broker, topic, queue_id),
                    perm=cast("common_pb2.Permission", queue_perm(config, queue_id, broker_perm)),
                )
                for queue_id in range(max(config.read_queue_nums, config.write_queue_nums))
            ],
        )

    @blocking
    def ListTopics(
        self, request: admin_pb2.ListTopicsRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.ListTopicsResponse:
        topics = self._broker.messaging.topics.list()
        if not request.include_system_topics:
            topics = [t for t in topics if not checks.is_system_topic(t.name)]
        return admin_pb2.ListTopicsResponse(
            broker_name=self._broker.name, topics=[topic_config_pb(t) for t in topics]
        )

    @blocking
    def GetBrokerInfo(
        self, request: admin_pb2.GetBrokerInfoRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.GetBrokerInfoResponse:
        broker = self._broker
        config = broker.config
        return admin_pb2.GetBrokerInfoResponse(
            broker_name=broker.name,
            version=rmq_spark.__version__,
            endpoint=broker.endpoint,
            store_host=broker.store_host,
            broker_perm=cast("common_pb2.Permission", config.broker_perm),
            auto_create_topics=config.auto_create_topics,
            default_topic_queues=config.default_topic_queues,
            flush_mode=_FLUSH_MODES[broker.messaging.store_config.flush_mode],
            start_timestamp_ms=broker.start_ms,
            now_timestamp_ms=now_ms(),
            limits=admin_pb2.BrokerLimits(
                max_message_bytes=config.max_message_bytes,
                max_request_bytes=config.max_request_bytes,
                max_response_bytes=config.max_response_bytes,
                max_pull_messages=config.max_pull_messages,
                max_pull_bytes=config.max_pull_bytes,
                max_suspend_timeout_ms=config.max_suspend_timeout_ms,
                commitlog_segment_bytes=broker.messaging.store_config.commitlog_segment_bytes,
            ),
            store_stats=store_stats_pb(broker.messaging.stats()),
            server_stats=admin_pb2.ServerStats(
                held_pulls=broker.notifier.waiting(),
                watch_streams=broker.consumers.watch_streams(),
                pull_calls=broker.pull_calls,
                messages_pulled=broker.messages_pulled,
                short_circuit_reads=broker.short_circuit_reads,
            ),
            short_circuit_socket=broker.short_circuit_socket,
        )

    # --- users and grants: edits of the ACL file ---------------------------------------

    def _acl_file(self) -> AclFile:
        if self._acl is None:
            raise StoreError(
                "this broker runs without access control (no --acl FILE): there are no "
                "users or grants to manage; restart it with --acl FILE"
            )
        return self._acl

    @blocking
    def CreateUser(
        self, request: admin_pb2.CreateUserRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.CreateUserResponse:
        user_type = "Super" if request.user_type == admin_pb2.USER_TYPE_SUPER else "Normal"
        row = self._acl_file().edit(
            lambda data: acl_admin.create_user(data, request.username, request.secret, user_type)
        )
        return admin_pb2.CreateUserResponse(user=_user_pb(row))

    @blocking
    def DeleteUser(
        self, request: admin_pb2.DeleteUserRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.DeleteUserResponse:
        acl = self._acl_file()
        acl_admin.check_username(request.username)
        acl.edit(lambda data: acl_admin.delete_user(data, request.username))
        return admin_pb2.DeleteUserResponse()

    @blocking
    def ListUsers(
        self, request: admin_pb2.ListUsersRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.ListUsersResponse:
        rows = self._acl_file().read(acl_admin.list_users)
        return admin_pb2.ListUsersResponse(users=[_user_pb(r) for r in rows])

    @blocking
    def GrantAcl(
        self, request: admin_pb2.GrantAclRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.GrantAclResponse:
        acl = self._acl_file()
        acl_admin.check_username(request.username)
        decision = "Deny" if request.decision == admin_pb2.ACL_DECISION_DENY else "Allow"
        rows = acl.edit(
            lambda data: acl_admin.grant(
                data,
                request.username,
                request.resource,
                list(request.actions),
                decision,
                list(request.source_ips),
            )
        )
        return admin_pb2.GrantAclResponse(acl=_user_acl_pb(request.username, rows))

    @blocking
    def RevokeAcl(
        self, request: admin_pb2.RevokeAclRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.RevokeAclResponse:
        acl = self._acl_file()
        acl_admin.check_username(request.username)
        rows = acl.edit(lambda data: acl_admin.revoke(data, request.username, request.resource))
        return admin_pb2.RevokeAclResponse(acl=_user_acl_pb(request.username, rows))

    @blocking
    def ListAcls(
        self, request: admin_pb2.ListAclsRequest, context: grpc.aio.ServicerContext
    ) -> admin_pb2.ListAclsResponse:
        found = self._acl_file().read(lambda data: acl_admin.list_acls(data, request.username))
        return admin_pb2.ListAclsResponse(
            acls=[_user_acl_pb(name, rows) for name, rows in found.items()]
        )


def _user_pb(row: acl_admin.UserRow) -> admin_pb2.UserInfo:
    return admin_pb2.UserInfo(
        username=row.username,
        user_type=(
            admin_pb2.USER_TYPE_SUPER if row.user_type == "Super" else admin_pb2.USER_TYPE_NORMAL
        ),
        enabled=row.enabled,
        secret_source=row.secret_source,
    )


def _user_acl_pb(name: str, rows: list[acl_admin.EntryRow]) -> admin_pb2.UserAcl:
    return admin_pb2.UserAcl(
        username=name,
        entries=[
            admin_pb2.AclEntry(
                resource=r.resource,
                actions=r.actions,
                decision=(
                    admin_pb2.ACL_DECISION_DENY
                    if r.decision == "Deny"
                    else admin_pb2.ACL_DECISION_ALLOW
                ),
                source_ips=r.source_ips,
            )
            for r in rows
        ],
    )


def topic_config_pb(config: TopicConfig) -> admin_pb2.TopicConfig:
    return admin_pb2.TopicConfig(
        topic=config.name,
        read_queue_nums=config.read_queue_nums,
        write_queue_nums=config.write_queue_nums,
        perm=cast(common_pb2.Permission, config.perm),  # same numbers, see common.proto
        message_type=config.message_type,
    )


def store_stats_pb(stats: dict) -> admin_pb2.StoreStats:
    return admin_pb2.StoreStats(
        commitlog_min_offset=stats["commitlog_min_offset"],
        commitlog_max_offset=stats["commitlog_max_offset"],
        flushed_offset=stats["flushed_offset"],
        commitlog_segments=stats["commitlog_segments"],
        topic_count=stats["topics"],
        queue_count=stats["queues"],
        disk_full=stats["disk_full"],
    )


def _optional(request: admin_pb2.UpdateTopicRequest, field: str) -> Any:
    return getattr(request, field) if request.HasField(field) else None
