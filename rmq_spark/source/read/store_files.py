"""Range reads from a store directory (option ``storePath``), opened read-only where the
task runs (:class:`~rmq_spark.store.offline.StoreView`): the executor must see the
directory at the same path. The consume queue says where the records are, the commit log's
mapped segments hold them; the checks and the data loss are those of a pull. With a SQL92
selector (option ``sqlFilter``) the task picks the records by their stored properties
before decoding them (:func:`~rmq_spark.source.read.selection.decode_selected`)."""

from __future__ import annotations

from collections.abc import Generator

import numpy as np
import pyarrow as pa

from rmq_spark.codec.arrow_decode import decode_records
from rmq_spark.errors import RocketliteError
from rmq_spark.filter import Selector, compile_selector
from rmq_spark.offsets.spark import DataLoss
from rmq_spark.source.options import SourceOptions
from rmq_spark.source.planning import QueueRange
from rmq_spark.source.read.range_reader import PULL_MAX_BYTES, report_loss
from rmq_spark.source.read.selection import decode_selected
from rmq_spark.source.store_access import open_store_view
from rmq_spark.store.offline import StoreView
from rmq_spark.structs import MessageQueue

__all__ = ["StoreFileReader"]


class StoreFileReader:
    """Reads ranges from the store directory of ``options`` (one broker's). It owns the
    view it opens."""

    def __init__(self, options: SourceOptions, columns: tuple[str, ...]) -> None:
        self.view: StoreView = open_store_view(options)
        self.columns = columns
        self._store_path = options.store_path
        self._fail_on_data_loss = options.fail_on_data_loss
        selector = options.selector
        self._selector: Selector | None = None if selector is None else compile_selector(selector)

    def read_range(self, queue_range: QueueRange) -> Generator[pa.RecordBatch, None, None]:
        mq, offset, end = queue_range.mq, queue_range.start, queue_range.end
        low, high = self.view.queue_range(mq.topic, mq.queue_id)
        if offset < low:
            self._lost(DataLoss(mq, "deleted", offset, low))
            offset = low
        if high < end:
            self._lost(DataLoss(mq, "reset", end, high))
            end = high
        while offset < end:
            found = self.view.read_records(mq.topic, mq.queue_id, offset, end, PULL_MAX_BYTES)
            if self._selector is None:
                records = decode_records(found.buffer, sizes=found.sizes, columns=self.columns)
                expected = np.arange(offset, offset + found.count)
            else:
                records, picked = decode_selected(
                    found.buffer, found.sizes, self._selector, self.columns
                )
                expected = offset + np.flatnonzero(picked)
            self._check_offsets(mq, records, expected)
            yield records
            offset += found.count

    def _check_offsets(
        self, mq: MessageQueue, records: pa.RecordBatch, expected: np.ndarray
    ) -> None:
        """Each record read must hold the offset its consume-queue entry is at."""
        stamped = records.column("queueOffset").to_numpy()
        if not np.array_equal(stamped, expected):
            at = int(np.flatnonzero(stamped != expected)[0])
            raise RocketliteError(
                f"the record at offset {int(expected[at])} of {mq.describe()} in store "
                f"directory {self._store_path} says it is at offset {int(stamped[at])}; the "
                "store's consume queue and commit log disagree"
            )

    def _lost(self, loss: DataLoss) -> None:
        report_loss(loss, fail_on_data_loss=self._fail_on_data_loss)

    def close(self) -> None:
        self.view.close()
