from rmq_spark.wire.proto_gen.rocketlite.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class QueueOffset(_message.Message):
    __slots__ = ("queue", "offset")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    queue: _common_pb2.MessageQueue
    offset: int
    def __init__(self, queue: _Optional[_Union[_common_pb2.MessageQueue, _Mapping]] = ..., offset: _Optional[int] = ...) -> None: ...

class UpdateConsumerOffsetsRequest(_message.Message):
    __slots__ = ("consumer_group", "offsets", "increase_only")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    INCREASE_ONLY_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    offsets: _containers.RepeatedCompositeFieldContainer[QueueOffset]
    increase_only: bool
    def __init__(self, consumer_group: _Optional[str] = ..., offsets: _Optional[_Iterable[_Union[QueueOffset, _Mapping]]] = ..., increase_only: _Optional[bool] = ...) -> None: ...

class CommittedOffset(_message.Message):
    __slots__ = ("queue", "offset", "updated")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    UPDATED_FIELD_NUMBER: _ClassVar[int]
    queue: _common_pb2.MessageQueue
    offset: int
    updated: bool
    def __init__(self, queue: _Optional[_Union[_common_pb2.MessageQueue, _Mapping]] = ..., offset: _Optional[int] = ..., updated: _Optional[bool] = ...) -> None: ...

class UpdateConsumerOffsetsResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[CommittedOffset]
    def __init__(self, results: _Optional[_Iterable[_Union[CommittedOffset, _Mapping]]] = ...) -> None: ...

class QueryConsumerOffsetsRequest(_message.Message):
    __slots__ = ("consumer_group", "queues")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    queues: _containers.RepeatedCompositeFieldContainer[_common_pb2.MessageQueue]
    def __init__(self, consumer_group: _Optional[str] = ..., queues: _Optional[_Iterable[_Union[_common_pb2.MessageQueue, _Mapping]]] = ...) -> None: ...

class ConsumerOffset(_message.Message):
    __slots__ = ("queue", "offset")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    queue: _common_pb2.MessageQueue
    offset: int
    def __init__(self, queue: _Optional[_Union[_common_pb2.MessageQueue, _Mapping]] = ..., offset: _Optional[int] = ...) -> None: ...

class QueryConsumerOffsetsResponse(_message.Message):
    __slots__ = ("offsets",)
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    offsets: _containers.RepeatedCompositeFieldContainer[ConsumerOffset]
    def __init__(self, offsets: _Optional[_Iterable[_Union[ConsumerOffset, _Mapping]]] = ...) -> None: ...

class GetConsumerProgressRequest(_message.Message):
    __slots__ = ("consumer_group", "topic")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    topic: str
    def __init__(self, consumer_group: _Optional[str] = ..., topic: _Optional[str] = ...) -> None: ...

class QueueProgress(_message.Message):
    __slots__ = ("queue", "broker_min_offset", "broker_max_offset", "committed_offset", "lag")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    BROKER_MIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    BROKER_MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAG_FIELD_NUMBER: _ClassVar[int]
    queue: _common_pb2.MessageQueue
    broker_min_offset: int
    broker_max_offset: int
    committed_offset: int
    lag: int
    def __init__(self, queue: _Optional[_Union[_common_pb2.MessageQueue, _Mapping]] = ..., broker_min_offset: _Optional[int] = ..., broker_max_offset: _Optional[int] = ..., committed_offset: _Optional[int] = ..., lag: _Optional[int] = ...) -> None: ...

class GetConsumerProgressResponse(_message.Message):
    __slots__ = ("queues", "total_lag")
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    TOTAL_LAG_FIELD_NUMBER: _ClassVar[int]
    queues: _containers.RepeatedCompositeFieldContainer[QueueProgress]
    total_lag: int
    def __init__(self, queues: _Optional[_Iterable[_Union[QueueProgress, _Mapping]]] = ..., total_lag: _Optional[int] = ...) -> None: ...
