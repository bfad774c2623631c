"""Refusals of access control are rmq_spark.errors classes: a caller who is not known is
refused with an UnauthenticatedError, a known one without the permission with a
PermissionDeniedError, and rocketlite.v1 clients get the same status and class names as
before."""

from __future__ import annotations

import grpc
import pytest

from rmq_spark.auth import signature
from rmq_spark.auth.acl_file import parse
from rmq_spark.auth.interceptor import (
    REFUSED_PREFIX,
    AccessDenied,
    Authorizer,
    NotAuthenticated,
    Refused,
    v1_status,
)
from rmq_spark.errors import (
    PermissionDeniedError,
    RocketliteError,
    UnauthenticatedError,
    error_from_status,
)
from rmq_spark.wire.proto_gen.rocketlite.v1 import groups_pb2

ACL = parse(
    {
        "users": [
            {"username": "app", "password": "a"},
            {"username": "off", "password": "x", "userStatus": "disable"},
        ],
        "acls": [],
    }
)
HEARTBEAT = "/rocketlite.v1.GroupService/Heartbeat"


class Context:
    def __init__(self, metadata):
        self._metadata = metadata

    def invocation_metadata(self):
        return self._metadata

    def peer(self):
        return "ipv4:127.0.0.1:5000"


def refusal(metadata) -> Refused:
    auth = Authorizer(lambda: ACL)
    request = groups_pb2.HeartbeatRequest(
        client_id="c1", consumer_group="g", subscriptions=[groups_pb2.Subscription(topic="t")]
    )
    with pytest.raises(Refused) as caught:
        user, rule = auth.check_open(HEARTBEAT, Context(metadata))
        auth.check_request(user, rule, request, Context(metadata))
    return caught.value


@pytest.mark.parametrize(
    ("metadata", "cls", "general", "status", "reason"),
    [
        ([], NotAuthenticated, UnauthenticatedError, grpc.StatusCode.UNAUTHENTICATED,
         "no credentials"),
        (signature.signed_metadata("app", "wrong"), NotAuthenticated, UnauthenticatedError,
         grpc.StatusCode.UNAUTHENTICATED, "invalid access key or signature"),
        (signature.signed_metadata("off", "x"), NotAuthenticated, UnauthenticatedError,
         grpc.StatusCode.UNAUTHENTICATED, "user off is disabled"),
        (signature.signed_metadata("app", "a"), AccessDenied, PermissionDeniedError,
         grpc.StatusCode.PERMISSION_DENIED, "no policy grants Sub on"),
    ],
)  # fmt: skip
def test_each_refusal_is_the_error_class_of_its_status(metadata, cls, general, status, reason):
    refused = refusal(metadata)
    assert type(refused) is cls
    assert isinstance(refused, general) and isinstance(refused, RocketliteError)
    assert refused.authenticated is (cls is AccessDenied)
    assert not refused.retriable
    assert str(refused).startswith(REFUSED_PREFIX) and reason in str(refused)
    # what a rocketlite.v1 client receives: the status, and the general class by name
    code, class_name = v1_status(refused)
    assert code == status and class_name == general.__name__
    received = error_from_status(code.name, str(refused), class_name)
    assert type(received) is general and str(received) == str(refused)


def test_a_refusal_rebuilt_from_its_message_keeps_one_prefix():
    reason = "user app: no policy grants Pub on Topic:t"
    refused = AccessDenied(reason)
    assert str(type(refused)(str(refused))) == str(refused) == REFUSED_PREFIX + reason
