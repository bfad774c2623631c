"""The interceptor's decisions, without gRPC (a fake call context)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from rmq_spark.auth import signature
from rmq_spark.auth.acl_file import parse
from rmq_spark.auth.interceptor import Authorizer, ClientOwners, Refused, peer_ip
from rmq_spark.wire.proto_gen.rocketlite.v1 import admin_pb2, groups_pb2

ACL = parse(
    {
        "users": [
            {"username": "root", "password": "r", "userType": "Super"},
            {"username": "app", "password": "a"},
            {"username": "other", "password": "o"},
            {"username": "off", "password": "x", "userStatus": "disable"},
        ],
        "acls": [
            {
                "subject": "User:app",
                "policies": [
                    {"entries": [{"resource": ["Group:g", "Topic:t"], "actions": ["Sub"]}]}
                ],
            },
            {
                "subject": "User:other",
                "policies": [{"entries": [{"resource": "Group:g", "actions": ["Sub"]}]}],
            },
        ],
    }
)


class Context:
    def __init__(self, metadata, peer="ipv4:127.0.0.1:5000"):
        self._metadata = metadata
        self._peer = peer

    def invocation_metadata(self):
        return self._metadata

    def peer(self):
        return self._peer


def ctx(user, secret, when=None, extra=()):
    return Context([*signature.signed_metadata(user, secret, when), *extra])


def check(authorizer, method, context, request):
    user, rule = authorizer.check_open(method, context)
    authorizer.check_request(user, rule, request, context)
    return user


HEARTBEAT = "/rocketlite.v1.GroupService/Heartbeat"
UNREGISTER = "/rocketlite.v1.GroupService/Unregister"


def test_decisions():
    auth = Authorizer(lambda: ACL)
    hb = groups_pb2.HeartbeatRequest(
        client_id="c1", consumer_group="g", subscriptions=[groups_pb2.Subscription(topic="t")]
    )
    assert check(auth, HEARTBEAT, ctx("app", "a"), hb).name == "app"
    with pytest.raises(Refused) as info:
        check(auth, HEARTBEAT, Context([]), hb)
    assert not info.value.authenticated
    with pytest.raises(Refused, match="invalid access key or signature"):
        check(auth, HEARTBEAT, ctx("app", "wrong"), hb)
    with pytest.raises(Refused, match="outside"):
        old = datetime.now(UTC) - timedelta(hours=2)
        check(auth, HEARTBEAT, ctx("app", "a", old), hb)
    with pytest.raises(Refused, match="disabled"):
        check(auth, HEARTBEAT, ctx("off", "x"), hb)
    with pytest.raises(Refused, match="no policy grants Sub on Topic:t") as info:
        check(auth, HEARTBEAT, ctx("other", "o"), hb)
    assert info.value.authenticated
    # super-only and super users
    view = "/rocketlite.v1.MessagingService/ViewMessage"
    with pytest.raises(Refused, match="not a super user"):
        check(auth, view, ctx("app", "a"), None)
    check(auth, view, ctx("root", "r"), None)
    check(auth, "/rocketlite.v1.AdminService/GetBrokerInfo", ctx("app", "a"), None)
    with pytest.raises(Refused, match="not in the permission table"):
        check(auth, "/some.Unknown/Method", ctx("app", "a"), None)
    with pytest.raises(Refused, match="List on Topic:"):
        check(
            auth,
            "/rocketlite.v1.AdminService/ListTopics",
            ctx("app", "a"),
            admin_pb2.ListTopicsRequest(),
        )


def test_client_id_bound_to_first_user():
    auth = Authorizer(lambda: ACL)
    hb = groups_pb2.HeartbeatRequest(client_id="c1", consumer_group="g")
    check(auth, HEARTBEAT, ctx("app", "a"), hb)
    unregister = groups_pb2.UnregisterRequest(client_id="c1", consumer_group="g")
    with pytest.raises(Refused, match="may not act as client 'c1'"):
        check(auth, UNREGISTER, ctx("other", "o"), unregister)
    check(auth, UNREGISTER, ctx("app", "a"), unregister)
    check(auth, UNREGISTER, ctx("root", "r"), unregister)  # super users may
    # RocketMQ 5: the x-mq-client-id header
    route = "/apache.rocketmq.v2.MessagingService/NotifyClientTermination"
    pytest.importorskip("rocketmq.grpc_protocol")
    from rocketmq.grpc_protocol import service_pb2 as spb

    check(
        auth,
        route,
        ctx("app", "a", extra=[("x-mq-client-id", "v2-client")]),
        spb.NotifyClientTerminationRequest(),
    )
    with pytest.raises(Refused, match="another user"):
        check(
            auth,
            route,
            ctx("other", "o", extra=[("x-mq-client-id", "v2-client")]),
            spb.NotifyClientTerminationRequest(),
        )


def test_owners_expire_and_are_bounded():
    owners = ClientOwners(ttl_s=10, limit=2)
    assert owners.claim("c", "a", now=0) is None
    assert owners.claim("c", "b", now=5) == "a"
    assert owners.claim("c", "b", now=16) is None
    owners.claim("d", "x", now=17)
    owners.claim("e", "x", now=18)
    assert owners.claim("c", "a", now=19) is None  # "c" was evicted


def test_source_ip_from_peer():
    assert str(peer_ip("ipv4:10.1.2.3:4567")) == "10.1.2.3"
    assert str(peer_ip("ipv6:[::1]:4567")) == "::1"
    assert peer_ip("unix:/tmp/sock") is None
    acl = parse(
        {
            "users": [{"username": "app", "password": "a"}],
            "acls": [
                {
                    "subject": "User:app",
                    "policies": [
                        {
                            "entries": [
                                {
                                    "resource": "Group:g",
                                    "actions": ["Sub"],
                                    "sourceIps": ["10.0.0.0/8"],
                                }
                            ]
                        }
                    ],
                }
            ],
        }
    )
    auth = Authorizer(lambda: acl)
    request = groups_pb2.GetConsumerListRequest(consumer_group="g")
    method = "/rocketlite.v1.GroupService/GetConsumerList"
    inside = Context(signature.signed_metadata("app", "a"), "ipv4:10.9.9.9:1")
    check(auth, method, inside, request)
    with pytest.raises(Refused):
        check(
            auth, method, Context(signature.signed_metadata("app", "a"), "ipv4:11.0.0.1:1"), request
        )
