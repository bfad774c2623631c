"""RocketMQ's remoting signature and the remoting permission table, as pure functions."""

from __future__ import annotations

import base64
import hmac
import json
from hashlib import sha1

import pytest

from rmq_spark.auth.remoting_rules import rule_for
from rmq_spark.auth.remoting_signature import content, sign_request, verify_request
from rmq_spark.auth.signature import AuthenticationError
from rmq_spark.remoting.codes import RequestCode as C

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


def _needs(code, ext, body=b""):
    rule = rule_for(code)
    return sorted(
        (str(n.resource), sorted(a.name for a in n.actions)) for n in rule.needs(ext, body)
    )


@pytest.mark.parametrize(
    ("code", "ext", "body", "needs"),
    [
        (C.SEND_MESSAGE_V2, {"b": "orders"}, b"", [("Topic:orders", ["PUB"])]),
        (C.SEND_MESSAGE, {"topic": "orders"}, b"", [("Topic:orders", ["PUB"])]),
        # a consumer's fallback send to its retry topic is its group's business
        (C.SEND_MESSAGE_V2, {"b": "%RETRY%billing"}, b"", [("Group:billing", ["SUB"])]),
        (
            C.PULL_MESSAGE,
            {"topic": "orders", "consumerGroup": "billing"},
            b"",
            [("Group:billing", ["SUB"]), ("Topic:orders", ["SUB"])],
        ),
        (C.GET_ROUTEINFO_BY_TOPIC, {"topic": "orders"}, b"", [("Topic:orders", ["PUB", "SUB"])]),
        (C.GET_ROUTEINFO_BY_TOPIC, {"topic": "TBW102"}, b"", []),  # auto-creation's fallback
        # messages by key are the topic's: RocketMQ 4.9 asks Sub, 5.x Sub or Get
        (
            C.QUERY_MESSAGE,
            {"topic": "orders", "key": "order-1", "_UNIQUE_KEY_QUERY": "true"},
            b"",
            [("Topic:orders", ["GET", "SUB"])],
        ),
        (
            C.HEART_BEAT,
            {},
            json.dumps(
                {
                    "clientID": "c1",
                    "consumerDataSet": [
                        {
                            "groupName": "billing",
                            "subscriptionDataSet": [
                                {"topic": "orders"},
                                {"topic": "%RETRY%billing"},
                            ],
                        }
                    ],
                }
            ).encode(),
            [("Group:billing", ["SUB"]), ("Topic:orders", ["SUB"])],
        ),
    ],
)
def test_each_request_needs_its_topic_and_group(code, ext, body, needs):
    assert _needs(code, ext, body) == needs


def test_broker_wide_requests_and_unknown_codes_are_for_super_users():
    for code in (
        C.UPDATE_AND_CREATE_TOPIC,
        C.DELETE_TOPIC_IN_BROKER,
        C.GET_BROKER_RUNTIME_INFO,
        9999,
    ):
        assert rule_for(code).super_only, code
    assert not rule_for(C.GET_BROKER_CLUSTER_INFO).super_only
    assert not rule_for(C.QUERY_MESSAGE).super_only
