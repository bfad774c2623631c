"""A columnar send's buffers go into records whole (ByteColumn), its tags as a dictionary
(TagColumn): the records, CRCs, tag codes and checks must be exactly those of the same batch
given as one object per message."""

from __future__ import annotations

import numpy as np
import pytest

from rmq_spark.codec import record as r
from rmq_spark.codec.batch_encode import SMALL_BATCH, finish_batch, prepare_batch
from rmq_spark.codec.byte_column import ByteColumn
from rmq_spark.codec.properties import MAX_PROPERTIES_BYTES, encode_properties
from rmq_spark.codec.tag_column import TagColumn, hash_codes
from rmq_spark.codec.taghash import tag_hash_codes
from rmq_spark.errors import InvalidArgumentError


def column(items: list[bytes]) -> ByteColumn:
    return ByteColumn(b"".join(items), np.cumsum([len(x) for x in items], dtype=np.int64))


def test_a_column_is_the_sequence_of_its_items():
    items = [b"ab", b"", b"cde", b"f"]
    col = column(items)
    assert list(col) == items and col.to_list() == items
    assert [col[i] for i in range(4)] == items and col[-1] == b"f" and col[1:3] == items[1:3]
    assert col.lengths().tolist() == [2, 0, 3, 1]
    assert col.to_arrow().to_pylist() == items
    assert ByteColumn.of(items).to_list() == items and ByteColumn.of(col) is col
    with pytest.raises(IndexError):
        col[4]


def test_a_column_must_cover_its_buffer_exactly():
    with pytest.raises(ValueError, match="end at 3 but the buffer has 4"):
        ByteColumn(b"abcd", np.array([1, 3]))


@pytest.mark.parametrize("n", [1, SMALL_BATCH - 1, SMALL_BATCH, 500])
def test_records_from_columns_equal_records_from_lists(n):
    rng = np.random.default_rng(n)
    bodies = [rng.bytes(int(k)) for k in rng.integers(0, 300, n)]
    props = [encode_properties({"TAGS": f"T{i % 3}", "UNIQ_KEY": f"{i:032X}"}) for i in range(n)]
    stamped = []
    for b, p in ((bodies, props), (column(bodies), column(props))):
        batch = prepare_batch("Topic", 3, b, p, born_timestamps=7, flags=list(range(n)))
        phys = 1000 + np.concatenate([[0], np.cumsum(batch.sizes)[:-1]])
        stamped.append(bytes(finish_batch(batch, 42, phys, 99)))
    assert stamped[0] == stamped[1]
    records = list(r.iter_records(stamped[1]))
    assert [x.body for x in records] == bodies
    # the stored BODYCRC is RocketMQ's crc32 of each body
    assert [x.body_crc for x in records] == [r.crc32_body(b) for b in bodies]


def test_column_properties_over_the_limit_are_refused_naming_the_message():
    props = [b"a\x01b\x02", b"x" * (MAX_PROPERTIES_BYTES + 1)]
    with pytest.raises(InvalidArgumentError, match="message 1: properties take 32768 bytes"):
        prepare_batch("T", 0, column([b"1", b"2"]), column(props))


def test_column_counts_must_match():
    with pytest.raises(InvalidArgumentError, match="1 property blobs for 2 message bodies"):
        prepare_batch("T", 0, column([b"1", b"2"]), column([b""]))


@pytest.mark.parametrize(
    ("values", "indexes", "expected"),
    [
        (["TagA"], None, ["TagA"] * 3),
        ([""], None, [None] * 3),
        (["A", "", "B"], np.array([2, 1, 0, 0]), ["B", None, "A", "A"]),
    ],
)
def test_tag_columns_give_the_codes_of_their_tags(values, indexes, expected):
    tags = TagColumn(values, indexes, len(expected))
    assert list(tags) == expected and [tags[i] for i in range(len(expected))] == expected
    assert hash_codes(tags).tolist() == tag_hash_codes(expected).tolist()
