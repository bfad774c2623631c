"""Rows to messages, without a Python step per row: the input schema checked once on the
driver (:func:`plan_columns`), then each Arrow batch turned into send requests' columns
with pyarrow kernels (:func:`encode_rows`, :func:`queue_indexes`).

Input columns, by name (Spark's Kafka sink under RocketMQ's names):

========================  =====================================  =========================
column                    type                                   meaning
========================  =====================================  =========================
``body``                  binary or string (required)            the message body
``topic``                 string                                 the row's topic (else the
                                                                 option ``topic``)
``tags``                  string                                 the tag; null or "" none
``keys``                  string (space separated) or            the message keys
                          array<string>
``properties``            map<string,string>                     user properties
``queueId``               int                                    the queue (index into the
                                                                 topic's writable queues)
``shardingKey``           string                                 same key, same queue
``delayLevel``            int                                    1..18: delivered later
========================  =====================================  =========================

The other columns of the ``rocketlite`` source's schema are ignored, so a DataFrame read
from one topic is written to another as it is; the properties the broker or the sink sets
itself (TAGS, KEYS, UNIQ_KEY, DELAY, ...) are dropped from a ``properties`` map.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rmq_spark.client.message import new_unique_keys
from rmq_spark.codec.byte_column import ByteColumn
from rmq_spark.codec.java_hash import queues_by_hash
from rmq_spark.codec.properties import MAX_PROPERTIES_BYTES, RESERVED_PROPERTIES
from rmq_spark.errors import InvalidArgumentError

__all__ = ["ColumnPlan", "RowError", "encode_rows", "plan_columns", "queue_indexes"]

#: the columns the sink reads, and the Spark types each takes (simpleString forms)
ACCEPTED: dict[str, tuple[str, ...]] = {
    "body": ("binary", "string"),
    "topic": ("string",),
    "tags": ("string",),
    "keys": ("string", "array<string>"),
    "properties": ("map<string,string>",),
    "queueId": ("int", "smallint", "tinyint"),
    "shardingKey": ("string",),
    "delayLevel": ("int", "smallint", "tinyint"),
}
#: the source's columns that a written-back DataFrame carries and the sink ignores
SOURCE_ONLY = (
    "brokerName",
    "queueOffset",
    "msgId",
    "bornTimestamp",
    "storeTimestamp",
    "bornHost",
    "storeHost",
    "reconsumeTimes",
)

_EMPTY = pa.scalar("", pa.string())
_SEPARATORS = ("\x01", "\x02")


class RowError(InvalidArgumentError):
    """A row the sink cannot write; the message names the row and the column."""


@dataclass(frozen=True)
class ColumnPlan:
    """Which input columns are used, decided once from the DataFrame's schema."""

    columns: tuple[str, ...]
    keys_are_list: bool = False

    def has(self, name: str) -> bool:
        return name in self.columns


def plan_columns(fields: Sequence[tuple[str, str]], default_topic: str | None) -> ColumnPlan:
    """Check an input schema (``(name, simpleString type)`` pairs); raise naming the first
    problem: a missing body, an unknown column, a wrong type, no topic at all."""
    names = [name for name, _ in fields]
    if "body" not in names:
        raise InvalidArgumentError(
            f"the rocketlite sink needs a column 'body' (binary or string); the DataFrame has "
            f"{', '.join(names) or 'no columns'}. Rename or build it, e.g. "
            "df.selectExpr('CAST(value AS STRING) AS body')"
        )
    used = []
    keys_are_list = False
    for name, kind in fields:
        if name in SOURCE_ONLY:
            continue
        if name == "deliveryTimestamp":
            raise InvalidArgumentError(
                "column 'deliveryTimestamp' is not supported: rocketlite's gRPC sends and "
                "RocketMQ 4's remoting sends delay by level only; give a 'delayLevel' column "
                "(1..18: 1s 5s 10s 30s 1m ... 2h) instead"
            )
        allowed = ACCEPTED.get(name)
        if allowed is None:
            raise InvalidArgumentError(
                f"column {name!r} is not one the rocketlite sink writes; accepted columns: "
                f"{', '.join(ACCEPTED)} (and the source's {', '.join(SOURCE_ONLY)}, which are "
                "ignored). Drop it or fold it into body or properties"
            )
        if kind not in allowed:
            raise InvalidArgumentError(
                f"column {name!r} has type {kind}; the rocketlite sink takes "
                f"{' or '.join(allowed)} there. Cast it"
            )
        used.append(name)
        keys_are_list = keys_are_list or (name == "keys" and kind.startswith("array"))
    if default_topic is None and "topic" not in used:
        raise InvalidArgumentError(
            "no target topic: set the option topic, or give a 'topic' column (string)"
        )
    return ColumnPlan(tuple(used), keys_are_list)


