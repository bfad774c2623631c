"""Finding messages by key, for both protocols: rocketlite.v1's QueryMessagesByKey and
RocketMQ's QUERY_MESSAGE (12) answer from this one function.

The store's message index names the records of ``topic#key`` for every KEYS entry and for
the UNIQ_KEY (:meth:`~rmq_spark.store.message_store.MessageStore.query_messages` drops hash
collisions). What is added here is the broker's part: a clear refusal when the broker keeps
no index, and an answer no larger than a protocol carries.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rmq_spark.codec.record import store_timestamp_in
from rmq_spark.errors import StoreError
from rmq_spark.store.index import MAX_MSGS_NUM_BATCH

if TYPE_CHECKING:
    from rmq_spark.store import MessageStore

#: records a query answers when the caller names no count (RocketMQ's maxNum of mqadmin)
DEFAULT_MAX_COUNT = 64
#: the most records one query of RocketMQ's index answers (its maxMsgsNumBatch)
MAX_KEY_MATCHES = MAX_MSGS_NUM_BATCH
#: the end of time for a query without an upper bound (Java's Long.MAX_VALUE)
NO_END_MS = 2**63 - 1
#: how finely the index keeps a record's store time
INDEX_RESOLUTION_MS = 1000


@dataclass(frozen=True)
class KeyMatches:
    #: the whole commit-log records, newest first
    records: list[bytes]
    #: more records match than ``records`` holds (the count or the byte limit cut them)
    more: bool


def find_by_key(
    store: MessageStore,
    broker_name: str,
    topic: str,
    key: str,
    max_count: int,
    begin_ms: int = 0,
    end_ms: int = NO_END_MS,
    *,
    max_bytes: int,
    exact_times: bool = False,
) -> KeyMatches:
    """Up to ``max_count`` records of ``topic`` stored under ``key`` in [begin_ms, end_ms],
    newest first, at most ``max_bytes`` of them (but at least one). Runs store reads: call
    it on a worker thread.

    The index keeps store times to the second (rounded down), which is how RocketMQ's
    brokers compare them; with ``exact_times`` the records' own store times are compared
    instead. Those a wider index window lets in are all older than the answer's (records
    are indexed in store order), so they never push a record of the window out.
    """
    if store.index is None:
        raise StoreError(
            f"broker {broker_name!r} keeps no message index (it was started with "
            "--no-message-index), so it cannot find messages by key; restart it without "
            "that flag (the index is then built from the whole commit log)"
        )
    # a record stored at t is indexed as t rounded down to its index file's second
    index_begin = max(begin_ms - INDEX_RESOLUTION_MS, 0) if exact_times else begin_ms
    found = store.query_messages(topic, key, max_count + 1, index_begin, end_ms)
    if exact_times:
        found = [r for r in found if begin_ms <= (store_timestamp_in(r) or 0) <= end_ms]
    kept = within_bytes(found[:max_count], max_bytes)
    return KeyMatches(kept, len(found) > len(kept))


def within_bytes(records: Sequence[bytes], max_bytes: int) -> list[bytes]:
    """The first ``records`` whose sizes add up to at most ``max_bytes``; the first record
    always, so an answer is never empty while something matches.

    >>> within_bytes([b"aaaa", b"bb", b"c"], 6)
    [b'aaaa', b'bb']
    >>> within_bytes([b"aaaa", b"bb"], 1)
    [b'aaaa']
    """
    kept: list[bytes] = []
    total = 0
    for record in records:
        if kept and total + len(record) > max_bytes:
            break
        kept.append(record)
        total += len(record)
    return kept
