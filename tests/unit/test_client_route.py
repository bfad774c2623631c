"""Merging each broker's part of a topic route into one route (no network)."""

from __future__ import annotations

import pytest

from rmq_spark.client import RouteTable, merge_route
from rmq_spark.errors import (
    InvalidArgumentError,
    InvalidNameError,
    NotFoundError,
    UnavailableError,
)
from rmq_spark.structs import MessageQueue, Permission
from rmq_spark.wire.proto_gen.rocketlite.v1 import admin_pb2, common_pb2


def route_answer(broker, topic="T", read=4, write=4, perm=6, broker_perm=6):
    queues = []
    for q in range(max(read, write)):
        bits = (4 if q < read else 0) | (2 if q < write else 0)
        queues.append(
            admin_pb2.QueueRoute(
                queue=common_pb2.MessageQueue(topic=topic, broker_name=broker, queue_id=q),
                perm=bits & perm & broker_perm,
            )
        )
    return admin_pb2.GetTopicRouteResponse(
        topic=admin_pb2.TopicConfig(
            topic=topic, read_queue_nums=read, write_queue_nums=write, perm=perm
        ),
        broker_name=broker,
        endpoint=f"{broker}.internal:10911",
        broker_perm=broker_perm,
        queues=queues,
    )


def test_union_of_brokers_sorted_by_message_queue():
    route = merge_route(
        "T", {"h2:2": route_answer("broker-b", read=2, write=2), "h1:1": route_answer("broker-a")}
    )
    assert list(route.brokers) == ["broker-a", "broker-b"]
    assert route.readable == tuple(
        [MessageQueue("T", "broker-a", q) for q in range(4)]
        + [MessageQueue("T", "broker-b", q) for q in range(2)]
    )
    assert route.writable == route.readable
    assert route.endpoint_of("broker-b") == "h2:2"  # the address dialled, not the advertised
    assert route.brokers["broker-b"].advertised_endpoint == "broker-b.internal:10911"


def test_queue_permissions_split_readable_and_writable():
    route = merge_route(
        "T",
        {
            "h1:1": route_answer("broker-a", read=4, write=2),
            "h2:2": route_answer("broker-b", broker_perm=4),  # read-only broker
        },
    )
    assert [(q.broker_name, q.queue_id) for q in route.writable] == [
        ("broker-a", 0),
        ("broker-a", 1),
    ]
    assert len(route.readable) == 8
    assert route.queues[MessageQueue("T", "broker-b", 0)] == Permission.READ


def test_queues_with_no_permission_are_left_out():
    route = merge_route("T", {"h1:1": route_answer("broker-a", perm=2, read=2, write=4)})
    assert route.readable == ()
    assert [q.queue_id for q in route.writable] == [0, 1, 2, 3]


def test_not_found_on_some_brokers_is_fine():
    route = merge_route(
        "T", {"h1:1": NotFoundError("no topic T"), "h2:2": route_answer("broker-b")}
    )
    assert list(route.brokers) == ["broker-b"]


def test_not_found_everywhere_names_the_topic_and_endpoints():
    with pytest.raises(NotFoundError, match=r"topic 'T' does not exist on any broker \(h1:1, h2:2"):
        merge_route("T", {"h1:1": NotFoundError("x"), "h2:2": NotFoundError("y")})


def test_unreachable_brokers_are_skipped_while_one_answers(caplog):
    route = merge_route(
        "T", {"h1:1": UnavailableError("h1:1 is down"), "h2:2": route_answer("broker-b")}
    )
    assert list(route.brokers) == ["broker-b"]
    assert "h1:1 is down" in caplog.text


def test_no_answer_at_all_is_unavailable_not_missing():
    with pytest.raises(UnavailableError, match=r"route of topic 'T'.*down.*not on h2:2"):
        merge_route("T", {"h1:1": UnavailableError("down"), "h2:2": NotFoundError("x")})


def test_a_broker_error_other_than_not_found_is_raised_as_is():
    error = InvalidNameError("topic name 'bad name' has characters outside ...")
    with pytest.raises(InvalidNameError) as raised:
        merge_route("bad name", {"h1:1": error, "h2:2": error})
    assert raised.value is error


def test_two_endpoints_reporting_one_broker_name_are_refused():
    with pytest.raises(InvalidArgumentError, match="h1:1 and h2:2 both report broker name 'b'"):
        merge_route("T", {"h1:1": route_answer("b"), "h2:2": route_answer("b")})


def test_route_table_caches_until_the_ttl_and_refreshes_on_demand():
    calls = []

    def fetch(topic):
        calls.append(topic)
        return {"h1:1": route_answer("broker-a", topic=topic)}

    seen = []
    table = RouteTable(fetch, ttl_ms=60_000, on_route=seen.append)
    first = table.get("T")
    assert table.get("T") is first and calls == ["T"]
    assert table.refresh("T") is not first and calls == ["T", "T"]
    table.invalidate("T")
    table.get("T")
    assert len(calls) == 3 and len(seen) == 3
    expired = RouteTable(fetch, ttl_ms=1)
    expired.get("U")
    import time

    time.sleep(0.01)
    expired.get("U")
    assert calls.count("U") == 2


def test_route_table_forgets_a_topic_deleted_everywhere():
    answers = {"h1:1": route_answer("broker-a")}
    table = RouteTable(lambda topic: answers, ttl_ms=60_000)
    table.get("T")
    answers = {"h1:1": NotFoundError("gone")}
    with pytest.raises(NotFoundError):
        table.refresh("T")
    with pytest.raises(NotFoundError):
        table.get("T")  # not served from the cache
