"""Signature: compatibility with the official Python client, and the server's checks."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest

from rmq_spark.auth import signature
from rmq_spark.auth.signature import AuthenticationError, verify

SECRETS = {"alice": "alice-secret"}
NOW = datetime(2026, 1, 25, 10, 15, 2, tzinfo=UTC)


def test_matches_official_client():
    official = pytest.importorskip("rocketmq.v5.util.signature").Signature
    config = SimpleNamespace(credentials=SimpleNamespace(ak="alice", sk="alice-secret"))
    config.namespace = ""
    metadata = official.metadata(config, "client-1")
    # the official client signs local time; accepted (the broker's local clock is one of two)
    assert verify(metadata, SECRETS.get) == "alice"
    headers = dict(metadata)
    ours = dict(signature.signed_metadata("alice", "alice-secret"))
    assert (
        ours["authorization"].split(", Signature=")[0]
        == (headers["authorization"].split(", Signature=")[0])
    )
    assert official.sign("k", "20260125T101502Z") == signature.sign("k", "20260125T101502Z")


def test_round_trip_and_fixed_vector():
    md = signature.signed_metadata("alice", "alice-secret", NOW)
    assert dict(md)["x-mq-date-time"] == "20260125T101502Z"
    assert verify(md, SECRETS.get, now=NOW) == "alice"
    import hashlib
    import hmac

    expected = hmac.new(b"alice-secret", b"20260125T101502Z", hashlib.sha1).hexdigest()
    assert dict(md)["authorization"].endswith(f"Signature={expected}")


@pytest.mark.parametrize(
    "metadata, reason",
    [
        ([], "no credentials"),
        (
            [
                ("x-mq-date-time", "20260125T101502Z"),
                (
                    "authorization",
                    "MQv2-HMAC-SHA1 Credential=, SignedHeaders=x-mq-date-time, Signature=00",
                ),
            ],
            "empty access key",
        ),
        ([("authorization", "Basic abc")], "unsupported authorization scheme"),
        ([("authorization", "MQv2-HMAC-SHA1 Credential=alice")], "malformed"),
        ([("authorization", "MQv2-HMAC-SHA1 garbage")], "malformed"),
    ],
)
def test_refusals(metadata, reason):
    with pytest.raises(AuthenticationError, match=reason):
        verify(metadata, SECRETS.get, now=NOW)


def test_missing_date_header():
    md = [
        m
        for m in signature.signed_metadata("alice", "alice-secret", NOW)
        if m[0] != "x-mq-date-time"
    ]
    with pytest.raises(AuthenticationError, match="x-mq-date-time"):
        verify(md, SECRETS.get, now=NOW)


def test_wrong_secret_and_unknown_user_read_the_same():
    wrong = signature.signed_metadata("alice", "alice-secreT", NOW)
    unknown = signature.signed_metadata("mallory", "alice-secret", NOW)
    messages = set()
    for md in (wrong, unknown):
        with pytest.raises(AuthenticationError) as info:
            verify(md, SECRETS.get, now=NOW)
        messages.add(str(info.value))
    assert messages == {"invalid access key or signature"}


@pytest.mark.parametrize(
    "skew_s, ok", [(0, True), (899, True), (-899, True), (901, False), (-3600, False)]
)
def test_replay_window(skew_s, ok):
    md = signature.signed_metadata("alice", "alice-secret", NOW + timedelta(seconds=skew_s))
    if ok:
        assert verify(md, SECRETS.get, now=NOW, window_s=900) == "alice"
    else:
        with pytest.raises(AuthenticationError, match="outside the broker's 900 s window"):
            verify(md, SECRETS.get, now=NOW, window_s=900)
    # no window (None): only the signature counts
    assert verify(md, SECRETS.get, now=NOW, window_s=None) == "alice"


def test_bad_date_format():
    md = [
        ("x-mq-date-time", "2026-01-25"),
        (
            "authorization",
            f"MQv2-HMAC-SHA1 Credential=alice, SignedHeaders=x-mq-date-time, "
            f"Signature={signature.sign('alice-secret', '2026-01-25')}",
        ),
    ]
    with pytest.raises(AuthenticationError, match="is not yyyyMMddTHHmmssZ"):
        verify(md, SECRETS.get, now=NOW)


def test_credential_scope_is_cut_at_slash():
    md = dict(signature.signed_metadata("alice", "alice-secret", NOW))
    md["authorization"] = md["authorization"].replace("Credential=alice", "Credential=alice/x/y")
    assert verify(md.items(), SECRETS.get, now=NOW) == "alice"
