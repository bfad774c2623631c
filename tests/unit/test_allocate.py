"""Allocation strategies: shared input checks, AVG, AVG_BY_CIRCLE, CONFIG, the registry, and
the property that a group's members together own every queue exactly once.

Expected tables are worked out by hand from RocketMQ's rules, not computed by the code.
"""

from __future__ import annotations

import logging
import pickle
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmq_spark.allocate import (
    STRATEGIES,
    AllocateMessageQueueAveragely,
    AllocateMessageQueueAveragelyByCircle,
    AllocateMessageQueueByConfig,
    AllocateMessageQueueByMachineRoom,
    AllocateMessageQueueConsistentHash,
    AllocateMessageQueueStrategy,
    get_strategy,
    register_strategy,
    registry,
    strategy_names,
)
from rmq_spark.allocate.base import sorted_consumer_ids
from rmq_spark.errors import InvalidArgumentError
from rmq_spark.structs import MessageQueue

GROUP = "please_rename_unique_group_name"


def queues(count: int, broker: str = "broker-a", topic: str = "TopicTest") -> list[MessageQueue]:
    return [MessageQueue(topic, broker, i) for i in range(count)]


def consumer_ids(count: int) -> list[str]:
    return [f"c{i}" for i in range(1, count + 1)]  # c1..c9 sort in numeric order


def allocations(strategy, mq_all, cid_all) -> list[list[MessageQueue]]:
    """Each member's share, in the order of cid_all."""
    return [strategy.allocate(GROUP, cid, mq_all, cid_all) for cid in cid_all]


def queue_ids(shares: list[list[MessageQueue]]) -> list[list[int]]:
    return [[mq.queue_id for mq in share] for share in shares]


def every_strategy() -> list[AllocateMessageQueueStrategy]:
    return [
        AllocateMessageQueueAveragely(),
        AllocateMessageQueueAveragelyByCircle(),
        AllocateMessageQueueConsistentHash(),
        AllocateMessageQueueByMachineRoom({"room1"}),
        AllocateMessageQueueByConfig(queues(2)),
    ]


ALL_STRATEGIES = pytest.mark.parametrize("strategy", every_strategy(), ids=repr)


# --- AVG -------------------------------------------------------------------------------

AVG_TABLE = [
    pytest.param(8, 3, [[0, 1, 2], [3, 4, 5], [6, 7]], id="8q-3c-first-two-get-extra"),
    pytest.param(10, 4, [[0, 1, 2], [3, 4, 5], [6, 7], [8, 9]], id="10q-4c"),
    pytest.param(6, 3, [[0, 1], [2, 3], [4, 5]], id="6q-3c-even"),
    pytest.param(5, 5, [[0], [1], [2], [3], [4]], id="5q-5c-one-each"),
    pytest.param(3, 5, [[0], [1], [2], [], []], id="3q-5c-last-two-idle"),
    pytest.param(2, 3, [[0], [1], []], id="2q-3c"),
    pytest.param(7, 1, [[0, 1, 2, 3, 4, 5, 6]], id="single-consumer-gets-all"),
    pytest.param(1, 1, [[0]], id="1q-1c"),
]


@pytest.mark.parametrize(("mq_count", "cid_count", "expected"), AVG_TABLE)
def test_avg_gives_contiguous_blocks(mq_count, cid_count, expected):
    shares = allocations(AllocateMessageQueueAveragely(), queues(mq_count), consumer_ids(cid_count))
    assert queue_ids(shares) == expected


# --- AVG_BY_CIRCLE ---------------------------------------------------------------------

CIRCLE_TABLE = [
    pytest.param(8, 3, [[0, 3, 6], [1, 4, 7], [2, 5]], id="8q-3c"),
    pytest.param(10, 4, [[0, 4, 8], [1, 5, 9], [2, 6], [3, 7]], id="10q-4c"),
    pytest.param(3, 5, [[0], [1], [2], [], []], id="3q-5c-last-two-idle"),
    pytest.param(7, 1, [[0, 1, 2, 3, 4, 5, 6]], id="single-consumer-gets-all"),
]


@pytest.mark.parametrize(("mq_count", "cid_count", "expected"), CIRCLE_TABLE)
def test_avg_by_circle_deals_round_robin(mq_count, cid_count, expected):
    strategy = AllocateMessageQueueAveragelyByCircle()
    shares = allocations(strategy, queues(mq_count), consumer_ids(cid_count))
    assert queue_ids(shares) == expected


# --- ordering --------------------------------------------------------------------------


