"""Which replica of a RocketMQ broker group a read or a commit goes to, from literal routes,
live sets and suggestions; and a route body read with every replica."""

from __future__ import annotations

import pytest

from rmq_spark.client.offsets import QueueOffsets
from rmq_spark.client.remoting import parse_route
from rmq_spark.client.remoting.replicas import commit_node, read_node, read_order
from rmq_spark.source.positions import reconcile
from rmq_spark.structs import MessageQueue

M, S1, S2 = "10.0.0.1:10911", "10.0.0.2:10911", "10.0.0.3:10911"


@pytest.mark.parametrize(
    ("replicas", "suggested", "down", "expected"),
    [
        # the master while it is up, whatever slaves there are
        ({0: M, 1: S1}, 0, set(), (0, M)),
        ({0: M}, 0, set(), (0, M)),
        # the master down (a call just failed): its slave
        ({0: M, 1: S1}, 0, {M}, (1, S1)),
        ({0: M, 1: S1, 2: S2}, 0, {M}, (1, S1)),
        ({0: M, 1: S1, 2: S2}, 0, {M, S1}, (2, S2)),
        # the master gone from the route: a slave
        ({1: S1}, 0, set(), (1, S1)),
        ({2: S2}, 0, set(), (2, S2)),
        # a pull answer suggested a slave (slaveReadEnable): that one
        ({0: M, 1: S1}, 1, set(), (1, S1)),
        ({0: M, 1: S1, 2: S2}, 2, set(), (2, S2)),
        # the suggested slave is not in the route: the id after it, as Java's client looks
        ({0: M, 2: S2}, 1, set(), (2, S2)),
        # ... or, without that one either, the master
        ({0: M, 3: S2}, 1, set(), (0, M)),
        # the suggested slave is down: back to the master
        ({0: M, 1: S1}, 1, {S1}, (0, M)),
        # the last suggestion said master again (the slave's answer, or the master back)
        ({0: M, 1: S1}, 0, set(), (0, M)),
        # no live replica, or none at all
        ({0: M, 1: S1}, 0, {M, S1}, None),
        ({}, 0, set(), None),
        ({0: M}, 1, {M}, None),
    ],
)
def test_where_a_read_goes(replicas, suggested, down, expected):
    assert read_node(replicas, suggested, down) == expected


def test_the_order_reads_try_replicas_in():
    assert read_order({0: M, 1: S1, 2: S2}, 0) == [0, 1, 2]
    assert read_order({0: M, 1: S1, 2: S2}, 1) == [1, 2, 0]
    assert read_order({0: M, 1: S1, 2: S2}, 2) == [2, 0, 1]
    assert read_order({1: S1}, 5) == [1]


@pytest.mark.parametrize(
    ("replicas", "down", "expected"),
    [
        ({0: M, 1: S1}, set(), M),
        ({0: M, 1: S1}, {M}, None),  # a slave never takes a commit
        ({1: S1}, set(), None),
        ({}, set(), None),
    ],
)
def test_where_a_commit_goes(replicas, down, expected):
    assert commit_node(replicas, down) == expected


def test_a_route_keeps_every_replica_and_reads_masterless_groups():
    body = (
        b'{"brokerDatas":['
        b'{"brokerAddrs":{"0":"10.0.0.1:10911","1":"10.0.0.2:10911"},"brokerName":"a"},'
        b'{"brokerAddrs":{"1":"10.0.0.3:10911"},"brokerName":"b"}],'
        b'"queueDatas":[{"brokerName":"a","perm":6,"readQueueNums":2,"writeQueueNums":2},'
        b'{"brokerName":"b","perm":6,"readQueueNums":2,"writeQueueNums":2},'
        b'{"brokerName":"c","perm":6,"readQueueNums":1,"writeQueueNums":1}]}'
    )
    route = parse_route("T", body)
    assert route.replicas == {"a": {0: M, 1: S1}, "b": {1: S2}, "c": {}}
    assert route.addresses == {"a": M}  # masters: where writes go
    # b (master down) is read from its slave; c (no address) is read, and fails, by name
    assert {(mq.broker_name, mq.queue_id) for mq in route.readable} == {
        ("a", 0), ("a", 1), ("b", 0), ("b", 1), ("c", 0),
    }  # fmt: skip
    assert {mq.broker_name for mq in route.writable} == {"a"}
    assert route.reached_at("a") == M and route.reached_at("b") == S2
    assert route.reached_at("c") == ""


def test_fastjson_routes_with_number_keys_too():
    body = b'{"brokerDatas":[{"brokerAddrs":{0:"m:1",1:"s:1"},"brokerName":"a"}],' + (
        b'"queueDatas":[{"brokerName":"a","perm":6,"readQueueNums":1,"writeQueueNums":1}]}'
    )
    assert parse_route("T", body).replicas == {"a": {0: "m:1", 1: "s:1"}}


def test_a_stream_waits_for_a_slave_that_is_behind_instead_of_reporting_loss():
    """A slave answering for its group may end before the stream's next offset, or before
    the end the master had: neither is data loss nor a re-created queue."""
    a0, a1, b0 = MessageQueue("T", "a", 0), MessageQueue("T", "a", 1), MessageQueue("T", "b", 0)
    queues = {a0: QueueOffsets(0, 90), a1: QueueOffsets(0, 120), b0: QueueOffsets(0, 50)}
    start = {a0: 100, a1: 100, b0: 60}  # b0 really shrank (b's master answered)
    seen = {a0: 100, a1: 130, b0: 60}
    state = reconcile(start, queues, lambda _: True, seen, lambda name: name == "a")
    assert state.silent == [a0]  # kept at 100 until a replica holds more
    assert state.start[a0] == state.latest[a0] == 100
    assert (state.start[a1], state.latest[a1]) == (100, 120)  # read what the slave has
    assert [(loss.mq, loss.kind) for loss in state.losses] == [(b0, "shrunk")]
