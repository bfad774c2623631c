"""Range reads from a broker's files on this host (short-circuit reads): the broker checked
the task's rights as for a pull and passed the files (:mod:`rmq_spark.client.short_circuit`).

:func:`open_short_circuit` says whether a broker can be read so (its socket is here and
answers as that broker). :class:`ShortCircuitReader` reads with it, and pulls over gRPC
(its ``fallback``) the rest of a range it cannot read so: on
:class:`~rmq_spark.client.short_circuit.ShortCircuitUnavailable`. Data loss is what a pull
would report: a start below the queue's min (deleted), a queue that ends before the range
does (reset). With a SQL92 selector (option ``sqlFilter``) the task picks the records
itself, by their stored properties, before decoding them
(:func:`~rmq_spark.source.read.selection.decode_selected`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Generator
from dataclasses import replace

import numpy as np
import pyarrow as pa

from rmq_spark.client.connection import Connection
from rmq_spark.client.short_circuit import ShortCircuit, ShortCircuitUnavailable
from rmq_spark.codec.arrow_decode import decode_records
from rmq_spark.codec.taghash import tag_hash_codes
from rmq_spark.errors import RocketliteError
from rmq_spark.filter import compile_selector
from rmq_spark.filter.stored import candidates, record_starts
from rmq_spark.offsets.spark import DataLoss
from rmq_spark.source.options import SourceOptions
from rmq_spark.source.planning import QueueRange
from rmq_spark.source.read.pulls import GrpcReader
from rmq_spark.source.read.range_reader import PULL_MAX_BYTES, report_loss
from rmq_spark.source.read.selection import decode_selected
from rmq_spark.wire.proto_gen.rocketlite.v1 import admin_pb2

log = logging.getLogger("rmq_spark.source")

__all__ = ["ShortCircuitReader", "open_short_circuit"]


def open_short_circuit(conn: Connection, options: SourceOptions) -> ShortCircuit | None:
    """A short-circuit connection to the broker behind ``conn`` when this task runs on its
    host (its socket is here and answers as that broker), else None: pull."""
    if not options.short_circuit:
        return None
    try:
        info = conn.call(conn.admin.GetBrokerInfo, admin_pb2.GetBrokerInfoRequest())
    except RocketliteError:
        return None  # the pulls will say what is wrong
    path = info.short_circuit_socket
    if not path or not os.path.exists(path):
        return None
    try:
        return ShortCircuit(
            path, info.broker_name, access_key=options.access_key, secret_key=options.secret_key
        )
    except ShortCircuitUnavailable as exc:
        log.info("short-circuit reads of %s are unavailable (%s); pulling", conn.endpoint, exc)
        return None


class ShortCircuitReader:
    """Reads ranges of one broker from its files through ``sc``; pulls with ``fallback``
    what it cannot read so. It owns both."""

    def __init__(
        self,
        sc: ShortCircuit,
        fallback: GrpcReader,
        options: SourceOptions,
        columns: tuple[str, ...],
    ) -> None:
        self.sc = sc
        self.fallback = fallback
        self.columns = columns
        self._fail_on_data_loss = options.fail_on_data_loss
        tags = options.subscription.tags
        self._tag_codes = None if tags is None else tag_hash_codes(sorted(tags))
        selector = options.selector
        self._selector = None if selector is None else compile_selector(selector)

    def read_range(self, queue_range: QueueRange) -> Generator[pa.RecordBatch, None, None]:
        mq, offset, end = queue_range.mq, queue_range.start, queue_range.end
        done = offset  # what is before it was yielded (or lost)
        try:
            while offset < end:
                with self.sc.open_range(mq, offset, end) as local:
                    if offset < local.min_offset:
                        self._lost(DataLoss(mq, "deleted", offset, local.min_offset))
                        offset = done = local.min_offset
                        continue
                    if local.end <= offset:  # the queue ends before the range does
                        self._lost(DataLoss(mq, "reset", end, local.max_offset))
                        return
                    held = bytearray()  # records to select from, copied out of the files
                    held_sizes: list[np.ndarray] = []
                    while offset < local.end:
                        data, sizes, offset = local.read(offset, PULL_MAX_BYTES, self._tag_codes)
                        if self._selector is None:
                            if len(sizes):
                                yield decode_records(data, sizes=sizes, columns=self.columns)
                            done = offset
                            continue
                        if len(sizes):  # the records worth a look, copied out of the files
                            self._hold(data, sizes, held, held_sizes)
                        if len(held) >= PULL_MAX_BYTES or offset >= local.end:
                            # the selector over many reads at once: its fixed costs once
                            if held_sizes:
                                yield self._selected(held, held_sizes)
                            held, held_sizes, done = bytearray(), [], offset
        except ShortCircuitUnavailable as exc:
            log.info("short-circuit read of %s stopped at %d (%s); pulling the rest",
                     mq.describe(), done, exc)  # fmt: skip
            yield from self.fallback.read_range(replace(queue_range, start=done))

    def _hold(
        self,
        data: bytes | memoryview,
        sizes: np.ndarray,
        held: bytearray,
        held_sizes: list[np.ndarray],
    ) -> None:
        """Add the records of ``data`` the selector may pick to ``held``: those holding the
        bytes it needs (searched in the mapped file), else all."""
        assert self._selector is not None
        starts = record_starts(sizes)
        look_at = candidates(data, starts, self._selector, sizes)
        if look_at is None:
            held += data
            held_sizes.append(sizes)
            return
        for at in look_at.tolist():
            held += data[int(starts[at]) : int(starts[at] + sizes[at])]
        held_sizes.append(sizes[look_at])

    def _selected(self, held: bytearray, sizes: list[np.ndarray]) -> pa.RecordBatch:
        assert self._selector is not None
        joined = np.concatenate(sizes)
        return decode_selected(held, joined, self._selector, self.columns, look_at_all=True)[0]

    def _lost(self, loss: DataLoss) -> None:
        report_loss(loss, fail_on_data_loss=self._fail_on_data_loss)

    def close(self) -> None:
        try:
            self.fallback.close()
        finally:
            self.sc.close()