def test_queues_sort_by_topic_then_broker_then_queue_id():
    mq_all = [
        MessageQueue("TopicB", "broker-a", 0),
        MessageQueue("TopicA", "broker-b", 1),
        MessageQueue("TopicA", "broker-b", 0),
        MessageQueue("TopicA", "broker-a", 10),
        MessageQueue("TopicA", "broker-a", 2),
    ]
    shares = allocations(AllocateMessageQueueAveragely(), mq_all, ["c1", "c2"])
    assert shares == [
        [
            MessageQueue("TopicA", "broker-a", 2),
            MessageQueue("TopicA", "broker-a", 10),  # queue ids compare as ints, not text
            MessageQueue("TopicA", "broker-b", 0),
        ],
        [MessageQueue("TopicA", "broker-b", 1), MessageQueue("TopicB", "broker-a", 0)],
    ]


def test_avg_by_circle_spreads_each_consumer_over_both_brokers():
    mq_all = queues(4, "broker-b") + queues(4, "broker-a")
    shares = allocations(AllocateMessageQueueAveragelyByCircle(), mq_all, ["c1", "c2"])
    assert [[(mq.broker_name[-1], mq.queue_id) for mq in share] for share in shares] == [
        [("a", 0), ("a", 2), ("b", 0), ("b", 2)],
        [("a", 1), ("a", 3), ("b", 1), ("b", 3)],
    ]


@ALL_STRATEGIES
def test_unsorted_inputs_give_the_same_result_as_sorted(strategy):
    mq_all = queues(5, "room1@broker-b") + queues(6, "room1@broker-a")
    cid_all = ["10.0.0.1@1", "10.0.0.2@7", "10.0.0.3@2", "10.0.0.10@4"]
    sorted_shares = allocations(strategy, sorted(mq_all), sorted(cid_all))
    rng = random.Random(7)
    for _ in range(5):
        shuffled_mqs, shuffled_cids = mq_all[:], cid_all[:]
        rng.shuffle(shuffled_mqs)
        rng.shuffle(shuffled_cids)
        by_cid = {
            cid: strategy.allocate(GROUP, cid, shuffled_mqs, shuffled_cids) for cid in cid_all
        }
        assert [by_cid[cid] for cid in sorted(cid_all)] == sorted_shares


@ALL_STRATEGIES
def test_each_share_is_returned_in_ascending_queue_order(strategy):
    mq_all = queues(7, "room1@broker-b") + queues(7, "room1@broker-a")
    for share in allocations(strategy, mq_all[::-1], consumer_ids(3)):
        assert share == sorted(share)


def test_consumer_ids_sort_like_java_string_compare_to():
    # Java compares UTF-16 code units: U+1F600 is D83D DE00, which sorts before U+FFFD
    # (code point order would put it after). Java clients must see the same order.
    emoji, replacement = "c\U0001f600", "c\ufffd"
    assert sorted_consumer_ids([replacement, emoji, "c1"]) == ("c1", emoji, replacement)
    strategy = AllocateMessageQueueAveragely()
    assert strategy.allocate(GROUP, emoji, queues(2), [replacement, emoji]) == queues(2)[:1]


# --- shared input checks ---------------------------------------------------------------


@ALL_STRATEGIES
@pytest.mark.parametrize("current_cid", ["", None])
def test_empty_current_cid_is_an_error(strategy, current_cid):
    with pytest.raises(InvalidArgumentError, match="current_cid is empty"):
        strategy.allocate(GROUP, current_cid, queues(3), ["c1"])


@ALL_STRATEGIES
@pytest.mark.parametrize("mq_all", [[], None])
def test_empty_mq_all_is_an_error(strategy, mq_all):
    with pytest.raises(InvalidArgumentError, match="mq_all is empty"):
        strategy.allocate(GROUP, "c1", mq_all, ["c1"])


@ALL_STRATEGIES
@pytest.mark.parametrize("cid_all", [[], None])
def test_empty_cid_all_is_an_error(strategy, cid_all):
    with pytest.raises(InvalidArgumentError, match="cid_all is empty"):
        strategy.allocate(GROUP, "c1", queues(3), cid_all)


def test_duplicate_queues_are_rejected_by_name():
    mq_all = [*queues(3), MessageQueue("TopicTest", "broker-a", 1)]
    with pytest.raises(InvalidArgumentError, match=r"mq_all has duplicate queue.*queue_id=1"):
        AllocateMessageQueueAveragely().allocate(GROUP, "c1", mq_all, ["c1"])


def test_duplicate_consumer_ids_are_rejected_by_name():
    with pytest.raises(InvalidArgumentError, match=r"cid_all has duplicate consumer id.*'c2'"):
        AllocateMessageQueueAveragely().allocate(GROUP, "c1", queues(3), ["c1", "c2", "c2"])


