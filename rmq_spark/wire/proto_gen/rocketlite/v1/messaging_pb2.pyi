from rmq_spark.wire.proto_gen.rocketlite.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PullStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PULL_STATUS_UNSPECIFIED: _ClassVar[PullStatus]
    PULL_STATUS_FOUND: _ClassVar[PullStatus]
    PULL_STATUS_NO_NEW_MSG: _ClassVar[PullStatus]
    PULL_STATUS_NO_MATCHED_MSG: _ClassVar[PullStatus]
    PULL_STATUS_OFFSET_ILLEGAL: _ClassVar[PullStatus]
PULL_STATUS_UNSPECIFIED: PullStatus
PULL_STATUS_FOUND: PullStatus
PULL_STATUS_NO_NEW_MSG: PullStatus
PULL_STATUS_NO_MATCHED_MSG: PullStatus
PULL_STATUS_OFFSET_ILLEGAL: PullStatus

class Message(_message.Message):
    __slots__ = ("body", "tags", "keys", "properties", "born_timestamp_ms", "flag", "unique_key")
    class PropertiesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    BODY_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    BORN_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    FLAG_FIELD_NUMBER: _ClassVar[int]
    UNIQUE_KEY_FIELD_NUMBER: _ClassVar[int]
    body: bytes
    tags: str
    keys: _containers.RepeatedScalarFieldContainer[str]
    properties: _containers.ScalarMap[str, str]
    born_timestamp_ms: int
    flag: int
    unique_key: str
    def __init__(self, body: _Optional[bytes] = ..., tags: _Optional[str] = ..., keys: _Optional[_Iterable[str]] = ..., properties: _Optional[_Mapping[str, str]] = ..., born_timestamp_ms: _Optional[int] = ..., flag: _Optional[int] = ..., unique_key: _Optional[str] = ...) -> None: ...

class SendMessagesRequest(_message.Message):
    __slots__ = ("topic", "queue_id", "sharding_key", "messages", "delay_level", "producer_group", "columns", "stage")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    SHARDING_KEY_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    DELAY_LEVEL_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_GROUP_FIELD_NUMBER: _ClassVar[int]
    COLUMNS_FIELD_NUMBER: _ClassVar[int]
    STAGE_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    sharding_key: str
    messages: _containers.RepeatedCompositeFieldContainer[Message]
    delay_level: int
    producer_group: str
    columns: MessageColumns
    stage: SinkStage
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., sharding_key: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[Message, _Mapping]]] = ..., delay_level: _Optional[int] = ..., producer_group: _Optional[str] = ..., columns: _Optional[_Union[MessageColumns, _Mapping]] = ..., stage: _Optional[_Union[SinkStage, _Mapping]] = ...) -> None: ...

class SinkStage(_message.Message):
    __slots__ = ("sink_id", "transaction_id", "sequence")
    SINK_ID_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_ID_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    sink_id: str
    transaction_id: str
    sequence: int
    def __init__(self, sink_id: _Optional[str] = ..., transaction_id: _Optional[str] = ..., sequence: _Optional[int] = ...) -> None: ...

class SinkTransactionCount(_message.Message):
    __slots__ = ("transaction_id", "messages")
    TRANSACTION_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    transaction_id: str
    messages: int
    def __init__(self, transaction_id: _Optional[str] = ..., messages: _Optional[int] = ...) -> None: ...

class SinkBrokerPart(_message.Message):
    __slots__ = ("broker_name", "transactions")
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    TRANSACTIONS_FIELD_NUMBER: _ClassVar[int]
    broker_name: str
    transactions: _containers.RepeatedCompositeFieldContainer[SinkTransactionCount]
    def __init__(self, broker_name: _Optional[str] = ..., transactions: _Optional[_Iterable[_Union[SinkTransactionCount, _Mapping]]] = ...) -> None: ...

class EndSinkBatchRequest(_message.Message):
    __slots__ = ("sink_id", "batch_id", "commit", "decision")
    SINK_ID_FIELD_NUMBER: _ClassVar[int]
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    COMMIT_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    sink_id: str
    batch_id: int
    commit: bool
    decision: _containers.RepeatedCompositeFieldContainer[SinkBrokerPart]
    def __init__(self, sink_id: _Optional[str] = ..., batch_id: _Optional[int] = ..., commit: _Optional[bool] = ..., decision: _Optional[_Iterable[_Union[SinkBrokerPart, _Mapping]]] = ...) -> None: ...