@dataclass
class Encoded:
    """Rows as a send request's columns (see MessageColumns in proto/)."""

    bodies: bytes
    body_sizes: np.ndarray
    properties: bytes
    properties_sizes: np.ndarray
    tags: list[str]
    tag_indexes: np.ndarray | None

    @property
    def count(self) -> int:
        return len(self.body_sizes)

    @property
    def nbytes(self) -> int:
        return len(self.bodies) + len(self.properties)


def where(rows: np.ndarray, index: int, partition: int) -> str:
    """Names a row by its number in the task's partition (from 0)."""
    return f"row {int(rows[index])} of Spark partition {partition}"


def check_not_null(
    batch: pa.RecordBatch, name: str, rows: np.ndarray, partition: int, what: str
) -> None:
    column = batch.column(name)
    if column.null_count:
        index = int(np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False))[0])
        raise RowError(f"{where(rows, index, partition)} has a null {name}: {what}")


def encode_rows(
    batch: pa.RecordBatch, plan: ColumnPlan, rows: np.ndarray, partition: int
) -> Encoded:
    """The rows of ``batch`` (all for one queue) as send columns; RowError naming the row
    when one cannot be sent."""
    n = batch.num_rows
    check_not_null(batch, "body", rows, partition, "every message needs a body")
    body = _binary(batch.column("body"))
    parts = []
    tag_values: list[str] = [""]
    tag_indexes = None
    if plan.has("tags"):
        tags = pc.fill_null(batch.column("tags"), _EMPTY)
        _check_separators(tags, "tags", rows, partition)
        parts.append(_named("TAGS", tags))
        encoded = pc.dictionary_encode(tags)
        tag_values = encoded.dictionary.to_pylist()
        tag_indexes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int32)
    if plan.has("keys"):
        keys = batch.column("keys")
        if plan.keys_are_list:
            keys = pc.binary_join(keys, " ")
        keys = pc.fill_null(keys, _EMPTY)
        _check_separators(keys, "keys", rows, partition)
        parts.append(_named("KEYS", keys))
    parts.append(
        pc.binary_join_element_wise("UNIQ_KEY\x01", pa.array(new_unique_keys(n)), "\x02", "")
    )
    if plan.has("properties"):
        parts.append(_user_properties(batch.column("properties"), rows, partition))
    properties = pc.binary_join_element_wise(*parts, "") if len(parts) > 1 else parts[0]
    prop_blob, prop_sizes = _blob(properties)
    too_long = np.flatnonzero(prop_sizes > MAX_PROPERTIES_BYTES)
    if len(too_long):
        raise RowError(
            f"{where(rows, int(too_long[0]), partition)}: its properties, tags and keys "
            f"take {int(prop_sizes[too_long[0]])} bytes encoded, over RocketMQ's limit of "
            f"{MAX_PROPERTIES_BYTES}"
        )
    body_blob, body_sizes = _blob(body)
    return Encoded(body_blob, body_sizes, prop_blob, prop_sizes, tag_values, tag_indexes)


