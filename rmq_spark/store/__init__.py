"""The storage engine: commit log, consume queues, recovery, flush and retention.

No network code lives here; the broker is a thin gRPC shell over :class:`MessageStore`.
"""

from rmq_spark.store.config import StoreConfig
from rmq_spark.store.message_store import AppendResult, GetResult, MessageStore

__all__ = ["AppendResult", "GetResult", "MessageStore", "StoreConfig"]
