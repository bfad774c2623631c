from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class Permission(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PERMISSION_UNSPECIFIED: _ClassVar[Permission]
    PERMISSION_WRITE: _ClassVar[Permission]
    PERMISSION_READ: _ClassVar[Permission]
    PERMISSION_READ_WRITE: _ClassVar[Permission]
PERMISSION_UNSPECIFIED: Permission
PERMISSION_WRITE: Permission
PERMISSION_READ: Permission
PERMISSION_READ_WRITE: Permission

class MessageQueue(_message.Message):
    __slots__ = ("topic", "broker_name", "queue_id")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    topic: str
    broker_name: str
    queue_id: int
    def __init__(self, topic: _Optional[str] = ..., broker_name: _Optional[str] = ..., queue_id: _Optional[int] = ...) -> None: ...
