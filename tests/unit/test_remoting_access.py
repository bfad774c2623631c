"""RocketMQ's remoting signature, as pure functions."""

from __future__ import annotations

import base64
import hmac
from hashlib import sha1

import pytest

from rmq_spark.auth.remoting_signature import content, sign_request, verify_request
from rmq_spark.auth.signature import AuthenticationError

SECRETS = {"alice": "alice-secret"}


def test_the_content_is_the_values_in_name_order_then_the_body():
    ext = {"topic": "T", "AccessKey": "alice", "queueId": "3", "Signature": "ignored"}
    # AccessKey < queueId < topic (Java's TreeMap order: upper case first)
    assert content(ext, b"BODY") == b"alice3TBODY"


def test_a_signature_is_base64_hmac_sha1_of_the_content():
    signed = sign_request({"b": "T", "a": "pg"}, b"xyz", "alice", "alice-secret")
    expected = hmac.new(b"alice-secret", b"alicepgTxyz", sha1).digest()
    assert signed["Signature"] == base64.b64encode(expected).decode()
    assert signed["AccessKey"] == "alice"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"Signature": None, "AccessKey": None}, "no credentials"),
        ({"b": "Other"}, "invalid access key or signature"),  # a field changed after signing
        ({"AccessKey": "mallory"}, "invalid access key or signature"),
        ({"Signature": "AAAA"}, "invalid access key or signature"),
    ],
)
def test_tampered_or_unsigned_requests_are_refused(change, message):
    signed = sign_request({"b": "T"}, b"body", "alice", "alice-secret")
    tampered = {k: v for k, v in {**signed, **change}.items() if v is not None}
    with pytest.raises(AuthenticationError, match=message):
        verify_request(tampered, b"body", SECRETS.get)


def test_a_body_changed_after_signing_is_refused():
    signed = sign_request({"b": "T"}, b"body", "alice", "alice-secret")
    assert verify_request(signed, b"body", SECRETS.get) == "alice"
    with pytest.raises(AuthenticationError):
        verify_request(signed, b"other body", SECRETS.get)


def test_old_clients_unique_key_query_field_is_not_signed():
    signed = sign_request({"topic": "T"}, b"", "alice", "alice-secret")
    later = {**signed, "_UNIQUE_KEY_QUERY": "true"}  # added after signing by <= 4.9.3
    assert verify_request(later, b"", SECRETS.get, version=399) == "alice"
    with pytest.raises(AuthenticationError):
        verify_request(later, b"", SECRETS.get, version=401)
