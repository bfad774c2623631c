"""CONSISTENT_HASH: the ring lookup rule on a hand-built ring, stability when the group
changes, and the same answer in every process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import rmq_spark
from rmq_spark.allocate import AllocateMessageQueueConsistentHash, md5_64, queue_key
from rmq_spark.errors import InvalidArgumentError
from rmq_spark.structs import MessageQueue

GROUP = "g"


def queues(count: int) -> list[MessageQueue]:
    # two brokers, like a real route, so queue keys differ in more than the id
    return [MessageQueue("TopicTest", f"broker-{'ab'[i % 2]}", i // 2) for i in range(count)]


def owners(strategy, mq_all, cid_all) -> dict[MessageQueue, str]:
    return {mq: cid for cid in cid_all for mq in strategy.allocate(GROUP, cid, mq_all, cid_all)}


def fixed_positions(table: dict[str, int]):
    """A hash function placing known keys at hand-picked ring positions."""

    def position(key: str) -> int:
        return table[key]

    return position


Q = [MessageQueue("t", "b", i) for i in range(4)]


def test_each_queue_goes_to_the_first_node_at_or_after_it_wrapping_around():
    # ring: a-0 @100, b-0 @200; queues @50 -> a, @100 -> a (at counts), @150 -> b,
    # @250 -> past the last node, wraps to a
    ring = {"a-0": 100, "b-0": 200}
    at = dict(zip(map(queue_key, Q), [50, 100, 150, 250], strict=True))
    strategy = AllocateMessageQueueConsistentHash(1, fixed_positions(ring | at))
    assert strategy.allocate(GROUP, "a", Q, ["a", "b"]) == [Q[0], Q[1], Q[3]]
    assert strategy.allocate(GROUP, "b", Q, ["b", "a"]) == [Q[2]]


def test_virtual_nodes_are_named_cid_dash_index():
    # ring: a-0 @10, b-1 @40, b-0 @200, a-1 @300; queues @30 -> b-1, @50 -> b-0,
    # @250 -> a-1, @400 -> wraps to a-0
    ring = {"a-0": 10, "a-1": 300, "b-0": 200, "b-1": 40}
    at = dict(zip(map(queue_key, Q), [30, 50, 250, 400], strict=True))
    strategy = AllocateMessageQueueConsistentHash(2, fixed_positions(ring | at))
    assert owners(strategy, Q, ["a", "b"]) == {Q[0]: "b", Q[1]: "b", Q[2]: "a", Q[3]: "a"}


def test_nodes_at_the_same_position_go_to_the_smaller_consumer_id():
    ring = {"a-0": 100, "b-0": 100}
    at = dict.fromkeys(map(queue_key, Q), 100)
    strategy = AllocateMessageQueueConsistentHash(1, fixed_positions(ring | at))
    assert owners(strategy, Q, ["b", "a"]) == dict.fromkeys(Q, "a")


def test_default_hash_is_md5_first_eight_bytes_big_endian():
    # digests from coreutils: printf 'c1-0' | md5sum -> e7a7eb0bf5cc5f18...
    assert md5_64("c1-0") == 0xE7A7EB0BF5CC5F18
    key = queue_key(MessageQueue("t", "broker-a", 0))
    assert key == "MessageQueue [topic=t, brokerName=broker-a, queueId=0]"
    assert md5_64(key) == 0x02C04AB7F2EBC566


def test_single_consumer_gets_every_queue():
    strategy = AllocateMessageQueueConsistentHash()
    assert strategy.allocate(GROUP, "only", queues(12), ["only"]) == sorted(queues(12))


def test_adding_a_consumer_moves_few_queues_and_only_to_the_newcomer():
    strategy = AllocateMessageQueueConsistentHash()
    mq_all = queues(100)
    before = owners(strategy, mq_all, ["c1", "c2", "c3", "c4"])
    after = owners(strategy, mq_all, ["c1", "c2", "c3", "c4", "c5"])
    moved = [mq for mq in mq_all if before[mq] != after[mq]]
    assert 0 < len(moved) < 50  # AVG would move most of them
    assert {after[mq] for mq in moved} == {"c5"}


def test_removing_a_consumer_moves_only_its_queues():
    strategy = AllocateMessageQueueConsistentHash()
    mq_all = queues(100)
    before = owners(strategy, mq_all, ["c1", "c2", "c3", "c4", "c5"])
    after = owners(strategy, mq_all, ["c1", "c2", "c4", "c5"])
    assert [mq for mq in mq_all if before[mq] != after[mq]] == [
        mq for mq in mq_all if before[mq] == "c3"
    ]


def test_more_virtual_nodes_spread_queues_more_evenly():
    mq_all, cid_all = queues(400), ["c1", "c2", "c3", "c4"]

    def spread(virtual_nodes: int) -> int:
        strategy = AllocateMessageQueueConsistentHash(virtual_nodes)
        counts = [len(strategy.allocate(GROUP, c, mq_all, cid_all)) for c in cid_all]
        return max(counts) - min(counts)

    assert spread(200) < spread(1)


_CHILD = """
import json, sys
from rmq_spark.allocate import AllocateMessageQueueConsistentHash
from rmq_spark.structs import MessageQueue
mq_all = [MessageQueue(*q) for q in json.loads(sys.argv[1])]
cid_all = json.loads(sys.argv[2])
strategy = AllocateMessageQueueConsistentHash()
print(json.dumps({c: strategy.allocate("g", c, mq_all, cid_all) for c in cid_all}))
"""


@pytest.mark.parametrize("hash_seed", ["0", "4242"])
def test_same_allocation_in_another_process_with_another_hash_seed(hash_seed):
    mq_all, cid_all = queues(30), ["10.0.0.1@1", "10.0.0.2@1", "10.0.0.3@1"]
    strategy = AllocateMessageQueueConsistentHash()
    here = {c: [list(mq) for mq in strategy.allocate(GROUP, c, mq_all, cid_all)] for c in cid_all}
    repo_root = str(Path(rmq_spark.__file__).resolve().parents[1])
    python_path = os.pathsep.join(filter(None, [repo_root, os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONHASHSEED": hash_seed, "PYTHONPATH": python_path}
    child = subprocess.run(
        [sys.executable, "-c", _CHILD, json.dumps(mq_all), json.dumps(cid_all)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert json.loads(child.stdout) == here


def test_allocation_is_pinned_so_upgrades_do_not_reshuffle_groups():
    # Regression pin: members on different versions must agree, so the ring layout (node
    # names, queue keys, md5_64) may not change silently. Values recorded from this code.
    strategy = AllocateMessageQueueConsistentHash()
    assert strategy.allocate(GROUP, "c1", queues(6), ["c0", "c1", "c2"]) == [
        MessageQueue("TopicTest", "broker-a", 0),
        MessageQueue("TopicTest", "broker-b", 2),
    ]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"virtual_nodes": 0}, "virtual_nodes is 0; it must be at least 1"),
        ({"virtual_nodes": "10"}, "virtual_nodes must be an int, got '10'"),
        ({"virtual_nodes": True}, "virtual_nodes must be an int"),
        ({"hash_fn": "md5"}, "hash_fn must be a callable"),
    ],
)
def test_bad_options_are_rejected(kwargs, message):
    with pytest.raises(InvalidArgumentError, match=message):
        AllocateMessageQueueConsistentHash(**kwargs)


def test_a_hash_function_returning_a_non_int_is_reported():
    strategy = AllocateMessageQueueConsistentHash(hash_fn=lambda key: key.upper())
    with pytest.raises(InvalidArgumentError, match="it must return an int"):
        strategy.allocate(GROUP, "c1", queues(2), ["c1"])
