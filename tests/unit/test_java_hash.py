"""Java's String.hashCode: the scalar reference and the vectorised form must agree with
Java, and so with each other, and the queue a sharding key picks follows from it.

The hash values are Java's own (OpenJDK 17, ``s.hashCode()``), as in test_taghash.py and
test_index_file.py; the queue indexes are ``Math.abs(hash % n)`` as RocketMQ's
SelectMessageQueueByHash computes it.
"""

from __future__ import annotations

import numpy as np
import pytest

from rmq_spark.codec.java_hash import (
    java_string_hash,
    java_string_hashes,
    queue_by_hash,
    queues_by_hash,
)

# (text, Java 17 String.hashCode())
JAVA_HASHES = [
    ("TagA", 2598919),
    ("", 0),
    ("a", 97),
    ("FB", 2236),
    ("Ea", 2236),
    ("polygenelubricants", -(2**31)),
    ("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", -650586465),
    ("héllo", 103094734),
    ("ÿÿÿÿÿ", 243347775),
    ("日本語", 25921943),
    ("T#a", 81906),
    ("orders#o-1", 772470709),
    ("日本#😀", -891112065),  # a surrogate pair after CJK
    ("😀", 1772899),  # U+1F600 is hashed as its two UTF-16 units, D83D DE00
    ("tag🚀x", -826371813),
]


@pytest.mark.parametrize(("text", "java"), JAVA_HASHES)
def test_scalar_equals_java(text: str, java: int) -> None:
    assert java_string_hash(text) == java


def test_vectorised_equals_java_and_the_scalar() -> None:
    texts = [text for text, _ in JAVA_HASHES]
    hashes = java_string_hashes(texts)
    assert hashes.dtype == np.int32
    assert hashes.tolist() == [java for _, java in JAVA_HASHES]
    tricky = ["", "a", "", "x😀y", "\ud83d", "\udfff", "z" * 10_000, "é" * 333, "😀" * 7, ""]
    assert java_string_hashes(tricky).tolist() == [java_string_hash(t) for t in tricky]
    assert java_string_hashes([]).tolist() == []
    assert java_string_hashes(iter(["a", "b"])).tolist() == [97, 98]


def test_vectorised_in_short_runs(monkeypatch) -> None:
    # Long batches are hashed a run of texts at a time; runs must not change a hash.
    monkeypatch.setattr("rmq_spark.codec.java_hash._RUN_CHARS", 5)
    texts = ["", "abcdefgh", "x", "", "日本😀", "polygenelubricants", "\udfff", "q" * 12]
    assert java_string_hashes(texts).tolist() == [java_string_hash(t) for t in texts]


@pytest.mark.parametrize(
    ("key", "queues", "index"),
    [
        ("TagA", 4, 3),  # 2598919 % 4
        ("a", 8, 1),
        ("polygenelubricants", 4, 0),  # |Integer.MIN_VALUE % 4| = 0
        ("polygenelubricants", 3, 2),  # |-2147483648 % 3| = |-2| = 2
        ("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", 4, 1),  # |-1|
        ("日本#😀", 7, 4),  # |-891112065 % 7| = |-4| = 4
        ("😀", 5, 4),  # 1772899 % 5
    ],
)
def test_queue_by_hash_is_selectmessagequeuebyhash(key: str, queues: int, index: int) -> None:
    assert queue_by_hash(key, queues) == index
    assert queues_by_hash([key, key], queues).tolist() == [index, index]
