"""MACHINE_ROOM: only queues of brokers in the consumer's rooms, split among all members."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rmq_spark.allocate import AllocateMessageQueueByMachineRoom
from rmq_spark.errors import InvalidArgumentError
from rmq_spark.structs import MessageQueue

GROUP = "g"


def mq(broker: str, queue_id: int) -> MessageQueue:
    return MessageQueue("TopicTest", broker, queue_id)


ROOM1 = [mq("room1@broker-a", i) for i in range(4)]
ROOM2 = [mq("room2@broker-b", i) for i in range(4)]
NO_ROOM = [mq("broker-c", 0), mq("broker-c", 1), mq("@broker-d", 0)]
ROUTE = ROOM2 + NO_ROOM + ROOM1


def shares(strategy, mq_all, cid_all) -> list[list[MessageQueue]]:
    return [strategy.allocate(GROUP, cid, mq_all, cid_all) for cid in cid_all]


def test_one_room_blocks_then_leftover_in_circle():
    # 4 room1 queues, 3 consumers: blocks of 1, and leftover a3 goes to the first consumer
    strategy = AllocateMessageQueueByMachineRoom({"room1"})
    assert shares(strategy, ROUTE, ["c1", "c2", "c3"]) == [
        [ROOM1[0], ROOM1[3]],
        [ROOM1[1]],
        [ROOM1[2]],
    ]


def test_two_rooms_share_one_sorted_list():
    # served, sorted: a0 a1 a2 a3 b0 b1 b2 b3; blocks of 2; leftovers b2 -> c1, b3 -> c2
    strategy = AllocateMessageQueueByMachineRoom({"room1", "room2"})
    assert shares(strategy, ROUTE, ["c3", "c2", "c1"]) == [
        [ROOM2[0], ROOM2[1]],
        [ROOM1[2], ROOM1[3], ROOM2[3]],
        [ROOM1[0], ROOM1[1], ROOM2[2]],
    ]


def test_fewer_served_queues_than_consumers():
    strategy = AllocateMessageQueueByMachineRoom("room1")
    assert shares(strategy, [*NO_ROOM, ROOM1[2]], ["c1", "c2", "c3"]) == [[ROOM1[2]], [], []]


def test_single_consumer_gets_every_queue_of_its_rooms_only():
    strategy = AllocateMessageQueueByMachineRoom({"room2"})
    assert strategy.allocate(GROUP, "c1", ROUTE, ["c1"]) == ROOM2


def test_no_queue_in_the_rooms_means_nothing_not_an_error():
    strategy = AllocateMessageQueueByMachineRoom({"room9"})
    assert shares(strategy, ROUTE, ["c1", "c2"]) == [[], []]


def test_consumer_not_in_cid_all_gets_nothing():
    strategy = AllocateMessageQueueByMachineRoom({"room1"})
    assert strategy.allocate(GROUP, "c9", ROUTE, ["c1", "c2"]) == []


@pytest.mark.parametrize(
    ("broker_name", "separator", "room"),
    [
        ("room1@broker-a", "@", "room1"),
        ("room1@broker@x", "@", "room1"),  # the first separator ends the room
        ("broker-a", "@", None),
        ("@broker-a", "@", None),
        ("room1#broker-a", "#", "room1"),
        ("room1@broker-a", "#", None),
        ("idc-1::broker-a", "::", "idc-1"),
    ],
)
def test_room_is_the_broker_name_before_the_separator(broker_name, separator, room):
    strategy = AllocateMessageQueueByMachineRoom({"x"}, separator=separator)
    assert strategy.room_of(mq(broker_name, 0)) == room


def test_custom_separator_selects_queues():
    route = [mq("room1#broker-a", 0), mq("room1@broker-a", 1), mq("room2#broker-b", 0)]
    strategy = AllocateMessageQueueByMachineRoom({"room1"}, separator="#")
    assert strategy.allocate(GROUP, "c1", route, ["c1"]) == [mq("room1#broker-a", 0)]


def test_rooms_can_be_a_comma_separated_string():
    assert AllocateMessageQueueByMachineRoom(" room1, room2 ").consumer_idcs == {"room1", "room2"}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"consumer_idcs": set()}, "consumer_idcs must be non-empty room names"),
        ({"consumer_idcs": "room1,"}, "consumer_idcs must be non-empty room names"),
        ({"consumer_idcs": [1]}, "consumer_idcs must be non-empty room names"),
        ({"consumer_idcs": {"room1"}, "separator": ""}, "separator must be a non-empty string"),
    ],
)
def test_bad_options_are_rejected(kwargs, message):
    with pytest.raises(InvalidArgumentError, match=message):
        AllocateMessageQueueByMachineRoom(**kwargs)


@given(
    route=st.sets(
        st.builds(
            mq,
            st.sampled_from(["room1@broker-a", "room2@broker-b", "room3@broker-c", "broker-d"]),
            st.integers(0, 15),
        ),
        min_size=1,
        max_size=40,
    ),
    rooms=st.sets(st.sampled_from(["room1", "room2", "room3"]), min_size=1),
    cid_set=st.sets(st.text(min_size=1, max_size=6), min_size=1, max_size=12),
)
def test_members_with_the_same_rooms_own_each_served_queue_once(route, rooms, cid_set):
    strategy = AllocateMessageQueueByMachineRoom(rooms)
    owned = [q for share in shares(strategy, list(route), list(cid_set)) for q in share]
    served = {q for q in route if q.broker_name.split("@")[0] in rooms}
    assert len(owned) == len(served)
    assert set(owned) == served
