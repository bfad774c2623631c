"""Tag hash codes must equal Java's String.hashCode(), or brokers would filter wrongly.

Every expected value below came from running ``String.hashCode()`` on OpenJDK 17.0.15
(``java H.java`` printing ``s.hashCode()`` for each string); they are not computed here.
"""

from __future__ import annotations

import numpy as np
import pytest

from rmq_spark.codec.java_hash import java_string_hash
from rmq_spark.codec.taghash import tag_hash_code, tag_hash_codes

LONG_ASCII = "hello world, this is a rather long tag that overflows"
ALNUM = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"

# (string, Java 17 String.hashCode()) -- values from Java, baked in as literals.
JAVA_HASHES = [
    pytest.param("TagA", 2598919, id="TagA"),
    pytest.param("TagB", 2598920, id="TagB"),
    pytest.param("TagZ", 2598944, id="TagZ"),
    pytest.param("", 0, id="empty"),
    pytest.param("a", 97, id="a"),
    pytest.param("zzzzzzz", 215481018, id="zzzzzzz-overflows-positive"),
    pytest.param(LONG_ASCII, 1954572829, id="long-ascii-53-chars"),
    pytest.param(ALNUM, -650586465, id="alnum-62-chars-negative"),
    pytest.param("polygenelubricants", -2147483648, id="hash-is-int-min"),
    pytest.param("FB", 2236, id="FB"),
    pytest.param("Ea", 2236, id="Ea-collides-with-FB"),
    pytest.param("日本語", 25921943, id="cjk"),
    pytest.param("héllo", 103094734, id="latin1-accent"),
    pytest.param("ÿÿÿÿÿ", 243347775, id="latin1-high"),
    # outside the BMP: Java hashes the two UTF-16 surrogate units (U+1F600 = D83D DE00)
    pytest.param("😀", 1772899, id="emoji-surrogate-pair"),
    pytest.param("tag🚀x", -826371813, id="emoji-inside-ascii-negative"),
]


@pytest.mark.parametrize(("text", "java"), JAVA_HASHES)
def test_java_string_hash_matches_java_17(text: str, java: int) -> None:
    assert java_string_hash(text) == java


@pytest.mark.parametrize(("text", "java"), JAVA_HASHES)
def test_tag_hash_code_matches_java_17(text: str, java: int) -> None:
    assert tag_hash_code(text) == java


def test_emoji_is_hashed_as_two_utf16_units_not_one_code_point() -> None:
    # 31 * 0xD83D + 0xDE00 == 1772899 (Java's value); hashing the code point would give 0x1F600
    assert 31 * 0xD83D + 0xDE00 == 1772899
    assert java_string_hash("😀") == 1772899
    assert java_string_hash("😀") != 0x1F600


def test_hashes_are_signed_32_bit() -> None:
    for param in JAVA_HASHES:
        value = param.values[1]
        assert -(2**31) <= java_string_hash(param.values[0]) == value < 2**31


@pytest.mark.parametrize("tags", [None, ""])
def test_no_tag_has_code_zero(tags: str | None) -> None:
    assert tag_hash_code(tags) == 0


def test_negative_hashes_sign_extend_to_64_bits() -> None:
    code = tag_hash_code("polygenelubricants")
    assert code == -2147483648
    assert code & 0xFFFFFFFFFFFFFFFF == 0xFFFFFFFF80000000
    assert tag_hash_code(ALNUM) & 0xFFFFFFFFFFFFFFFF == 0xFFFFFFFFD938D69F
    codes = tag_hash_codes([ALNUM, "polygenelubricants"])
    assert codes.dtype == np.int64
    assert codes.astype(">i8").tobytes().hex() == "ffffffffd938d69f" + "ffffffff80000000"


def test_tag_hash_codes_over_a_list() -> None:
    tags = ["TagA", None, "", "polygenelubricants", "TagA", "日本語", "tag🚀x", None]
    codes = tag_hash_codes(tags)
    assert codes.dtype == np.int64
    assert codes.tolist() == [2598919, 0, 0, -2147483648, 2598919, 25921943, -826371813, 0]


def test_tag_hash_codes_accepts_any_iterable_and_empty() -> None:
    assert tag_hash_codes(iter(["TagB", "FB"])).tolist() == [2598920, 2236]
    empty = tag_hash_codes([])
    assert empty.dtype == np.int64
    assert empty.shape == (0,)
