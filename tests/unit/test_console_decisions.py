"""The web console's pure decisions (``broker/http/console_data.py``) and the lag of a
queue (``broker/http/lag.py``), with literal inputs."""

from __future__ import annotations

import doctest

import pytest

from rmq_spark.broker.http import console_data, lag
from rmq_spark.broker.http.console_data import (
    BadInput,
    body_preview,
    int_value,
    json_object,
    rate_series,
    reset_target,
    text_value,
)
from rmq_spark.broker.stats import Totals


def test_doctests():
    assert doctest.testmod(console_data).failed == 0
    assert doctest.testmod(lag).failed == 0


@pytest.mark.parametrize(
    ("body", "kind"),
    [
        (b"", "text"),
        ("plain, naïve\ttext\r\n".encode(), "text"),
        (b"<b>markup is text too</b>", "text"),
        (b"nul\x00inside", "binary"),
        (b"bell\x07", "binary"),
        (b"del\x7f", "binary"),
        (b"\xff\xfe not utf-8", "binary"),
    ],
)
def test_a_body_is_text_only_when_it_is_utf8_without_controls(body, kind):
    shown = body_preview(body)
    assert shown["kind"] == kind
    assert shown["size"] == shown["shown"] == len(body)
    if kind == "text":
        assert shown["text"] == body.decode()
    else:
        assert shown["text"].startswith("00000000  ")


def test_a_long_body_is_cut_and_a_character_cut_in_two_dropped():
    body = "é".encode() * 3000  # 2 bytes each: the cut falls inside one at an odd limit
    shown = body_preview(body, limit=4095)
    assert (shown["kind"], shown["size"], shown["shown"]) == ("text", 6000, 4095)
    assert shown["text"] == "é" * 2047
    assert body_preview(b"x" * 10, limit=4)["text"] == "xxxx"


def test_a_compressed_body_is_shown_as_hex():
    shown = body_preview(b"x\x9c+I-.\x01\x00", compressed=True)
    assert shown["kind"] == "compressed"
    assert shown["text"].startswith("00000000  78 9c")


def test_a_hex_dump_has_16_bytes_a_line_and_dots_for_the_unprintable():
    dump = console_data.hex_dump(bytes(range(30, 50)))
    first, second = dump.splitlines()
    assert first.startswith("00000000  1e 1f 20 21") and first.endswith("  .. !\"#$%&'()*+,-")
    assert second.startswith("00000010  2e 2f 30 31") and second.endswith("./01")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("", "must be an integer, not ''"),
        ("1.5", "not '1.5'"),
        (True, "not True"),
        (None, "not None"),
        ("11", "between 0 and 10, not 11"),
        (-1, "between 0 and 10, not -1"),
    ],
)
def test_a_bad_integer_is_refused_naming_it(value, message):
    with pytest.raises(BadInput, match=r"^queue ") as refused:
        int_value(value, "queue", 0, 10)
    assert message in str(refused.value)


def test_integers_and_texts_that_pass():
    assert int_value(" 3 ", "n", 0, 5) == 3
    assert int_value(5, "n", 0, 5) == 5
    assert text_value("a", "t") == "a"
    with pytest.raises(BadInput, match="t must be a non-empty string, not '  '"):
        text_value("  ", "t")
    with pytest.raises(BadInput, match="t is 5 characters long; at most 4"):
        text_value("abcde", "t", max_chars=4)
    with pytest.raises(BadInput, match="t must be a non-empty string, not 3"):
        text_value(3, "t")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"", "not JSON"),
        (b"\xff", "not JSON"),
        (b"[1]", "not list"),
        (b'"text"', "not str"),
    ],
)
def test_a_request_body_must_be_one_json_object(body, message):
    with pytest.raises(BadInput, match=message):
        json_object(body)
    assert json_object(b'{"a": 1}') == {"a": 1}


def test_rates_count_only_what_is_shown_and_never_go_negative():
    a = Totals(100.0, {"t": (50, 0), "hidden": (0, 0)}, {("g", "t"): (10, 0), ("h", "t"): (0, 0)})
    b = Totals(
        110.0, {"t": (150, 0), "hidden": (900, 0)}, {("g", "t"): (60, 0), ("h", "t"): (90, 0)}
    )
    c = Totals(120.0, {"t": (20, 0)}, {("g", "t"): (60, 0)})  # t deleted and made again
    points = rate_series([a, b, c], 0.0, lambda t: t == "t", lambda g, t: g == "g")
    assert points == [[110.0, 10.0, 5.0], [120.0, 0.0, 0.0]]
    assert rate_series([a, b, c], 105.0, lambda t: True, lambda g, t: True) == [[120.0, 0.0, 0.0]]
    assert rate_series([a], 0.0, lambda t: True, lambda g, t: True) == []


def test_a_reset_goes_to_one_of_three_places():
    assert [reset_target(t) for t in ("earliest", "latest", "time")] == [
        "earliest",
        "latest",
        "time",
    ]
    for bad in ("now", None, 3, ["latest"]):
        with pytest.raises(BadInput, match="to must be one of earliest, latest, time, not "):
            reset_target(bad)


@pytest.mark.parametrize(
    ("committed", "newest", "read_to", "stored_ms", "expected"),
    [
        (0, 0, None, None, (0, 0, 0, 0)),
        (4, 10, None, 500, (6, 500, 0, 6)),  # nothing read since the broker started
        (4, 10, 10, 900, (6, 100, 6, 0)),  # all handed out, none committed
        (4, 10, 2, 900, (6, 100, 0, 6)),  # reads behind the commit (a reset)
        (4, 10, 30, 900, (6, 100, 6, 0)),  # reads past the end (a queue made again)
        (12, 10, 12, None, (0, 0, 0, 0)),  # committed past the end
    ],
)
def test_lag_in_flight_and_ready_of_a_queue(committed, newest, read_to, stored_ms, expected):
    assert lag.queue_lag(committed, newest, read_to, stored_ms, now_ms=1000) == expected
