"""The permission table covers every served RPC; what it reads from requests."""

from __future__ import annotations

import pytest

from rmq_spark.auth.acl import GROUP, TOPIC, Action, Resource
from rmq_spark.auth.permissions import RULES, served_methods
from rmq_spark.wire.proto_gen.rocketlite.v1 import groups_pb2, messaging_pb2, offsets_pb2
from rmq_spark.wire.proto_gen.rocketlite.v1.common_pb2 import MessageQueue


def test_every_served_rpc_has_a_rule():
    served = served_methods()
    assert any(m.startswith("/apache.rocketmq.v2.") for m in served), "v2 stubs missing"
    missing = [m for m in served if m not in RULES]
    assert not missing, f"RPCs without a permission rule: {missing}"
    stale = [m for m in RULES if m not in served]
    assert not stale, f"rules for RPCs nobody serves: {stale}"


def needs(method, request):
    rule = RULES[method]
    return {(n.resource, frozenset(n.actions)) for n in rule.needs(request)}


SUB = frozenset({Action.SUB})
PUB = frozenset({Action.PUB})


def test_v1_extraction():
    pull = messaging_pb2.PullMessagesRequest(
        consumer_group="g", queue=MessageQueue(topic="t", queue_id=1)
    )
    assert needs("/rocketlite.v1.MessagingService/PullMessages", pull) == {
        (Resource(TOPIC, "t"), SUB),
        (Resource(GROUP, "g"), SUB),
    }
    anonymous = messaging_pb2.PullMessagesRequest(queue=MessageQueue(topic="t"))
    assert needs("/rocketlite.v1.MessagingService/PullMessages", anonymous) == {
        (Resource(TOPIC, "t"), SUB)
    }
    heartbeat = groups_pb2.HeartbeatRequest(
        client_id="c",
        consumer_group="g",
        subscriptions=[
            groups_pb2.Subscription(topic="t"),
            groups_pb2.Subscription(topic="%RETRY%g"),
        ],
    )
    assert needs("/rocketlite.v1.GroupService/Heartbeat", heartbeat) == {
        (Resource(TOPIC, "t"), SUB),
        (Resource(GROUP, "g"), SUB),
    }
    assert list(RULES["/rocketlite.v1.GroupService/Unregister"].client_ids(heartbeat)) == ["c"]
    commit = offsets_pb2.UpdateConsumerOffsetsRequest(
        consumer_group="%RETRY%g",
        offsets=[offsets_pb2.QueueOffset(queue=MessageQueue(topic=t)) for t in ("a", "b", "a")],
    )
    assert needs("/rocketlite.v1.OffsetService/UpdateConsumerOffsets", commit) == {
        (Resource(GROUP, "g"), SUB),
        (Resource(TOPIC, "a"), SUB),
        (Resource(TOPIC, "b"), SUB),
    }
    assert RULES["/rocketlite.v1.MessagingService/ViewMessage"].super_only
    by_key = messaging_pb2.QueryMessagesByKeyRequest(topic="t", key="k")
    assert needs("/rocketlite.v1.MessagingService/QueryMessagesByKey", by_key) == {
        (Resource(TOPIC, "t"), frozenset({Action.SUB, Action.GET}))
    }


def test_v2_extraction():
    pb = pytest.importorskip("rocketmq.grpc_protocol.definition_pb2")
    spb = pytest.importorskip("rocketmq.grpc_protocol.service_pb2")
    send = spb.SendMessageRequest(
        messages=[pb.Message(topic=pb.Resource(name=t)) for t in ("a", "b")]
    )
    assert needs("/apache.rocketmq.v2.MessagingService/SendMessage", send) == {
        (Resource(TOPIC, "a"), PUB),
        (Resource(TOPIC, "b"), PUB),
    }
    route = spb.QueryRouteRequest(topic=pb.Resource(name="t"))
    assert needs("/apache.rocketmq.v2.MessagingService/QueryRoute", route) == {
        (Resource(TOPIC, "t"), frozenset({Action.PUB, Action.SUB}))
    }
    producer_heartbeat = spb.HeartbeatRequest()
    assert needs("/apache.rocketmq.v2.MessagingService/Heartbeat", producer_heartbeat) == set()
    rule = RULES["/apache.rocketmq.v2.MessagingService/Telemetry"]
    sub = spb.TelemetryCommand(
        settings=pb.Settings(
            subscription=pb.Subscription(
                group=pb.Resource(name="g"),
                subscriptions=[pb.SubscriptionEntry(topic=pb.Resource(name="t"))],
            )
        )
    )
    assert {(n.resource, n.actions) for n in rule.message_needs(sub)} == {
        (Resource(GROUP, "g"), SUB),
        (Resource(TOPIC, "t"), SUB),
    }
    pub = spb.TelemetryCommand(
        settings=pb.Settings(publishing=pb.Publishing(topics=[pb.Resource(name="t")]))
    )
    assert {(n.resource, n.actions) for n in rule.message_needs(pub)} == {
        (Resource(TOPIC, "t"), PUB)
    }
    assert list(rule.message_needs(spb.TelemetryCommand())) == []