@pytest.mark.parametrize(
    ("mq_all", "cid_all", "message"),
    [
        pytest.param([("TopicTest", "broker-a", 0)], ["c1"], "not a MessageQueue", id="tuple"),
        pytest.param(["TopicTest"], ["c1"], "not a MessageQueue", id="str"),
        pytest.param([MessageQueue("t", "b", "0")], ["c1"], "queue_id an int", id="str-id"),
        pytest.param(queues(1), ["c1", ""], r"cid_all\[1\] is ''", id="empty-cid"),
        pytest.param(queues(1), ["c1", 2], r"cid_all\[1\] is 2", id="int-cid"),
    ],
)
def test_malformed_inputs_are_rejected_with_the_bad_value(mq_all, cid_all, message):
    with pytest.raises(InvalidArgumentError, match=message):
        AllocateMessageQueueAveragely().allocate(GROUP, "c1", mq_all, cid_all)


@ALL_STRATEGIES
def test_consumer_not_in_cid_all_gets_nothing_and_it_is_logged(strategy, caplog):
    with caplog.at_level(logging.INFO, logger="rmq_spark.allocate"):
        assert strategy.allocate(GROUP, "c9", queues(4), ["c1", "c2"]) == []
    assert "'c9' not in cid_all ['c1', 'c2']" in caplog.text
    assert GROUP in caplog.text


@ALL_STRATEGIES
def test_strategies_survive_pickling_for_spark_executors(strategy):
    copy = pickle.loads(pickle.dumps(strategy))
    mq_all, cid_all = queues(9, "room1@broker-a"), consumer_ids(2)
    assert allocations(copy, mq_all, cid_all) == allocations(strategy, mq_all, cid_all)


# --- CONFIG ----------------------------------------------------------------------------


def test_config_returns_its_queues_sorted_whatever_the_route():
    mine = [MessageQueue("TopicTest", "broker-b", 3), MessageQueue("TopicTest", "broker-a", 5)]
    strategy = AllocateMessageQueueByConfig(mine)
    for mq_all, cid_all in [(queues(8), consumer_ids(3)), (queues(1), ["c2"])]:
        for cid in cid_all:
            assert strategy.allocate(GROUP, cid, mq_all, cid_all) == sorted(mine)


@pytest.mark.parametrize(
    ("message_queues", "message"),
    [
        pytest.param([], "message_queues is empty", id="empty"),
        pytest.param(queues(2) + queues(1), "message_queues has duplicate queue", id="dupes"),
        pytest.param(["q0"], r"message_queues\[0\] is 'q0'", id="not-a-queue"),
    ],
)
def test_config_rejects_a_bad_queue_list(message_queues, message):
    with pytest.raises(InvalidArgumentError, match=message):
        AllocateMessageQueueByConfig(message_queues)


# --- registry --------------------------------------------------------------------------


@pytest.fixture
def scratch_registry(monkeypatch):
    """Let a test register strategies without leaking them into other tests."""
    monkeypatch.setattr(registry, "_by_key", dict(registry._by_key))
    monkeypatch.setattr(registry, "_by_name", dict(registry._by_name))


def test_builtin_names_are_registered_in_order():
    assert STRATEGIES == ("avg", "avgByCircle", "consistentHash", "machineRoom", "config")
    assert strategy_names()[: len(STRATEGIES)] == STRATEGIES


@pytest.mark.parametrize(
    ("name", "kwargs", "cls"),
    [
        ("avg", {}, AllocateMessageQueueAveragely),
        ("AVG", {}, AllocateMessageQueueAveragely),
        ("AllocateMessageQueueAveragely", {}, AllocateMessageQueueAveragely),
        ("avgByCircle", {}, AllocateMessageQueueAveragelyByCircle),
        ("avg_by_circle", {}, AllocateMessageQueueAveragelyByCircle),
        ("AVG_BY_CIRCLE", {}, AllocateMessageQueueAveragelyByCircle),
        ("consistentHash", {}, AllocateMessageQueueConsistentHash),
        ("consistent-hash", {"virtual_nodes": 3}, AllocateMessageQueueConsistentHash),
        ("CONSISTENT_HASH", {}, AllocateMessageQueueConsistentHash),
        ("machineRoom", {"consumer_idcs": {"room1"}}, AllocateMessageQueueByMachineRoom),
        ("MACHINE_ROOM", {"consumer_idcs": "room1,room2"}, AllocateMessageQueueByMachineRoom),
        ("config", {"message_queues": queues(1)}, AllocateMessageQueueByConfig),
        ("CONFIG", {"message_queues": queues(1)}, AllocateMessageQueueByConfig),
    ],
)
def test_get_strategy_by_name_or_alias(name, kwargs, cls):
    strategy = get_strategy(name, **kwargs)
    assert type(strategy) is cls
    assert strategy.name in STRATEGIES


