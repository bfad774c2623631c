"""The name server's route table on its own: registrations, departures and answers, with
literal inputs and times (RocketMQ's RouteInfoManager semantics)."""

from __future__ import annotations

import pytest

from rmq_spark.broker.remoting.route_table import (
    EXPIRY_MS,
    BrokerData,
    QueueData,
    Registered,
    Registration,
    RouteTable,
    TopicEntry,
)
from rmq_spark.errors import InvalidArgumentError

A0 = "10.0.0.1:9876"
A1 = "10.0.0.2:9876"
B0 = "10.0.0.3:9876"


def reg(name, broker_id, address, topics=(), version=(1, 1), cluster="C", body=True):
    entries = tuple(TopicEntry(t, r, w, p) for t, r, w, p in topics) if body else None
    return Registration(cluster, name, broker_id, address, f"ha-{address}", version, entries)


def table_of(*registrations, now=0) -> RouteTable:
    table = RouteTable()
    for registration in registrations:
        table.register(registration, now)
    return table


def route_rows(table: RouteTable, topic: str):
    route = table.route(topic)
    if route is None:
        return None
    queues = [(q.broker_name, q.read_queues, q.write_queues, q.perm) for q in route.queues]
    brokers = [(b.cluster, b.broker_name, b.addresses) for b in route.brokers]
    return queues, brokers


@pytest.mark.parametrize(
    ("registrations", "topic", "expected"),
    [
        # one master: its topics and its address
        (
            [reg("a", 0, A0, [("T", 4, 4, 6)])],
            "T",
            ([("a", 4, 4, 6)], [("C", "a", {0: A0})]),
        ),
        # two broker groups share a topic: both queue datas, both brokers, by name
        (
            [reg("b", 0, B0, [("T", 8, 8, 6)]), reg("a", 0, A0, [("T", 4, 2, 6)])],
            "T",
            ([("a", 4, 2, 6), ("b", 8, 8, 6)], [("C", "a", {0: A0}), ("C", "b", {0: B0})]),
        ),
        # a slave adds its address; its topics do not count (a group's are its master's)
        (
            [reg("a", 0, A0, [("T", 4, 4, 6)]), reg("a", 1, A1, [("T", 1, 1, 6), ("U", 1, 1, 6)])],
            "T",
            ([("a", 4, 4, 6)], [("C", "a", {0: A0, 1: A1})]),
        ),
        ([reg("a", 0, A0, [("T", 4, 4, 6)]), reg("a", 1, A1, [("U", 1, 1, 6)])], "U", None),
        # a slave alone: a broker group with no master and no topics
        ([reg("a", 1, A1, [("T", 4, 4, 6)])], "T", None),
        # same version again: the topics it carries are not read again
        (
            [reg("a", 0, A0, [("T", 4, 4, 6)]), reg("a", 0, A0, [("T", 2, 2, 6)])],
            "T",
            ([("a", 4, 4, 6)], [("C", "a", {0: A0})]),
        ),
        # a new version replaces the group's topics: changed ones change, missing ones go
        (
            [reg("a", 0, A0, [("T", 4, 4, 6)]), reg("a", 0, A0, [("T", 2, 2, 4)], (1, 2))],
            "T",
            ([("a", 2, 2, 4)], [("C", "a", {0: A0})]),
        ),
        (
            [reg("a", 0, A0, [("T", 4, 4, 6)]), reg("a", 0, A0, [("U", 1, 1, 6)], (1, 2))],
            "T",
            None,
        ),
        # no body: the topics stay as they were
        (
            [reg("a", 0, A0, [("T", 4, 4, 6)]), reg("a", 0, A0, body=False, version=(0, 0))],
            "T",
            ([("a", 4, 4, 6)], [("C", "a", {0: A0})]),
        ),
        # a slave promoted to master at the same address drops its old id
        (
            [reg("a", 1, A1, [("T", 4, 4, 6)]), reg("a", 0, A1, [("T", 4, 4, 6)])],
            "T",
            ([("a", 4, 4, 6)], [("C", "a", {0: A1})]),
        ),
        # a master at a new address replaces the old one
        (
            [reg("a", 0, A0, [("T", 4, 4, 6)]), reg("a", 0, A1, [("T", 4, 4, 6)])],
            "T",
            ([("a", 4, 4, 6)], [("C", "a", {0: A1})]),
        ),
    ],
)
def test_routes_after_registrations(registrations, topic, expected):
    assert route_rows(table_of(*registrations), topic) == expected


def test_a_live_address_replaced_under_the_same_name_and_id_is_reported():
    table = table_of(reg("a", 0, A0))
    assert table.register(reg("a", 0, A1), 0).replaced == A0
    assert table.register(reg("a", 0, A1), 0).replaced is None
    assert table.channel_closed(None) == []  # no channel: nothing to close
    assert table.unregister("C", "a", 0, A1)
    assert table.register(reg("a", 0, A0), 0).replaced is None


def test_a_slave_learns_its_masters_address_and_ha_address():
    table = table_of(reg("a", 0, A0))
    assert table.register(reg("a", 1, A1), 0) == Registered(A0, f"ha-{A0}")
    assert table.register(reg("b", 1, B0), 0) == Registered()
    assert table.register(reg("a", 0, A0), 0) == Registered()


