"""What a send puts in each request (rmq_spark.client.send_chunks): columns or Messages,
split by the request limit and by the broker's commit-log segment."""

from __future__ import annotations

import pytest

from rmq_spark.client import Message
from rmq_spark.client.message import ColumnsChunk
from rmq_spark.client.send_chunks import (
    RECORD_OVERHEAD_BYTES,
    SEGMENT_END_MARKER_BYTES,
    encode_requests,
    fit_segment,
)

NOW = 1_700_000_000_000


def bodies(chunks) -> list[bytes]:
    out = []
    for chunk in chunks:
        messages = chunk.messages if isinstance(chunk, ColumnsChunk) else chunk
        out += [bytes(m.body) for m in messages]
    return out


@pytest.mark.parametrize(
    ("count", "columns_min_batch", "columns"),
    [(1, 16, False), (15, 16, False), (16, 16, True), (100, 16, True), (100, 0, False)],
)
def test_batches_go_as_columns_from_the_minimum_size(count, columns_min_batch, columns) -> None:
    messages = [Message(b"m%03d" % i, tags="T") for i in range(count)]
    chunks = encode_requests(messages, NOW, 1 << 20, columns_min_batch)
    assert len(chunks) == 1
    assert isinstance(chunks[0], ColumnsChunk) is columns
    assert bodies(chunks) == [m.body for m in messages]


@pytest.mark.parametrize("columns_min_batch", [0, 16])
def test_requests_stay_under_the_limit_and_keep_the_order(columns_min_batch) -> None:
    messages = [Message(b"x" * 1000, keys=f"k{i}") for i in range(40)]
    chunks = encode_requests(messages, NOW, 8_000, columns_min_batch)
    assert len(chunks) > 1
    assert bodies(chunks) == [m.body for m in messages]


@pytest.mark.parametrize("columns_min_batch", [0, 16])
def test_a_chunk_is_split_to_fit_the_segment(columns_min_batch) -> None:
    messages = [Message(b"%04d" % i + b"." * 996) for i in range(40)]
    (chunk,) = encode_requests(messages, NOW, 1 << 20, columns_min_batch)
    assert fit_segment(chunk, 0, "T") == [chunk]  # segment size unknown: as it is
    assert fit_segment(chunk, 1 << 20, "T") == [chunk]  # fits
    segment = 16 * 1024
    parts = fit_segment(chunk, segment, "T")
    assert len(parts) > 1
    assert bodies(parts) == [m.body for m in messages]
    budget = segment - SEGMENT_END_MARKER_BYTES
    for part in parts:  # each part's records, counted high, fit the segment
        assert len(bodies([part])) * (1000 + RECORD_OVERHEAD_BYTES) <= budget
