"""Endpoint lists given to clients: parsed once, every bad entry named."""

from __future__ import annotations

import pytest

from rmq_spark.client import Endpoints, parse_endpoint
from rmq_spark.errors import InvalidArgumentError


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:10911", ("127.0.0.1:10911",)),
        (" 127.0.0.1:10911 , 127.0.0.1:10912", ("127.0.0.1:10911", "127.0.0.1:10912")),
        ("broker-a.example.com:1", ("broker-a.example.com:1",)),
        ("[::1]:10911", ("[::1]:10911",)),
    ],
)
def test_parse_accepts_host_port_lists(text, expected):
    assert Endpoints.parse(text).addresses == expected


def test_parse_accepts_lists_and_endpoints():
    endpoints = Endpoints.parse(["a:1", "b:2"])
    assert list(endpoints) == ["a:1", "b:2"]
    assert Endpoints.parse(endpoints) is endpoints
    assert str(endpoints) == "a:1,b:2" and len(endpoints) == 2


@pytest.mark.parametrize(
    ("text", "bad"),
    [
        ("127.0.0.1:10911,127.0.0.1", "'127.0.0.1'"),
        ("127.0.0.1:10911,", "''"),
        ("localhost:0", "port 0"),
        ("localhost:70000", "port 70000"),
        ("http://localhost:1", "'http://localhost:1'"),
        ("::1:10911", "'::1:10911'"),
    ],
)
def test_parse_names_the_bad_entry(text, bad):
    with pytest.raises(InvalidArgumentError, match=bad):
        Endpoints.parse(text)


def test_duplicates_and_empty_lists_are_refused():
    with pytest.raises(InvalidArgumentError, match="'a:1' is listed twice"):
        Endpoints.parse("a:1,b:2,a:1")
    with pytest.raises(InvalidArgumentError, match="no broker endpoint"):
        Endpoints.parse([])


def test_parse_endpoint_refuses_non_strings():
    with pytest.raises(InvalidArgumentError, match="10911"):
        parse_endpoint(10911)
