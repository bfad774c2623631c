"""One staged send of the Spark sink and the I/O of its rows: the forms they are held in,
the copies a commit writes to the real queue, and the reads that count or fetch them again.
:mod:`rmq_spark.broker.sink_transactions.service` decides when.

* :func:`final_form` makes, at staging time, what the commit will write: a plain send's
  records laid out for their real queue (:class:`Ready`, only the PREPARED_TX_OFFSET left to
  set), a delayed send's columns (:class:`Staged`).
* :func:`write_copies` writes a send (or its rows from ``skip`` on) to its real queue, or
  to its delay level's schedule queue, with the commit sys flag and the staged record's
  commit-log offset as PREPARED_TX_OFFSET. Rows not held in memory are read back from
  ``RMQ_SYS_SINK_HALF_TOPIC`` (:func:`read_back`), the marks stripped from the first.
* :func:`copies_since` counts the copies of sends already in a queue, so a commit cut short
  writes only the missing ones.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import pyarrow as pa

from rmq_spark.broker.delivery.schedule import DelayScheduler
from rmq_spark.broker.sink_transactions import state as ss
from rmq_spark.broker.write_path import WritePath
from rmq_spark.codec import record as rec
from rmq_spark.codec.arrow_decode import record_parts
from rmq_spark.codec.batch_encode import EncodedBatch, encode_unstamped, prepare_batch
from rmq_spark.codec.byte_column import ByteColumn
from rmq_spark.codec.tag_column import TagColumn, hash_codes
from rmq_spark.errors import StoreError
from rmq_spark.names import SCHEDULE_TOPIC
from rmq_spark.store import MessageStore
from rmq_spark.structs import PullStatus

_READ_COUNT = 4_096
_READ_BYTES = 64 << 20


class ColumnSend(Protocol):
    """A checked columnar send, as staging reads it (rocketlite.v1's ColumnBatch)."""

    bodies: ByteColumn
    properties: ByteColumn
    tags: TagColumn
    born_timestamps: np.ndarray | int
    flags: np.ndarray | int
    delay_level: int


@dataclass
class Staged:
    """The messages of one staged send as the commit writes them."""

    bodies: ByteColumn
    properties: ByteColumn
    tags: Any  # a sequence of tag values, one per message
    born_timestamps: np.ndarray | int
    flags: np.ndarray | int

    @property
    def nbytes(self) -> int:
        return len(self.bodies.data) + len(self.properties.data)


@dataclass
class Ready:
    """A staged send's records laid out for their real queue, waiting for their offsets."""

    records: EncodedBatch
    tag_codes: np.ndarray

    @property
    def nbytes(self) -> int:
        return self.records.nbytes


@dataclass
class Block:
    """One staged send: ``count`` records from ``half_first`` in the staging queue."""

    sink_id: str
    transaction_id: str
    sequence: int
    half_first: int
    count: int
    marker: int  # commit-log offset of the first staged record: the copies' PREPARED_TX_OFFSET
    topic: str
    queue_id: int
    delay: int
    marks_len: int
    born_host: str
    staged_at_ms: int
    held: Staged | Ready | None = None


def final_form(
    store_host: str, topic: str, queue_id: int, batch: ColumnSend, born_host: str
) -> tuple[Staged | Ready, np.ndarray | None, np.ndarray]:
    """What the commit will write, made now: the records laid out for their queue (or, for a
    delayed send, its columns), with the bodies' CRCs and tag codes that the staged copy
    shares (no CRCs for a delayed send)."""
    codes = hash_codes(batch.tags)
    if batch.delay_level:
        staged = Staged(
            batch.bodies, batch.properties, batch.tags, batch.born_timestamps, batch.flags
        )
        return staged, None, codes
    final = prepare_batch(
        topic,
        queue_id,
        batch.bodies,
        batch.properties,
        born_host=born_host,
        store_host=store_host,
        # numpy arrays, which prepare_batch takes, though it annotates Sequence[int]
        born_timestamps=batch.born_timestamps,
        flags=batch.flags,
        sysflag=rec.TRANSACTION_COMMIT_TYPE,
    )
    return Ready(encode_unstamped(final), codes), final.headers["body_crc"], codes


def queue_end(store: MessageStore, topic: str, queue_id: int) -> int:
    """The queue's next offset; 0 when the topic does not exist."""
    if store.topics.find(topic) is None:
        return 0
    return store.max_offset(topic, queue_id)


def landing(delays: DelayScheduler, block: Block) -> tuple[str, int]:
    """The queue the commit writes ``block`` to: its real one, or its delay level's."""
    if block.delay:
        return SCHEDULE_TOPIC, delays.clamp_level(block.delay) - 1
    return block.topic, block.queue_id


def check_still_staged(store: MessageStore, blocks: list[Block]) -> None:
    """Raise StoreError when rows of ``blocks`` that must be read back were deleted by the
    store's retention."""
    to_read = [b for b in blocks if b.held is None]
    if not to_read:
        return
    first = store.min_offset(ss.HALF_TOPIC, 0)
    lost = next((b for b in to_read if b.half_first < first), None)
    if lost is not None:
        raise StoreError(
            f"staged messages of transaction {lost.transaction_id!r} were deleted by the "
            f"store's retention before the commit; the batch must be written again (keep "
            "--sink-transaction-timeout-ms below the retention time)"
        )


def write_copies(writes: WritePath, delays: DelayScheduler, block: Block, skip: int) -> None:
    """Write the rows of ``block`` from its ``skip``-th on to the queue the commit lands
    them in."""
    held = block.held
    if isinstance(held, Ready) and not skip:
        writes.put_encoded(block.topic, block.queue_id, held.records, held.tag_codes)
        return
    staged = held if isinstance(held, Staged) else read_back(writes.store, block)
    if skip:
        staged = sliced(staged, skip)
    fields = {
        "born_host": block.born_host,
        "born_timestamps": staged.born_timestamps,
        "flags": staged.flags,
        "sysflag": rec.TRANSACTION_COMMIT_TYPE,
        "prepared_tx_offset": block.marker,
    }
    if block.delay:
        delays.submit(
            block.topic,
            block.queue_id,
            staged.bodies,
            staged.properties,
            staged.tags,
            block.delay,
            **fields,
        )
    else:
        writes.put_messages(
            block.topic, block.queue_id, staged.bodies, staged.properties, staged.tags, **fields
        )


def read_back(store: MessageStore, block: Block) -> Staged:
    """The rows of ``block`` read from the staging queue, without the first one's marks."""
    parts = []
    offset, remaining = block.half_first, block.count
    while remaining:
        got = store.get_messages(
            ss.HALF_TOPIC, 0, offset, max_count=min(remaining, _READ_COUNT),
            max_bytes=_READ_BYTES,
        )  # fmt: skip
        if got.status != PullStatus.FOUND or not got.count:
            raise StoreError(
                f"staged messages of transaction {block.transaction_id!r} from offset "
                f"{offset} of {ss.HALF_TOPIC} are gone (deleted by retention?); the "
                "transaction cannot be committed"
            )
        assert got.sizes is not None  # it has records
        parts.append(record_parts(got.data, got.record_starts(), got.sizes))
        offset += got.count
        remaining -= got.count
    props = ByteColumn.from_arrow(pa.concat_arrays([p.properties for p in parts]))
    return Staged(
        bodies=ByteColumn.from_arrow(pa.concat_arrays([p.body for p in parts])),
        properties=unmarked_first(props, block.marks_len),
        tags=pa.concat_arrays([p.tags for p in parts]).to_pylist(),
        born_timestamps=np.concatenate([p.born_timestamp for p in parts]),
        flags=np.concatenate([p.flag for p in parts]),
    )


def copies_since(
    store: MessageStore, topic: str, queue_id: int, floor: int, markers: Collection[int]
) -> dict[int, int]:
    """Per marker of ``markers``, how many records from offset ``floor`` of the queue have
    it as their PREPARED_TX_OFFSET: the copies of those staged sends a commit already
    wrote. One pass over the queue for all of them."""
    wanted = set(markers)
    found = dict.fromkeys(wanted, 0)
    offset = floor
    end = queue_end(store, topic, queue_id)
    while offset < end:
        got = store.get_messages(
            topic, queue_id, offset, max_count=_READ_COUNT, max_bytes=_READ_BYTES
        )
        if not got.count:
            break
        for start in got.record_starts():
            marker = rec.decode_record(got.data, int(start), check_crc=False).prepared_tx_offset
            if marker in wanted:
                found[marker] += 1
        offset = got.next_begin_offset
    return found


def sliced(staged: Staged, skip: int) -> Staged:
    """``staged`` without its first ``skip`` messages."""

    def part(values: np.ndarray | int) -> np.ndarray | int:
        return values if isinstance(values, int) else values[skip:]

    return Staged(
        bodies=ByteColumn.from_arrow(staged.bodies.to_arrow().slice(skip)),
        properties=ByteColumn.from_arrow(staged.properties.to_arrow().slice(skip)),
        tags=list(staged.tags)[skip:],
        born_timestamps=part(staged.born_timestamps),
        flags=part(staged.flags),
    )


def marked_first(properties: ByteColumn, marks: bytes) -> ByteColumn:
    """``properties`` with ``marks`` after the first item's own."""
    first_end = int(properties.ends[0])
    data = properties.data
    return ByteColumn(data[:first_end] + marks + data[first_end:], properties.ends + len(marks))


def unmarked_first(properties: ByteColumn, marks_len: int) -> ByteColumn:
    """``properties`` without the last ``marks_len`` bytes of the first item."""
    first_end = int(properties.ends[0])
    data = properties.data
    return ByteColumn(data[: first_end - marks_len] + data[first_end:], properties.ends - marks_len)
