from rmq_spark.wire.proto_gen.rocketlite.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class FlushMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FLUSH_MODE_UNSPECIFIED: _ClassVar[FlushMode]
    FLUSH_MODE_ASYNC: _ClassVar[FlushMode]
    FLUSH_MODE_SYNC: _ClassVar[FlushMode]

class UserType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    USER_TYPE_UNSPECIFIED: _ClassVar[UserType]
    USER_TYPE_SUPER: _ClassVar[UserType]
    USER_TYPE_NORMAL: _ClassVar[UserType]

class AclDecision(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ACL_DECISION_UNSPECIFIED: _ClassVar[AclDecision]
    ACL_DECISION_ALLOW: _ClassVar[AclDecision]
    ACL_DECISION_DENY: _ClassVar[AclDecision]
FLUSH_MODE_UNSPECIFIED: FlushMode
FLUSH_MODE_ASYNC: FlushMode
FLUSH_MODE_SYNC: FlushMode
USER_TYPE_UNSPECIFIED: UserType
USER_TYPE_SUPER: UserType
USER_TYPE_NORMAL: UserType
ACL_DECISION_UNSPECIFIED: AclDecision
ACL_DECISION_ALLOW: AclDecision
ACL_DECISION_DENY: AclDecision

class TopicConfig(_message.Message):
    __slots__ = ("topic", "read_queue_nums", "write_queue_nums", "perm", "message_type")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    READ_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    WRITE_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    PERM_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_TYPE_FIELD_NUMBER: _ClassVar[int]
    topic: str
    read_queue_nums: int
    write_queue_nums: int
    perm: _common_pb2.Permission
    message_type: str
    def __init__(self, topic: _Optional[str] = ..., read_queue_nums: _Optional[int] = ..., write_queue_nums: _Optional[int] = ..., perm: _Optional[_Union[_common_pb2.Permission, str]] = ..., message_type: _Optional[str] = ...) -> None: ...

class CreateTopicRequest(_message.Message):
    __slots__ = ("topic", "read_queue_nums", "write_queue_nums", "perm", "message_type")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    READ_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    WRITE_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    PERM_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_TYPE_FIELD_NUMBER: _ClassVar[int]
    topic: str
    read_queue_nums: int
    write_queue_nums: int
    perm: _common_pb2.Permission
    message_type: str
    def __init__(self, topic: _Optional[str] = ..., read_queue_nums: _Optional[int] = ..., write_queue_nums: _Optional[int] = ..., perm: _Optional[_Union[_common_pb2.Permission, str]] = ..., message_type: _Optional[str] = ...) -> None: ...

class CreateTopicResponse(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: TopicConfig
    def __init__(self, topic: _Optional[_Union[TopicConfig, _Mapping]] = ...) -> None: ...

class UpdateTopicRequest(_message.Message):
    __slots__ = ("topic", "read_queue_nums", "write_queue_nums", "perm", "message_type")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    READ_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    WRITE_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    PERM_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_TYPE_FIELD_NUMBER: _ClassVar[int]
    topic: str
    read_queue_nums: int
    write_queue_nums: int
    perm: _common_pb2.Permission
    message_type: str
    def __init__(self, topic: _Optional[str] = ..., read_queue_nums: _Optional[int] = ..., write_queue_nums: _Optional[int] = ..., perm: _Optional[_Union[_common_pb2.Permission, str]] = ..., message_type: _Optional[str] = ...) -> None: ...

class UpdateTopicResponse(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: TopicConfig
    def __init__(self, topic: _Optional[_Union[TopicConfig, _Mapping]] = ...) -> None: ...

class DeleteTopicRequest(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: str
    def __init__(self, topic: _Optional[str] = ...) -> None: ...

class DeleteTopicResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetTopicRouteRequest(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: str
    def __init__(self, topic: _Optional[str] = ...) -> None: ...

class QueueRoute(_message.Message):
    __slots__ = ("queue", "perm")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    PERM_FIELD_NUMBER: _ClassVar[int]
    queue: _common_pb2.MessageQueue
    perm: _common_pb2.Permission
    def __init__(self, queue: _Optional[_Union[_common_pb2.MessageQueue, _Mapping]] = ..., perm: _Optional[_Union[_common_pb2.Permission, str]] = ...) -> None: ...

class GetTopicRouteResponse(_message.Message):
    __slots__ = ("topic", "broker_name", "endpoint", "broker_perm", "queues")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    BROKER_PERM_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    topic: TopicConfig
    broker_name: str
    endpoint: str
    broker_perm: _common_pb2.Permission
    queues: _containers.RepeatedCompositeFieldContainer[QueueRoute]
    def __init__(self, topic: _Optional[_Union[TopicConfig, _Mapping]] = ..., broker_name: _Optional[str] = ..., endpoint: _Optional[str] = ..., broker_perm: _Optional[_Union[_common_pb2.Permission, str]] = ..., queues: _Optional[_Iterable[_Union[QueueRoute, _Mapping]]] = ...) -> None: ...

class ListTopicsRequest(_message.Message):
    __slots__ = ("include_system_topics",)
    INCLUDE_SYSTEM_TOPICS_FIELD_NUMBER: _ClassVar[int]
    include_system_topics: bool
    def __init__(self, include_system_topics: _Optional[bool] = ...) -> None: ...

class ListTopicsResponse(_message.Message):
    __slots__ = ("broker_name", "topics")
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    broker_name: str
    topics: _containers.RepeatedCompositeFieldContainer[TopicConfig]
    def __init__(self, broker_name: _Optional[str] = ..., topics: _Optional[_Iterable[_Union[TopicConfig, _Mapping]]] = ...) -> None: ...

class GetBrokerInfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class BrokerLimits(_message.Message):
    __slots__ = ("max_message_bytes", "max_request_bytes", "max_response_bytes", "max_pull_messages", "max_pull_bytes", "max_suspend_timeout_ms", "commitlog_segment_bytes")
    MAX_MESSAGE_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_REQUEST_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_RESPONSE_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_PULL_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    MAX_PULL_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_SUSPEND_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    COMMITLOG_SEGMENT_BYTES_FIELD_NUMBER: _ClassVar[int]
    max_message_bytes: int
    max_request_bytes: int
    max_response_bytes: int
    max_pull_messages: int
    max_pull_bytes: int
    max_suspend_timeout_ms: int
    commitlog_segment_bytes: int
    def __init__(self, max_message_bytes: _Optional[int] = ..., max_request_bytes: _Optional[int] = ..., max_response_bytes: _Optional[int] = ..., max_pull_messages: _Optional[int] = ..., max_pull_bytes: _Optional[int] = ..., max_suspend_timeout_ms: _Optional[int] = ..., commitlog_segment_bytes: _Optional[int] = ...) -> None: ...

class StoreStats(_message.Message):
    __slots__ = ("commitlog_min_offset", "commitlog_max_offset", "flushed_offset", "commitlog_segments", "topic_count", "queue_count", "disk_full")
    COMMITLOG_MIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    COMMITLOG_MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    FLUSHED_OFFSET_FIELD_NUMBER: _ClassVar[int]
    COMMITLOG_SEGMENTS_FIELD_NUMBER: _ClassVar[int]
    TOPIC_COUNT_FIELD_NUMBER: _ClassVar[int]
    QUEUE_COUNT_FIELD_NUMBER: _ClassVar[int]
    DISK_FULL_FIELD_NUMBER: _ClassVar[int]
    commitlog_min_offset: int
    commitlog_max_offset: int
    flushed_offset: int
    commitlog_segments: int
    topic_count: int
    queue_count: int
    disk_full: bool
    def __init__(self, commitlog_min_offset: _Optional[int] = ..., commitlog_max_offset: _Optional[int] = ..., flushed_offset: _Optional[int] = ..., commitlog_segments: _Optional[int] = ..., topic_count: _Optional[int] = ..., queue_count: _Optional[int] = ..., disk_full: _Optional[bool] = ...) -> None: ...

class GetBrokerInfoResponse(_message.Message):
    __slots__ = ("broker_name", "version", "endpoint", "store_host", "broker_perm", "flush_mode", "start_timestamp_ms", "now_timestamp_ms", "limits", "store_stats", "server_stats", "auto_create_topics", "default_topic_queues", "short_circuit_socket")
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    STORE_HOST_FIELD_NUMBER: _ClassVar[int]
    BROKER_PERM_FIELD_NUMBER: _ClassVar[int]
    FLUSH_MODE_FIELD_NUMBER: _ClassVar[int]
    START_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    NOW_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    STORE_STATS_FIELD_NUMBER: _ClassVar[int]
    SERVER_STATS_FIELD_NUMBER: _ClassVar[int]
    AUTO_CREATE_TOPICS_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_TOPIC_QUEUES_FIELD_NUMBER: _ClassVar[int]
    SHORT_CIRCUIT_SOCKET_FIELD_NUMBER: _ClassVar[int]
    broker_name: str
    version: str
    endpoint: str
    store_host: str
    broker_perm: _common_pb2.Permission
    flush_mode: FlushMode
    start_timestamp_ms: int
    now_timestamp_ms: int
    limits: BrokerLimits
    store_stats: StoreStats
    server_stats: ServerStats
    auto_create_topics: bool
    default_topic_queues: int
    short_circuit_socket: str
    def __init__(self, broker_name: _Optional[str] = ..., version: _Optional[str] = ..., endpoint: _Optional[str] = ..., store_host: _Optional[str] = ..., broker_perm: _Optional[_Union[_common_pb2.Permission, str]] = ..., flush_mode: _Optional[_Union[FlushMode, str]] = ..., start_timestamp_ms: _Optional[int] = ..., now_timestamp_ms: _Optional[int] = ..., limits: _Optional[_Union[BrokerLimits, _Mapping]] = ..., store_stats: _Optional[_Union[StoreStats, _Mapping]] = ..., server_stats: _Optional[_Union[ServerStats, _Mapping]] = ..., auto_create_topics: _Optional[bool] = ..., default_topic_queues: _Optional[int] = ..., short_circuit_socket: _Optional[str] = ...) -> None: ...

class ServerStats(_message.Message):
    __slots__ = ("held_pulls", "watch_streams", "pull_calls", "messages_pulled", "short_circuit_reads")
    HELD_PULLS_FIELD_NUMBER: _ClassVar[int]
    WATCH_STREAMS_FIELD_NUMBER: _ClassVar[int]
    PULL_CALLS_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_PULLED_FIELD_NUMBER: _ClassVar[int]
    SHORT_CIRCUIT_READS_FIELD_NUMBER: _ClassVar[int]
    held_pulls: int
    watch_streams: int
    pull_calls: int
    messages_pulled: int
    short_circuit_reads: int
    def __init__(self, held_pulls: _Optional[int] = ..., watch_streams: _Optional[int] = ..., pull_calls: _Optional[int] = ..., messages_pulled: _Optional[int] = ..., short_circuit_reads: _Optional[int] = ...) -> None: ...

class UserInfo(_message.Message):
    __slots__ = ("username", "user_type", "enabled", "secret_source")
    USERNAME_FIELD_NUMBER: _ClassVar[int]
    USER_TYPE_FIELD_NUMBER: _ClassVar[int]
    ENABLED_FIELD_NUMBER: _ClassVar[int]
    SECRET_SOURCE_FIELD_NUMBER: _ClassVar[int]
    username: str
    user_type: UserType
    enabled: bool
    secret_source: str
    def __init__(self, username: _Optional[str] = ..., user_type: _Optional[_Union[UserType, str]] = ..., enabled: _Optional[bool] = ..., secret_source: _Optional[str] = ...) -> None: ...

class CreateUserRequest(_message.Message):
    __slots__ = ("username", "secret", "user_type")
    USERNAME_FIELD_NUMBER: _ClassVar[int]
    SECRET_FIELD_NUMBER: _ClassVar[int]
    USER_TYPE_FIELD_NUMBER: _ClassVar[int]
    username: str
    secret: str
    user_type: UserType
    def __init__(self, username: _Optional[str] = ..., secret: _Optional[str] = ..., user_type: _Optional[_Union[UserType, str]] = ...) -> None: ...

class CreateUserResponse(_message.Message):
    __slots__ = ("user",)
    USER_FIELD_NUMBER: _ClassVar[int]
    user: UserInfo
    def __init__(self, user: _Optional[_Union[UserInfo, _Mapping]] = ...) -> None: ...

class DeleteUserRequest(_message.Message):
    __slots__ = ("username",)
    USERNAME_FIELD_NUMBER: _ClassVar[int]
    username: str
    def __init__(self, username: _Optional[str] = ...) -> None: ...

class DeleteUserResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListUsersRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListUsersResponse(_message.Message):
    __slots__ = ("users",)
    USERS_FIELD_NUMBER: _ClassVar[int]
    users: _containers.RepeatedCompositeFieldContainer[UserInfo]
    def __init__(self, users: _Optional[_Iterable[_Union[UserInfo, _Mapping]]] = ...) -> None: ...

class AclEntry(_message.Message):
    __slots__ = ("resource", "actions", "decision", "source_ips")
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    ACTIONS_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    SOURCE_IPS_FIELD_NUMBER: _ClassVar[int]
    resource: str
    actions: _containers.RepeatedScalarFieldContainer[str]
    decision: AclDecision
    source_ips: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, resource: _Optional[str] = ..., actions: _Optional[_Iterable[str]] = ..., decision: _Optional[_Union[AclDecision, str]] = ..., source_ips: _Optional[_Iterable[str]] = ...) -> None: ...

class UserAcl(_message.Message):
    __slots__ = ("username", "entries")
    USERNAME_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    username: str
    entries: _containers.RepeatedCompositeFieldContainer[AclEntry]
    def __init__(self, username: _Optional[str] = ..., entries: _Optional[_Iterable[_Union[AclEntry, _Mapping]]] = ...) -> None: ...

class GrantAclRequest(_message.Message):
    __slots__ = ("username", "resource", "actions", "decision", "source_ips")
    USERNAME_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    ACTIONS_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    SOURCE_IPS_FIELD_NUMBER: _ClassVar[int]
    username: str
    resource: str
    actions: _containers.RepeatedScalarFieldContainer[str]
    decision: AclDecision
    source_ips: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, username: _Optional[str] = ..., resource: _Optional[str] = ..., actions: _Optional[_Iterable[str]] = ..., decision: _Optional[_Union[AclDecision, str]] = ..., source_ips: _Optional[_Iterable[str]] = ...) -> None: ...

class GrantAclResponse(_message.Message):
    __slots__ = ("acl",)
    ACL_FIELD_NUMBER: _ClassVar[int]
    acl: UserAcl
    def __init__(self, acl: _Optional[_Union[UserAcl, _Mapping]] = ...) -> None: ...

class RevokeAclRequest(_message.Message):
    __slots__ = ("username", "resource")
    USERNAME_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    username: str
    resource: str
    def __init__(self, username: _Optional[str] = ..., resource: _Optional[str] = ...) -> None: ...

class RevokeAclResponse(_message.Message):
    __slots__ = ("acl",)
    ACL_FIELD_NUMBER: _ClassVar[int]
    acl: UserAcl
    def __init__(self, acl: _Optional[_Union[UserAcl, _Mapping]] = ...) -> None: ...

class ListAclsRequest(_message.Message):
    __slots__ = ("username",)
    USERNAME_FIELD_NUMBER: _ClassVar[int]
    username: str
    def __init__(self, username: _Optional[str] = ...) -> None: ...

class ListAclsResponse(_message.Message):
    __slots__ = ("acls",)
    ACLS_FIELD_NUMBER: _ClassVar[int]
    acls: _containers.RepeatedCompositeFieldContainer[UserAcl]
    def __init__(self, acls: _Optional[_Iterable[_Union[UserAcl, _Mapping]]] = ...) -> None: ...