class EndSinkBatchResponse(_message.Message):
    __slots__ = ("already_committed", "decision", "committed_messages", "rolled_back_transactions", "last_committed_batch")
    ALREADY_COMMITTED_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    ROLLED_BACK_TRANSACTIONS_FIELD_NUMBER: _ClassVar[int]
    LAST_COMMITTED_BATCH_FIELD_NUMBER: _ClassVar[int]
    already_committed: bool
    decision: _containers.RepeatedCompositeFieldContainer[SinkBrokerPart]
    committed_messages: int
    rolled_back_transactions: int
    last_committed_batch: int
    def __init__(self, already_committed: _Optional[bool] = ..., decision: _Optional[_Iterable[_Union[SinkBrokerPart, _Mapping]]] = ..., committed_messages: _Optional[int] = ..., rolled_back_transactions: _Optional[int] = ..., last_committed_batch: _Optional[int] = ...) -> None: ...

class MessageColumns(_message.Message):
    __slots__ = ("bodies", "body_sizes", "properties", "properties_sizes", "tags", "tag_indexes", "born_timestamp_ms", "born_timestamps_ms", "flags")
    BODIES_FIELD_NUMBER: _ClassVar[int]
    BODY_SIZES_FIELD_NUMBER: _ClassVar[int]
    PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    PROPERTIES_SIZES_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    TAG_INDEXES_FIELD_NUMBER: _ClassVar[int]
    BORN_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    BORN_TIMESTAMPS_MS_FIELD_NUMBER: _ClassVar[int]
    FLAGS_FIELD_NUMBER: _ClassVar[int]
    bodies: bytes
    body_sizes: _containers.RepeatedScalarFieldContainer[int]
    properties: bytes
    properties_sizes: _containers.RepeatedScalarFieldContainer[int]
    tags: _containers.RepeatedScalarFieldContainer[str]
    tag_indexes: _containers.RepeatedScalarFieldContainer[int]
    born_timestamp_ms: int
    born_timestamps_ms: _containers.RepeatedScalarFieldContainer[int]
    flags: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, bodies: _Optional[bytes] = ..., body_sizes: _Optional[_Iterable[int]] = ..., properties: _Optional[bytes] = ..., properties_sizes: _Optional[_Iterable[int]] = ..., tags: _Optional[_Iterable[str]] = ..., tag_indexes: _Optional[_Iterable[int]] = ..., born_timestamp_ms: _Optional[int] = ..., born_timestamps_ms: _Optional[_Iterable[int]] = ..., flags: _Optional[_Iterable[int]] = ...) -> None: ...

class SendResultEntry(_message.Message):
    __slots__ = ("msg_id", "offset_msg_id", "queue_id", "queue_offset")
    MSG_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_MSG_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    msg_id: str
    offset_msg_id: str
    queue_id: int
    queue_offset: int
    def __init__(self, msg_id: _Optional[str] = ..., offset_msg_id: _Optional[str] = ..., queue_id: _Optional[int] = ..., queue_offset: _Optional[int] = ...) -> None: ...

class SendMessagesResponse(_message.Message):
    __slots__ = ("queue", "entries", "store_timestamp_ms", "columns_result")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    STORE_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    COLUMNS_RESULT_FIELD_NUMBER: _ClassVar[int]
    queue: _common_pb2.MessageQueue
    entries: _containers.RepeatedCompositeFieldContainer[SendResultEntry]
    store_timestamp_ms: int
    columns_result: ColumnsSendResult
    def __init__(self, queue: _Optional[_Union[_common_pb2.MessageQueue, _Mapping]] = ..., entries: _Optional[_Iterable[_Union[SendResultEntry, _Mapping]]] = ..., store_timestamp_ms: _Optional[int] = ..., columns_result: _Optional[_Union[ColumnsSendResult, _Mapping]] = ...) -> None: ...

class ColumnsSendResult(_message.Message):
    __slots__ = ("first_queue_offset", "physical_offsets", "offset_msg_id_prefix")
    FIRST_QUEUE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    PHYSICAL_OFFSETS_FIELD_NUMBER: _ClassVar[int]
    OFFSET_MSG_ID_PREFIX_FIELD_NUMBER: _ClassVar[int]
    first_queue_offset: int
    physical_offsets: _containers.RepeatedScalarFieldContainer[int]
    offset_msg_id_prefix: str
    def __init__(self, first_queue_offset: _Optional[int] = ..., physical_offsets: _Optional[_Iterable[int]] = ..., offset_msg_id_prefix: _Optional[str] = ...) -> None: ...

