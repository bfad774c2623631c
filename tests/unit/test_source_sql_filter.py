"""The option ``sqlFilter`` without Spark: its checks at ``load()``, the one selector a read
applies with a tag filter, when brokers through a name server are not given it, which
broker answers mean "this broker does not filter by SQL92", and a task picking records by
their stored properties before decoding them."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from rmq_spark.client.remoting.transport import RemotingError
from rmq_spark.codec.properties import encode_properties
from rmq_spark.codec.record import Record, encode_record
from rmq_spark.errors import FilterNotSupportedError, InvalidArgumentError, UnavailableError
from rmq_spark.filter import compile_selector
from rmq_spark.source.options import SourceOptions
from rmq_spark.source.read.selection import decode_selected, keep_selected
from rmq_spark.source.sql_filter import (
    refuses_sql92,
    selector_text,
    task_only_reason,
)

BASE = {"endpoints": "127.0.0.1:10911", "topic": "orders"}


def parse(streaming: bool = True, **options: str) -> SourceOptions:
    return SourceOptions.parse({**BASE, **options}, streaming)


@pytest.mark.parametrize(
    ("text", "column", "near"),
    [
        ("region = 'eu' AND", 18, "the end of the text"),
        ("region != 'eu'", 8, "'!='"),
        ('region = "eu"', 10, "'\"'"),
        ("amount > 5 LIKE 'x%'", 12, "'LIKE'"),
        ("NOT region = 'eu'", 12, "'='"),
        ("region IN (1, 2)", 12, "'1'"),
        ("region = 'eu", 10, '"\'eu"'),
        ("amount BETWEEN 10 AND 1", 8, "'BETWEEN'"),
    ],
)
def test_a_malformed_selector_fails_naming_the_option_column_and_token(text, column, near):
    for streaming in (True, False):
        with pytest.raises(InvalidArgumentError) as refused:
            parse(streaming, sqlFilter=text)
        message = str(refused.value)
        assert message.startswith("option sqlFilter is not a valid SQL92 selector: "), message
        assert f"at column {column}, near {near}: " in message, message
        assert repr(text) in message


def test_an_empty_selector_is_refused_saying_what_selects_everything():
    with pytest.raises(InvalidArgumentError, match=r"sqlFilter.*empty; select every message"):
        parse(sqlFilter="  ")


def test_the_selector_a_read_applies_and_its_pulls():
    plain = parse()
    assert plain.sql_filter is None and plain.selector is None
    assert plain.pull_filter() == ("TAG", "*")
    assert parse(subExpression="a || b").pull_filter() == ("TAG", "a || b")
    opts = parse(False, sqlFilter="region = 'eu'")
    assert opts.selector == "region = 'eu'"
    assert opts.pull_filter() == ("SQL92", "region = 'eu'")
    both = parse(sqlFilter="region = 'eu'", subExpression="paid || new")
    assert both.pull_filter() == ("SQL92", "TAGS IN ('new', 'paid') AND (region = 'eu'\n)")


@pytest.mark.parametrize(
    ("sql", "tags", "expected"),
    [
        (None, None, None),
        (None, {"a"}, None),  # a tag filter alone stays a tag filter
        ("x = '1'", None, "x = '1'"),
        ("x = '1'", {"it's"}, "TAGS IN ('it''s') AND (x = '1'\n)"),
        # a comment at the end of the selector cannot swallow the closing parenthesis
        ("x = '1' -- note", {"a"}, "TAGS IN ('a') AND (x = '1' -- note\n)"),
        ("x = '1' OR y = '2'", {"b", "a"}, "TAGS IN ('a', 'b') AND (x = '1' OR y = '2'\n)"),
    ],
)
def test_selector_text(sql, tags, expected):
    text = selector_text(sql, None if tags is None else frozenset(tags))
    assert text == expected
    if text is not None:
        compile_selector(text)  # a valid selector


def test_the_combined_selector_picks_what_both_filters_pick():
    text = selector_text("x = '1' -- note", frozenset({"a", "b"}))
    assert text is not None
    selector = compile_selector(text)
    cases = [
        ({"TAGS": "a", "x": "1"}, True),
        ({"TAGS": "b", "x": "1"}, True),
        ({"TAGS": "c", "x": "1"}, False),
        ({"x": "1"}, False),  # no tag: a tag filter does not pick it either
        ({"TAGS": "a", "x": "2"}, False),
    ]
    for properties, picked in cases:
        assert selector.matches(properties) is picked, properties


@pytest.mark.parametrize(
    ("selector", "task_only"),
    [
        ("a = 'x'", False),
        ("a IN ('x') AND b > 5 OR c IS NULL", False),
        ("a CONTAINS 'x'", True),
        ("a = 'x' OR NOT (b STARTSWITH 'y')", True),
        ("a NOT ENDSWITH 'z' AND b = 'x'", True),
    ],
)
def test_which_selectors_name_server_brokers_are_not_given(selector, task_only):
    assert (task_only_reason(selector) is not None) is task_only


@pytest.mark.parametrize(
    ("error", "refuses"),
    [
        (FilterNotSupportedError("broker 'a' does not filter by SQL92"), True),
        (
            RemotingError(
                1, "The broker does not support consumer to filter message by SQL92 (code 1)"
            ),
            True,
        ),
        (RemotingError(1, "pull of q: some other system error (code 1)"), False),
        (RemotingError(23, "parse the consumer's subscription failed (code 23)"), True),
        (RemotingError(17, "topic not exist (code 17)"), False),
        (UnavailableError("broker busy"), False),
        (InvalidArgumentError("bad offset"), False),
    ],
)
def test_which_answers_say_a_broker_does_not_filter_by_sql92(error, refuses):
    assert refuses_sql92(error) is refuses


def records(properties: list[dict[str, str]]) -> tuple[bytes, np.ndarray]:
    encoded = [
        encode_record(
            Record(
                topic="T",
                queue_id=0,
                queue_offset=i,
                body=f"m{i}".encode(),
                properties=encode_properties(p),
            )
        )
        for i, p in enumerate(properties)
    ]
    return b"".join(encoded), np.array([len(e) for e in encoded], np.int64)


@pytest.mark.parametrize("known_sizes", [True, False])
def test_a_task_decodes_only_the_records_a_selector_picks(known_sizes):
    properties = [{"region": ["eu", "us"][i % 2], "n": str(i)} for i in range(10)]
    properties[4] = {"n": "4"}  # no region
    data, sizes = records(properties)
    selector = compile_selector("region = 'eu' AND n > 2")
    found, picked = decode_selected(
        data, sizes if known_sizes else None, selector, ("queueOffset", "body")
    )
    assert found.column("queueOffset").to_pylist() == [6, 8]
    assert found.column("body").to_pylist() == [b"m6", b"m8"]
    assert np.flatnonzero(picked).tolist() == [6, 8]
    none, picked = decode_selected(data, sizes, compile_selector("n = 'x'"), ("queueOffset",))
    assert none.num_rows == 0 and not picked.any()
    every, _ = decode_selected(data, sizes, compile_selector("n IS NOT NULL"), ("queueOffset",))
    assert every.column("queueOffset").to_pylist() == list(range(10))
    empty, _ = decode_selected(b"", np.zeros(0, np.int64), selector, ("queueOffset",))
    assert empty.num_rows == 0


def test_decoded_records_are_kept_by_their_properties():
    from rmq_spark.codec.arrow_decode import decode_records

    data, sizes = records([{"region": "eu"}, {"region": "us"}, {}])
    decoded = decode_records(data, sizes=sizes, columns=("queueOffset", "properties"))
    kept = keep_selected(decoded, compile_selector("region <> 'us'"))
    assert kept.column("queueOffset").to_pylist() == [0]


def test_needles_find_the_same_records_as_looking_at_every_one():
    """The bytes a selector needs narrow the records looked at, never the records picked:
    bodies holding them, values that only start with them, needles in most records (each
    record is looked at then) and selectors that name none."""
    rng = np.random.default_rng(7)
    properties, bodies = [], []
    for i in range(3000):
        props = {"n": str(int(rng.integers(0, 50)))}
        if rng.random() < 0.9:
            props["region"] = str(rng.choice(["eu", "us", "eur", "apac"], p=[0.02, 0.6, 0.08, 0.3]))
        if rng.random() < 0.5:
            props["TAGS"] = str(rng.choice(["a", "b"]))
        properties.append(props)
        bodies.append(b"region\x01eu in a body" if i % 97 == 0 else b"m%d" % i)
    encoded = [
        encode_record(
            Record(
                topic="T", queue_id=0, queue_offset=i, body=body, properties=encode_properties(p)
            )
        )
        for i, (body, p) in enumerate(zip(bodies, properties, strict=True))
    ]
    data, sizes = b"".join(encoded), np.array([len(e) for e in encoded], np.int64)
    mapped = pa.array([list(p.items()) for p in properties], pa.map_(pa.string(), pa.string()))
    for text in [
        "region = 'eu'",
        "'eu' = region",
        "region IN ('eu', 'apac') AND n > 10",
        "region = 'eu' OR TAGS = 'a'",
        "region STARTSWITH 'eu'",
        "region IS NOT NULL AND region = 'us'",  # in most records: every one looked at
        "n > 25",  # no needle
        "region = 'nowhere'",
    ]:
        selector = compile_selector(text)
        found, picked = decode_selected(data, sizes, selector, ("queueOffset",))
        wanted = np.flatnonzero(selector.select_map(mapped)).tolist()  # every one looked at
        assert found.column("queueOffset").to_pylist() == wanted, text
        assert np.flatnonzero(picked).tolist() == wanted, text


def test_needles_are_searched_in_a_mapped_file_where_it_lies(tmp_path):
    """A task reading a broker's files searches the mapped file itself (no copy), in the
    window of its records only, and leaves the map closable."""
    import mmap

    from rmq_spark.filter.stored import candidates, record_starts

    props = [{"region": "eu" if i % 10 == 0 else "us"} for i in range(200)]
    data, sizes = records(props)
    path = tmp_path / "segment"
    pad = b"region\x01eu" * 50  # outside the window: not looked at
    path.write_bytes(pad + data + pad)
    with open(path, "rb") as f:
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    window = memoryview(mapped)[len(pad) : len(pad) + len(data)]
    selector = compile_selector("region = 'eu'")
    found = candidates(window, record_starts(sizes), selector)
    assert found is not None and found.tolist() == list(range(0, 200, 10))
    picked, _ = decode_selected(window, sizes, selector, ("queueOffset",))
    assert picked.column("queueOffset").to_pylist() == list(range(0, 200, 10))
    del window, picked
    mapped.close()  # no buffer of it is left exported


def test_memmem_and_find_pick_the_same_records_as_looking_at_every_one(tmp_path, monkeypatch):
    """The C library's memmem searches where ``find`` did, as does a search of the records'
    properties alone (records of 1.5 KB and more), and none narrows what is picked: the
    bytes in bodies, topics (a long one too: two-byte topic length) and other properties,
    values that only start with them, IPv6 hosts (a longer header), in a buffer, a view of
    part of one, records joined from two files, and a mapped file. Each record's properties
    are found where they are, whatever its layout."""
    import mmap

    from rmq_spark.codec.arrow_decode.spans import properties_sections
    from rmq_spark.filter import stored

    if stored._MEMMEM is None:
        pytest.skip("this C library has no memmem")
    traps = [  # (properties, body, topic, hosts)
        ({"region": "eu"}, b"plain", "T", "127.0.0.1:1"),
        ({"region": "us"}, b"region\x01eu in the body", "T", "127.0.0.1:1"),
        ({"region": "europe"}, b"x", "T", "127.0.0.1:1"),
        ({"subregion": "eu", "region": "us"}, b"x", "T", "127.0.0.1:1"),
        ({"region": "us"}, b"x", "region\x01eu", "127.0.0.1:1"),
        ({"region": "us"}, b"x", "t" * 200 + "region\x01eu", "127.0.0.1:1"),
        ({"region": "eu"}, b"x", "t" * 200, "127.0.0.1:1"),
        ({"note": "region"}, b"\x01eu", "T", "127.0.0.1:1"),
        ({"region": "eu-west", "n": "region"}, b"\x01eu", "T", "127.0.0.1:1"),
        ({"region": "eu"}, b"x", "T", "[::1]:10911"),
        ({"region": "us"}, b"region\x01eu", "T", "[fe80::1]:1"),
        ({"zz": "9", "region": "eu"}, b"", "T", "[::1]:1"),
        ({}, b"x", "T", "127.0.0.1:1"),
    ]
    rows = [traps[i % len(traps)] for i in range(len(traps) * 3)] + [
        ({"region": "us"}, b"x", "T", "127.0.0.1:1")
    ] * 300  # so few hold the bytes that they are searched for
    encoded = [
        encode_record(
            Record(
                topic=topic, queue_id=0, queue_offset=i, body=body, born_host=host,
                store_host=host, properties=encode_properties(props),
            )
        )
        for i, (props, body, topic, host) in enumerate(rows)
    ]  # fmt: skip
    data, sizes = b"".join(encoded), np.array([len(e) for e in encoded], np.int64)
    mapped_props = pa.array([list(p.items()) for p, *_ in rows], pa.map_(pa.string(), pa.string()))
    path = tmp_path / "segment"
    pad = b"region\x01eu"  # before the records: not looked at
    path.write_bytes(pad + data)
    half = int(sizes[: len(sizes) // 2].sum())
    with open(path, "rb") as f:
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    buffers = {
        "bytes": data,
        "a view of part of a buffer": memoryview(pad + data)[len(pad) :],
        "joined from two files": b"".join([memoryview(data)[:half], memoryview(data)[half:]]),
        "bytearray": bytearray(data),
        "a mapped file": memoryview(mapped)[len(pad) :],
    }
    for name, buffer in buffers.items():  # where each record's properties are: every layout
        sections, ok = properties_sections(buffer, stored.record_starts(sizes), sizes)
        assert ok.all(), name
        assert sections.to_pylist() == [encode_properties(p) for p, *_ in rows], name
        del sections
    memmem = stored._MEMMEM
    searches = [(memmem, 10**9), (None, 10**9), (memmem, 0), (None, 0)]  # 0: properties only
    for text in ["region = 'eu'", "region IN ('eu', 'x')", "region STARTSWITH 'eu'"]:
        selector = compile_selector(text)
        wanted = np.flatnonzero(selector.select_map(mapped_props)).tolist()
        assert wanted, text
        for name, buffer in buffers.items():
            for search, properties_only_from in searches:
                monkeypatch.setattr(stored, "_MEMMEM", search)
                monkeypatch.setattr(stored, "PROPERTIES_ONLY_FROM", properties_only_from)
                starts = stored.record_starts(sizes)
                looked_at = stored.candidates(buffer, starts, selector, sizes)
                assert looked_at is not None and set(wanted) <= set(looked_at.tolist())
                assert len(looked_at) < len(sizes) // 4, "only the records holding them"
                found, picked = decode_selected(buffer, sizes, selector, ("queueOffset",))
                case = (text, name, search, properties_only_from)
                assert found.column("queueOffset").to_pylist() == wanted, case
                assert np.flatnonzero(picked).tolist() == wanted, case
                del found, picked
    monkeypatch.setattr(stored, "_MEMMEM", memmem)
    for search in (memmem, None):
        monkeypatch.setattr(stored, "_MEMMEM", search)
        at = stored.occurrences(data, frozenset({b"region\x01eu", b"region\x01us"}), 10**6)
        assert at is not None
        assert sorted(at) == sorted(
            [m.start() for m in __import__("re").finditer(b"region\x01(?:eu|us)", data)]
        )
        assert stored.occurrences(data, frozenset({b"region\x01us"}), 5) is None  # too many
    del buffers, buffer
    mapped.close()  # no buffer of it is left exported


def test_a_search_of_the_properties_alone_leaves_a_record_that_lies_to_the_decoder(
    monkeypatch,
):
    """A record whose length fields do not agree with its size is looked at (and refused
    by the decoder, naming it) rather than searched where its fields say."""
    from rmq_spark.codec.arrow_decode.spans import properties_sections
    from rmq_spark.errors import CorruptDataError
    from rmq_spark.filter import stored

    props = [{"region": "eu" if i == 3 else "us"} for i in range(40)]
    data, sizes = records(props)
    starts = stored.record_starts(sizes)
    sections, ok = properties_sections(data, starts, sizes)
    assert ok.all()
    assert sections.to_pylist() == [encode_properties(p) for p in props]
    broken = bytearray(data)
    body_len_at = int(starts[7]) + 84  # BODYLEN of record 7 (IPv4 hosts)
    broken[body_len_at : body_len_at + 4] = (500).to_bytes(4, "big")
    sections, ok = properties_sections(bytes(broken), starts, sizes)
    assert np.flatnonzero(~ok).tolist() == [7] and sections[7].as_py() == b""
    monkeypatch.setattr(stored, "PROPERTIES_ONLY_FROM", 0)
    selector = compile_selector("region = 'eu'")
    looked_at = stored.candidates(bytes(broken), starts, selector, sizes)
    assert looked_at is not None and looked_at.tolist() == [3, 7]
    with pytest.raises(CorruptDataError, match="record 1 "):  # the second looked at
        decode_selected(bytes(broken), sizes, selector, ("queueOffset",))
