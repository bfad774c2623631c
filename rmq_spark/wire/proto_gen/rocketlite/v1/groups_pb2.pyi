from rmq_spark.wire.proto_gen.rocketlite.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class MessageModel(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MESSAGE_MODEL_UNSPECIFIED: _ClassVar[MessageModel]
    MESSAGE_MODEL_CLUSTERING: _ClassVar[MessageModel]
    MESSAGE_MODEL_BROADCASTING: _ClassVar[MessageModel]

class ConsumeType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CONSUME_TYPE_UNSPECIFIED: _ClassVar[ConsumeType]
    CONSUME_TYPE_PULL: _ClassVar[ConsumeType]
    CONSUME_TYPE_PUSH: _ClassVar[ConsumeType]

class ConsumeFromWhere(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CONSUME_FROM_WHERE_UNSPECIFIED: _ClassVar[ConsumeFromWhere]
    CONSUME_FROM_WHERE_LAST_OFFSET: _ClassVar[ConsumeFromWhere]
    CONSUME_FROM_WHERE_FIRST_OFFSET: _ClassVar[ConsumeFromWhere]
    CONSUME_FROM_WHERE_TIMESTAMP: _ClassVar[ConsumeFromWhere]
MESSAGE_MODEL_UNSPECIFIED: MessageModel
MESSAGE_MODEL_CLUSTERING: MessageModel
MESSAGE_MODEL_BROADCASTING: MessageModel
CONSUME_TYPE_UNSPECIFIED: ConsumeType
CONSUME_TYPE_PULL: ConsumeType
CONSUME_TYPE_PUSH: ConsumeType
CONSUME_FROM_WHERE_UNSPECIFIED: ConsumeFromWhere
CONSUME_FROM_WHERE_LAST_OFFSET: ConsumeFromWhere
CONSUME_FROM_WHERE_FIRST_OFFSET: ConsumeFromWhere
CONSUME_FROM_WHERE_TIMESTAMP: ConsumeFromWhere

class Subscription(_message.Message):
    __slots__ = ("topic", "expression", "expression_type")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    EXPRESSION_FIELD_NUMBER: _ClassVar[int]
    EXPRESSION_TYPE_FIELD_NUMBER: _ClassVar[int]
    topic: str
    expression: str
    expression_type: str
    def __init__(self, topic: _Optional[str] = ..., expression: _Optional[str] = ..., expression_type: _Optional[str] = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("client_id", "consumer_group", "subscriptions", "message_model", "consume_type", "consume_from_where", "consume_timestamp_ms")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTIONS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_MODEL_FIELD_NUMBER: _ClassVar[int]
    CONSUME_TYPE_FIELD_NUMBER: _ClassVar[int]
    CONSUME_FROM_WHERE_FIELD_NUMBER: _ClassVar[int]
    CONSUME_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    consumer_group: str
    subscriptions: _containers.RepeatedCompositeFieldContainer[Subscription]
    message_model: MessageModel
    consume_type: ConsumeType
    consume_from_where: ConsumeFromWhere
    consume_timestamp_ms: int
    def __init__(self, client_id: _Optional[str] = ..., consumer_group: _Optional[str] = ..., subscriptions: _Optional[_Iterable[_Union[Subscription, _Mapping]]] = ..., message_model: _Optional[_Union[MessageModel, str]] = ..., consume_type: _Optional[_Union[ConsumeType, str]] = ..., consume_from_where: _Optional[_Union[ConsumeFromWhere, str]] = ..., consume_timestamp_ms: _Optional[int] = ...) -> None: ...

class HeartbeatResponse(_message.Message):
    __slots__ = ("session_timeout_ms", "membership_version")
    SESSION_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    MEMBERSHIP_VERSION_FIELD_NUMBER: _ClassVar[int]
    session_timeout_ms: int
    membership_version: int
    def __init__(self, session_timeout_ms: _Optional[int] = ..., membership_version: _Optional[int] = ...) -> None: ...

class UnregisterRequest(_message.Message):
    __slots__ = ("client_id", "consumer_group")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    consumer_group: str
    def __init__(self, client_id: _Optional[str] = ..., consumer_group: _Optional[str] = ...) -> None: ...

class UnregisterResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetConsumerListRequest(_message.Message):
    __slots__ = ("consumer_group",)
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    def __init__(self, consumer_group: _Optional[str] = ...) -> None: ...

class GetConsumerListResponse(_message.Message):
    __slots__ = ("consumer_ids", "membership_version")
    CONSUMER_IDS_FIELD_NUMBER: _ClassVar[int]
    MEMBERSHIP_VERSION_FIELD_NUMBER: _ClassVar[int]
    consumer_ids: _containers.RepeatedScalarFieldContainer[str]
    membership_version: int
    def __init__(self, consumer_ids: _Optional[_Iterable[str]] = ..., membership_version: _Optional[int] = ...) -> None: ...

class WatchConsumerChangesRequest(_message.Message):
    __slots__ = ("consumer_group", "client_id")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    client_id: str
    def __init__(self, consumer_group: _Optional[str] = ..., client_id: _Optional[str] = ...) -> None: ...

class ConsumerChangeEvent(_message.Message):
    __slots__ = ("consumer_group", "consumer_ids", "membership_version")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_IDS_FIELD_NUMBER: _ClassVar[int]
    MEMBERSHIP_VERSION_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    consumer_ids: _containers.RepeatedScalarFieldContainer[str]
    membership_version: int
    def __init__(self, consumer_group: _Optional[str] = ..., consumer_ids: _Optional[_Iterable[str]] = ..., membership_version: _Optional[int] = ...) -> None: ...

class LockQueuesRequest(_message.Message):
    __slots__ = ("consumer_group", "client_id", "queues", "lease_ms")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    LEASE_MS_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    client_id: str
    queues: _containers.RepeatedCompositeFieldContainer[_common_pb2.MessageQueue]
    lease_ms: int
    def __init__(self, consumer_group: _Optional[str] = ..., client_id: _Optional[str] = ..., queues: _Optional[_Iterable[_Union[_common_pb2.MessageQueue, _Mapping]]] = ..., lease_ms: _Optional[int] = ...) -> None: ...

class LockQueuesResponse(_message.Message):
    __slots__ = ("locked_queues", "lease_ms", "lease_expire_timestamp_ms")
    LOCKED_QUEUES_FIELD_NUMBER: _ClassVar[int]
    LEASE_MS_FIELD_NUMBER: _ClassVar[int]
    LEASE_EXPIRE_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    locked_queues: _containers.RepeatedCompositeFieldContainer[_common_pb2.MessageQueue]
    lease_ms: int
    lease_expire_timestamp_ms: int
    def __init__(self, locked_queues: _Optional[_Iterable[_Union[_common_pb2.MessageQueue, _Mapping]]] = ..., lease_ms: _Optional[int] = ..., lease_expire_timestamp_ms: _Optional[int] = ...) -> None: ...

class UnlockQueuesRequest(_message.Message):
    __slots__ = ("consumer_group", "client_id", "queues")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    client_id: str
    queues: _containers.RepeatedCompositeFieldContainer[_common_pb2.MessageQueue]
    def __init__(self, consumer_group: _Optional[str] = ..., client_id: _Optional[str] = ..., queues: _Optional[_Iterable[_Union[_common_pb2.MessageQueue, _Mapping]]] = ...) -> None: ...

class UnlockQueuesResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