class PullMessagesRequest(_message.Message):
    __slots__ = ("consumer_group", "queue", "queue_offset", "max_messages", "max_bytes", "subscription_expression", "suspend_timeout_ms", "commit_offset", "expression_type")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    QUEUE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTION_EXPRESSION_FIELD_NUMBER: _ClassVar[int]
    SUSPEND_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    COMMIT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    EXPRESSION_TYPE_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    queue: _common_pb2.MessageQueue
    queue_offset: int
    max_messages: int
    max_bytes: int
    subscription_expression: str
    suspend_timeout_ms: int
    commit_offset: int
    expression_type: str
    def __init__(self, consumer_group: _Optional[str] = ..., queue: _Optional[_Union[_common_pb2.MessageQueue, _Mapping]] = ..., queue_offset: _Optional[int] = ..., max_messages: _Optional[int] = ..., max_bytes: _Optional[int] = ..., subscription_expression: _Optional[str] = ..., suspend_timeout_ms: _Optional[int] = ..., commit_offset: _Optional[int] = ..., expression_type: _Optional[str] = ...) -> None: ...

class PullMessagesResponse(_message.Message):
    __slots__ = ("status", "next_begin_offset", "min_offset", "max_offset", "records", "record_sizes_i32le", "queue_offsets_i64le")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    NEXT_BEGIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    RECORD_SIZES_I32LE_FIELD_NUMBER: _ClassVar[int]
    QUEUE_OFFSETS_I64LE_FIELD_NUMBER: _ClassVar[int]
    status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    records: bytes
    record_sizes_i32le: bytes
    queue_offsets_i64le: bytes
    def __init__(self, status: _Optional[_Union[PullStatus, str]] = ..., next_begin_offset: _Optional[int] = ..., min_offset: _Optional[int] = ..., max_offset: _Optional[int] = ..., records: _Optional[bytes] = ..., record_sizes_i32le: _Optional[bytes] = ..., queue_offsets_i64le: _Optional[bytes] = ...) -> None: ...

class QueueOffsetsQuery(_message.Message):
    __slots__ = ("queue", "timestamp_ms", "size_from_offset", "size_to_offset", "size_budget_bytes")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    SIZE_FROM_OFFSET_FIELD_NUMBER: _ClassVar[int]
    SIZE_TO_OFFSET_FIELD_NUMBER: _ClassVar[int]
    SIZE_BUDGET_BYTES_FIELD_NUMBER: _ClassVar[int]
    queue: _common_pb2.MessageQueue
    timestamp_ms: int
    size_from_offset: int
    size_to_offset: int
    size_budget_bytes: int
    def __init__(self, queue: _Optional[_Union[_common_pb2.MessageQueue, _Mapping]] = ..., timestamp_ms: _Optional[int] = ..., size_from_offset: _Optional[int] = ..., size_to_offset: _Optional[int] = ..., size_budget_bytes: _Optional[int] = ...) -> None: ...

class QueueOffsets(_message.Message):
    __slots__ = ("queue", "min_offset", "max_offset", "timestamp_offset", "size_bytes", "size_estimated", "budget_end_offset")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    MIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_OFFSET_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    SIZE_ESTIMATED_FIELD_NUMBER: _ClassVar[int]
    BUDGET_END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    queue: _common_pb2.MessageQueue
    min_offset: int
    max_offset: int
    timestamp_offset: int
    size_bytes: int
    size_estimated: bool
    budget_end_offset: int
    def __init__(self, queue: _Optional[_Union[_common_pb2.MessageQueue, _Mapping]] = ..., min_offset: _Optional[int] = ..., max_offset: _Optional[int] = ..., timestamp_offset: _Optional[int] = ..., size_bytes: _Optional[int] = ..., size_estimated: _Optional[bool] = ..., budget_end_offset: _Optional[int] = ...) -> None: ...

class QueryOffsetsRequest(_message.Message):
    __slots__ = ("queries",)
    QUERIES_FIELD_NUMBER: _ClassVar[int]
    queries: _containers.RepeatedCompositeFieldContainer[QueueOffsetsQuery]
    def __init__(self, queries: _Optional[_Iterable[_Union[QueueOffsetsQuery, _Mapping]]] = ...) -> None: ...