@pytest.mark.parametrize(
    ("leave", "cluster", "route_t"),
    [
        # the master leaves, the slave stays: the group is still there, with no master
        (("C", "a", 0, A0), {"C": ["a", "b"]}, [("a", {1: A1}), ("b", {0: B0})]),
        # the slave leaves
        (("C", "a", 1, A1), {"C": ["a", "b"]}, [("a", {0: A0}), ("b", {0: B0})]),
        # a wrong address for the id changes nothing
        (("C", "a", 0, B0), {"C": ["a", "b"]}, [("a", {0: A0, 1: A1}), ("b", {0: B0})]),
        # the last address of a group: the group and its queue data leave
        (("C", "b", 0, B0), {"C": ["a"]}, [("a", {0: A0, 1: A1})]),
    ],
)
def test_unregister(leave, cluster, route_t):
    table = table_of(
        reg("a", 0, A0, [("T", 4, 4, 6)]), reg("a", 1, A1), reg("b", 0, B0, [("T", 4, 4, 6)])
    )
    table.unregister(*leave)
    assert table.clusters() == cluster
    route = table.route("T")
    assert route is not None
    assert [(b.broker_name, b.addresses) for b in route.brokers] == route_t


def test_a_broker_silent_for_120_s_expires_unless_pinned():
    table = RouteTable()
    table.register(reg("own", 0, A0, [("T", 1, 1, 6)]), 0, pinned=True)
    table.register(reg("a", 0, A1, [("T", 4, 4, 6), ("U", 1, 1, 6)]), 0)
    table.register(reg("b", 0, B0, [("T", 2, 2, 6)]), 0)
    table.register(reg("b", 0, B0, [("T", 2, 2, 6)]), 60_000)  # b registers again
    assert table.expire(EXPIRY_MS) == []  # exactly 120 s: not yet
    assert table.expire(EXPIRY_MS + 1) == [A1]
    assert [q.broker_name for q in table.route("T").queues] == ["b", "own"]
    assert table.route("U") is None
    assert table.topics() == ["T"]
    assert table.expire(60_000 + EXPIRY_MS + 1) == [B0]
    assert table.expire(10 * EXPIRY_MS) == []  # the pinned one never expires
    assert [b.broker_name for b in table.brokers()] == ["own"]


def test_a_closed_connection_takes_its_brokers_away():
    table = RouteTable()
    first, second = object(), object()
    table.register(reg("a", 0, A0, [("T", 4, 4, 6)]), 0, channel=first)
    table.register(reg("b", 0, B0, [("T", 4, 4, 6)]), 0, channel=second)
    assert table.channel_closed(object()) == []
    assert table.channel_closed(first) == [A0]
    assert [b.broker_name for b in table.brokers()] == ["b"]
    assert table.live_addresses() == [B0]


def test_no_one_takes_the_pinned_brokers_name_and_id():
    table = RouteTable()
    table.register(reg("own", 0, A0), 0, pinned=True)
    with pytest.raises(InvalidArgumentError, match=r"own broker at 10\.0\.0\.1:9876"):
        table.register(reg("own", 0, B0), 0)
    table.register(reg("own", 0, A0, version=(2, 2)), 0)  # at its own address: fine
    table.register(reg("own", 1, B0), 0)  # as its slave: fine
    assert table.brokers() == [BrokerData("C", "own", {0: A0, 1: B0})]


def test_the_pinned_broker_registering_with_itself_stays_pinned():
    table = RouteTable()
    table.register(reg("own", 0, A0, [("T", 1, 1, 6)]), 0, pinned=True)
    table.register(reg("own", 0, A0, [("T", 1, 1, 6)]), 0, channel=object())
    assert not table.unregister("C", "own", 0, A0)
    assert table.expire(10 * EXPIRY_MS) == []
    assert [b.broker_name for b in table.brokers()] == ["own"]


def test_cluster_questions():
    table = table_of(
        reg("a", 0, A0, [("T", 4, 4, 6), ("OnlyA", 1, 1, 6)], cluster="C1"),
        reg("b", 0, B0, [("T", 4, 4, 6)], cluster="C2"),
    )
    assert table.clusters() == {"C1": ["a"], "C2": ["b"]}
    assert table.topics() == ["OnlyA", "T"]
    assert table.topics_of_cluster("C1") == ["OnlyA", "T"]
    assert table.topics_of_cluster("C2") == ["T"]
    assert table.topics_of_cluster("nowhere") == []
    assert table.system_topics() == ["C1", "C2", "a", "b"]
    # a broker group moving to another cluster leaves the old one
    table.register(reg("b", 0, B0, [("T", 4, 4, 6)], cluster="C1", version=(2, 2)), 0)
    assert table.clusters() == {"C1": ["a", "b"]}


@pytest.mark.parametrize(
    ("cluster", "left"),
    [(None, None), ("C1", [QueueData("b", 4, 4, 6)]), ("C9", None)],
)
def test_delete_topic(cluster, left):
    table = table_of(
        reg("a", 0, A0, [("T", 4, 4, 6)], cluster="C1"),
        reg("b", 0, B0, [("T", 4, 4, 6)], cluster="C2"),
    )
    table.delete_topic("T", cluster)
    route = table.route("T")
    if cluster == "C9":  # no broker of that cluster: nothing changes
        assert route is not None and len(route.queues) == 2
    else:
        assert (None if route is None else list(route.queues)) == left