def queue_indexes(
    batch: pa.RecordBatch,
    plan: ColumnPlan,
    queues: int,
    rotation: int,
    batch_size: int,
    rows: np.ndarray,
    partition: int,
) -> np.ndarray:
    """Each row's queue, as an index into the topic's ``queues`` writable queues: its
    ``queueId``, else the hash of its ``shardingKey`` (RocketMQ's SelectMessageQueueByHash),
    else round robin, ``batch_size`` consecutive rows per queue from ``rotation`` on."""
    picked = (rotation + rows // batch_size) % queues
    if plan.has("shardingKey"):
        keys = batch.column("shardingKey")
        given = keys.is_valid().to_numpy(zero_copy_only=False)
        if given.any():
            encoded = pc.dictionary_encode(keys)
            hashes = queues_by_hash(encoded.dictionary.to_pylist() or [""], queues)
            indices = encoded.indices.fill_null(0).to_numpy(zero_copy_only=False)
            picked = np.where(given, hashes[indices], picked)
    if plan.has("queueId"):
        ids = batch.column("queueId")
        given = ids.is_valid().to_numpy(zero_copy_only=False)
        if given.any():
            values = ids.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
            bad = np.flatnonzero(given & ((values < 0) | (values >= queues)))
            if len(bad):
                raise RowError(
                    f"{where(rows, int(bad[0]), partition)} has queueId "
                    f"{int(values[bad[0]])}; the topic has {queues} writable queues "
                    f"(0..{queues - 1})"
                )
            picked = np.where(given, values, picked)
    return picked


def delay_levels(
    batch: pa.RecordBatch, plan: ColumnPlan, levels: int, rows: np.ndarray, partition: int
) -> np.ndarray:
    if not plan.has("delayLevel"):
        return np.zeros(batch.num_rows, np.int64)
    values = batch.column("delayLevel").fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    bad = np.flatnonzero((values < 0) | (values > levels))
    if len(bad):
        raise RowError(
            f"{where(rows, int(bad[0]), partition)} has delayLevel {int(values[bad[0]])}; "
            f"use 0 (now) or 1..{levels}"
        )
    return values


def _binary(values: pa.Array) -> pa.Array:
    if pa.types.is_string(values.type):
        return values.cast(pa.binary())
    if pa.types.is_large_string(values.type):
        return values.cast(pa.large_binary())
    return values


def _blob(values: pa.Array) -> tuple[bytes, np.ndarray]:
    """The items of a binary or string array back to back, and each one's size."""
    column = ByteColumn.from_arrow(values)
    return column.data, column.lengths()


def _named(name: str, values: pa.Array) -> pa.Array:
    """``NAME\\x01value\\x02`` for each non-empty value, "" for an empty one."""
    joined = pc.binary_join_element_wise(name + "\x01", values, "\x02", "")
    return pc.if_else(pc.equal(values, _EMPTY), _EMPTY, joined)


def _check_separators(values: pa.Array, name: str, rows: np.ndarray, partition: int) -> None:
    for separator in _SEPARATORS:
        hit = pc.match_substring(values, separator)
        if pc.any(hit).as_py():
            index = int(np.flatnonzero(hit.fill_null(False).to_numpy(zero_copy_only=False))[0])
            raise RowError(
                f"{where(rows, index, partition)}: {name} contains the byte "
                f"{separator!r}, which RocketMQ uses to separate properties"
            )


def _user_properties(column: pa.Array, rows: np.ndarray, partition: int) -> pa.Array:
    """Each row's map as ``name\\x01value\\x02...``, reserved names dropped."""
    offsets = column.offsets.to_numpy(zero_copy_only=False).astype(np.int64)
    start, end = int(offsets[0]), int(offsets[-1])
    names = column.keys.slice(start, end - start)
    values = pc.fill_null(column.items.slice(start, end - start), _EMPTY)
    offsets -= start
    rows = np.repeat(np.arange(len(column)), np.diff(offsets))
    for what, part in (("a property name", names), ("a property value", values)):
        for separator in _SEPARATORS:
            hit = (
                pc.match_substring(part, separator).fill_null(False).to_numpy(zero_copy_only=False)
            )
            if hit.any():
                raise RowError(
                    f"{where(rows, int(rows[np.flatnonzero(hit)[0]]), partition)}: "
                    f"{what} contains the byte {separator!r}, which RocketMQ uses to "
                    "separate properties"
                )
    empty = pc.equal(names, _EMPTY).fill_null(True).to_numpy(zero_copy_only=False)
    if empty.any():
        raise RowError(
            f"{where(rows, int(rows[np.flatnonzero(empty)[0]]), partition)} has a "
            "property with an empty name"
        )
    text = pc.binary_join_element_wise(names, "\x01", values, "\x02", "")
    reserved = pc.is_in(names, pa.array(sorted(RESERVED_PROPERTIES)))
    text = pc.if_else(reserved, _EMPTY, text)
    lists = pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), text, mask=column.is_null())
    return pc.fill_null(pc.binary_join(lists, ""), _EMPTY)