class QueryOffsetsResponse(_message.Message):
    __slots__ = ("offsets",)
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    offsets: _containers.RepeatedCompositeFieldContainer[QueueOffsets]
    def __init__(self, offsets: _Optional[_Iterable[_Union[QueueOffsets, _Mapping]]] = ...) -> None: ...

class MessageRef(_message.Message):
    __slots__ = ("offset_msg_id", "physical_offset")
    OFFSET_MSG_ID_FIELD_NUMBER: _ClassVar[int]
    PHYSICAL_OFFSET_FIELD_NUMBER: _ClassVar[int]
    offset_msg_id: str
    physical_offset: int
    def __init__(self, offset_msg_id: _Optional[str] = ..., physical_offset: _Optional[int] = ...) -> None: ...

class ViewMessageRequest(_message.Message):
    __slots__ = ("message",)
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    message: MessageRef
    def __init__(self, message: _Optional[_Union[MessageRef, _Mapping]] = ...) -> None: ...

class ViewMessageResponse(_message.Message):
    __slots__ = ("record",)
    RECORD_FIELD_NUMBER: _ClassVar[int]
    record: bytes
    def __init__(self, record: _Optional[bytes] = ...) -> None: ...

class QueryMessagesByKeyRequest(_message.Message):
    __slots__ = ("topic", "key", "max_count", "begin_timestamp_ms", "end_timestamp_ms")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    MAX_COUNT_FIELD_NUMBER: _ClassVar[int]
    BEGIN_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    END_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    key: str
    max_count: int
    begin_timestamp_ms: int
    end_timestamp_ms: int
    def __init__(self, topic: _Optional[str] = ..., key: _Optional[str] = ..., max_count: _Optional[int] = ..., begin_timestamp_ms: _Optional[int] = ..., end_timestamp_ms: _Optional[int] = ...) -> None: ...

class QueryMessagesByKeyResponse(_message.Message):
    __slots__ = ("records", "more")
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    MORE_FIELD_NUMBER: _ClassVar[int]
    records: _containers.RepeatedScalarFieldContainer[bytes]
    more: bool
    def __init__(self, records: _Optional[_Iterable[bytes]] = ..., more: _Optional[bool] = ...) -> None: ...

class ConsumerSendBackRequest(_message.Message):
    __slots__ = ("consumer_group", "message", "original_topic", "delay_level", "max_reconsume_times", "dead_letter_now", "reconsume_times")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ORIGINAL_TOPIC_FIELD_NUMBER: _ClassVar[int]
    DELAY_LEVEL_FIELD_NUMBER: _ClassVar[int]
    MAX_RECONSUME_TIMES_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTER_NOW_FIELD_NUMBER: _ClassVar[int]
    RECONSUME_TIMES_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    message: MessageRef
    original_topic: str
    delay_level: int
    max_reconsume_times: int
    dead_letter_now: bool
    reconsume_times: int
    def __init__(self, consumer_group: _Optional[str] = ..., message: _Optional[_Union[MessageRef, _Mapping]] = ..., original_topic: _Optional[str] = ..., delay_level: _Optional[int] = ..., max_reconsume_times: _Optional[int] = ..., dead_letter_now: _Optional[bool] = ..., reconsume_times: _Optional[int] = ...) -> None: ...

class ConsumerSendBackResponse(_message.Message):
    __slots__ = ("queue", "dead_lettered", "reconsume_times", "delay_level", "offset_msg_id")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTERED_FIELD_NUMBER: _ClassVar[int]
    RECONSUME_TIMES_FIELD_NUMBER: _ClassVar[int]
    DELAY_LEVEL_FIELD_NUMBER: _ClassVar[int]
    OFFSET_MSG_ID_FIELD_NUMBER: _ClassVar[int]
    queue: _common_pb2.MessageQueue
    dead_lettered: bool
    reconsume_times: int
    delay_level: int
    offset_msg_id: str
    def __init__(self, queue: _Optional[_Union[_common_pb2.MessageQueue, _Mapping]] = ..., dead_lettered: _Optional[bool] = ..., reconsume_times: _Optional[int] = ..., delay_level: _Optional[int] = ..., offset_msg_id: _Optional[str] = ...) -> None: ...