def test_get_strategy_passes_options_to_the_constructor():
    assert get_strategy("consistentHash", virtual_nodes=3).virtual_nodes == 3
    assert get_strategy("machineRoom", consumer_idcs="room1, room2").consumer_idcs == {
        "room1",
        "room2",
    }


@pytest.mark.parametrize("name", ["roundRobin", "", None, 3])
def test_unknown_strategy_names_list_the_valid_ones(name):
    with pytest.raises(InvalidArgumentError, match="unknown allocate strategy") as info:
        get_strategy(name)
    for valid in STRATEGIES:
        assert valid in str(info.value)


@pytest.mark.parametrize(
    ("name", "kwargs"),
    [("avg", {"virtual_nodes": 3}), ("machineRoom", {}), ("consistentHash", {"nodes": 3})],
)
def test_wrong_options_for_a_strategy_are_an_error(name, kwargs):
    with pytest.raises(InvalidArgumentError, match=f"strategy '{name}' cannot take options"):
        get_strategy(name, **kwargs)


def test_user_strategies_can_be_registered_and_looked_up(scratch_registry):
    @register_strategy
    class FirstConsumerTakesAll(AllocateMessageQueueStrategy):
        name = "firstTakesAll"
        aliases = ("FIRST",)

        def allocate_sorted(self, consumer_group, current_cid, mq_all, cid_all):
            return list(mq_all) if current_cid == cid_all[0] else []

    assert "firstTakesAll" in strategy_names()
    strategy = get_strategy("first")
    assert allocations(strategy, queues(2)[::-1], ["c2", "c1"]) == [[], queues(2)]
    assert register_strategy(FirstConsumerTakesAll) is FirstConsumerTakesAll  # idempotent


def test_registering_a_taken_name_is_an_error(scratch_registry):
    class MyAvg(AllocateMessageQueueAveragely):
        name = "myAvg"
        aliases = ("AVG",)

    with pytest.raises(InvalidArgumentError, match="already belongs to AllocateMessageQueueAv"):
        register_strategy(MyAvg)
    assert type(get_strategy("avg")) is AllocateMessageQueueAveragely


def test_registering_a_class_without_name_or_implementation_is_an_error(scratch_registry):
    class Nameless(AllocateMessageQueueStrategy):
        def allocate_sorted(self, consumer_group, current_cid, mq_all, cid_all):
            return []

    class Unfinished(AllocateMessageQueueStrategy):
        name = "unfinished"

    with pytest.raises(InvalidArgumentError, match="set a class attribute name"):
        register_strategy(Nameless)
    with pytest.raises(InvalidArgumentError, match="is abstract; implement"):
        register_strategy(Unfinished)
    with pytest.raises(InvalidArgumentError, match="not an AllocateMessageQueueStrategy"):
        register_strategy(dict)


# --- every queue exactly once ----------------------------------------------------------

message_queues = st.sets(
    st.builds(
        MessageQueue,
        st.sampled_from(["TopicA", "TopicB"]),
        st.sampled_from(["broker-a", "broker-b", "room1@broker-c"]),
        st.integers(0, 15),
    ),
    min_size=1,
    max_size=40,
)
consumer_id_sets = st.sets(st.text(min_size=1, max_size=6), min_size=1, max_size=12)


@pytest.mark.parametrize("name", ["avg", "avgByCircle", "consistentHash"])
@settings(deadline=None)
@given(mq_set=message_queues, cid_set=consumer_id_sets)
def test_members_together_own_every_queue_exactly_once(name, mq_set, cid_set):
    strategy = get_strategy(name)
    mq_all, cid_all = list(mq_set), list(cid_set)
    owned = [mq for share in allocations(strategy, mq_all, cid_all) for mq in share]
    assert len(owned) == len(mq_set)
    assert set(owned) == mq_set


@pytest.mark.parametrize("name", ["avg", "avgByCircle"])
@settings(deadline=None)
@given(mq_set=message_queues, cid_set=consumer_id_sets)
def test_even_strategies_differ_by_at_most_one_queue(name, mq_set, cid_set):
    sizes = [len(s) for s in allocations(get_strategy(name), list(mq_set), list(cid_set))]
    assert max(sizes) - min(sizes) <= 1
