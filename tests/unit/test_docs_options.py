"""docs/spark.md's option tables stay true: every option the source and the sink accept has
a row, no row names an option the code refuses, `n/a` marks exactly the options a kind of
query refuses, and every default the tables state is the real one (given explicitly, the
option parses to the same options as when it is left out)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rmq_spark.errors import InvalidArgumentError
from rmq_spark.sink.options import OPTION_NAMES as SINK_OPTIONS
from rmq_spark.sink.options import SinkOptions
from rmq_spark.source.options import BATCH_ONLY, STREAMING_ONLY, SourceOptions
from rmq_spark.source.options import OPTION_NAMES as SOURCE_OPTIONS

DOC = Path(__file__).resolve().parents[2] / "docs" / "spark.md"
READ_BASE = {"endpoints": "127.0.0.1:10911", "topic": "orders"}
WRITE_BASE = {"endpoints": "127.0.0.1:10911", "topic": "orders"}
#: what a default "with OPTION" needs beside it: (options added, options removed)
COMPANIONS = {
    "storePath": ({"storePath": "/tmp"}, ("endpoints",)),
    "minMessagesPerTrigger": ({"minMessagesPerTrigger": "10"}, ()),
    "group": ({"group": "etl"}, ()),
    "endpoints": ({}, ()),
}
CODE = re.compile(r"`([^`]+)`")


def table(heading: str) -> list[list[str]]:
    """The rows (cells) of the first table after ``heading`` in docs/spark.md."""
    text = DOC.read_text()
    rest = text[text.index(heading + "\n") :].splitlines()[1:]
    rows = []
    for line in rest:
        if line.startswith("|"):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
            if not set(cells[0]) <= {"-"}:
                rows.append(cells)
        elif rows:
            break
    return rows[1:]  # without the header


def options_of(cell: str) -> list[str]:
    return CODE.findall(cell)


def reading_rows() -> dict[str, tuple[str, str]]:
    return {options_of(row[0])[0]: (row[1], row[2]) for row in table("### Reading")}


def writing_rows() -> dict[str, str]:
    reading = reading_rows()
    rows = {}
    for row in table("### Writing"):
        for name in options_of(row[0]):
            rows[name] = reading[name][0] if row[1] == "as for reading" else row[1]
    return rows


def checks(cell: str) -> list[tuple[str, str | None]]:
    """(default value, companion option or None) pairs a cell states: "`V`",
    "`V` with `C`", "`V` with `C`, else `W`"; none for "none" and "n/a"."""
    if cell in ("none", "n/a"):
        return []
    found = re.fullmatch(r"`([^`]*)`(?: with `([^`]+)`(?:, else `([^`]*)`)?)?", cell)
    assert found, f"a default cell the test cannot read: {cell!r}"
    value, companion, otherwise = found.groups()
    out = [(value, companion)]
    if otherwise is not None:
        out.append((otherwise, None))
    return out


def with_companion(base: dict, companion: str | None) -> dict:
    if companion is None:
        return dict(base)
    added, removed = COMPANIONS[companion]
    return {k: v for k, v in {**base, **added}.items() if k not in removed}


def test_the_reading_table_names_every_read_option_and_no_other():
    assert sorted(reading_rows()) == sorted(SOURCE_OPTIONS)


def test_the_writing_table_names_every_write_option_and_no_other():
    assert sorted(writing_rows()) == sorted(SINK_OPTIONS)


@pytest.mark.parametrize("name", sorted(SOURCE_OPTIONS))
def test_n_a_marks_exactly_what_each_kind_of_read_refuses(name):
    streaming, batch = reading_rows()[name]
    assert (streaming == "n/a") == (name in BATCH_ONLY)
    assert (batch == "n/a") == (name in STREAMING_ONLY)


@pytest.mark.parametrize("name", sorted(SOURCE_OPTIONS))
def test_each_stated_read_default_is_the_real_one(name):
    for streaming, cell in zip((True, False), reading_rows()[name], strict=True):
        for value, companion in checks(cell):
            base = with_companion(READ_BASE, companion)
            given = SourceOptions.parse({**base, name: value}, streaming=streaming)
            assert given == SourceOptions.parse(base, streaming=streaming), (name, value)


@pytest.mark.parametrize("name", sorted(SINK_OPTIONS))
def test_each_stated_write_default_is_the_real_one(name):
    for value, companion in checks(writing_rows()[name]):
        base = with_companion(WRITE_BASE, companion)
        if companion is None and "else" in writing_rows()[name]:
            base = {"nameServer": "127.0.0.1:9876", "topic": "orders"}  # the other case
        assert SinkOptions.parse({**base, name: value}) == SinkOptions.parse(base), (name, value)


def test_an_option_no_table_names_is_refused():
    with pytest.raises(InvalidArgumentError, match="maxOffsetsPerTrigger"):
        SourceOptions.parse({**READ_BASE, "maxOffsetsPerTrigger": "10"}, streaming=True)
