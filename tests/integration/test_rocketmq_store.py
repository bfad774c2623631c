"""A store Apache RocketMQ 4.9 wrote (16 MiB segments, RocketMQ's 300,000-entry queue files),
opened by rocketlite's broker with no editing and no flag beyond its directory: its
``topics.json`` (perm 7, RocketMQ's inherit bit) and ``consumerOffset.json`` (fastjson's
bare numeric keys) are read as they are, every message is served and the group's offsets
are kept. Needs ``ROCKETMQ_HOME`` (see the README, "Testing against Apache RocketMQ")."""

from __future__ import annotations

import json

import pytest

from rmq_spark.client import Admin
from rmq_spark.client.remoting import RemotingClient
from tests.support import rocketmq_harness
from tests.support.broker_harness import BrokerProcess, read_queue
from tests.support.eventually import eventually

pytestmark = pytest.mark.skipif(
    not rocketmq_harness.available(),
    reason="needs Apache RocketMQ 4.9: set ROCKETMQ_HOME to a build with lib/",
)

TOPIC, GROUP = "WrittenByApache", "apache-group"


def test_rocketlite_opens_a_store_apache_rocketmq_wrote(tmp_path):
    cluster = rocketmq_harness.RocketMQCluster(tmp_path / "apache").start()
    sent: dict[int, list[bytes]] = {}
    try:
        with RemotingClient(cluster.name_server) as client:
            queues, first = rocketmq_harness.make_topic(client, TOPIC)
            sent[0] = [b"first"] * first
            for i in range(400):
                mq = queues[i % len(queues)]
                body = f"apache-{i}".encode()
                client.send(mq, [body], [{"TAGS": "TagA", "KEYS": f"k{i}"}])
                sent.setdefault(mq.queue_id, []).append(body)
            for mq in queues:
                client.commit_offset(GROUP, mq, 3)
    finally:
        cluster.stop(keep_store=True)  # a clean shutdown writes consumerOffset.json
    store = tmp_path / "apache" / "store"
    topics = json.loads((store / "config" / "topics.json").read_text())["topicConfigTable"]
    assert topics["TBW102"]["perm"] == 7  # what made rocketlite refuse such a store
    assert "{0:" in (store / "config" / "consumerOffset.json").read_text().replace(" ", "")

    # no flag beyond the directory: the segment and queue-file sizes are the store's own
    broker = BrokerProcess("broker-a", store, tmp_path / "rocketlite.log", []).start()
    try:
        for queue_id, bodies in sent.items():
            rows = read_queue(broker.endpoint, TOPIC, queue_id, "broker-a")
            assert [r["body"] for r in rows] == bodies
        with Admin(broker.endpoint) as admin:
            offsets = admin.consumer_offsets(GROUP, TOPIC)
        assert {mq.queue_id: o for mq, o in offsets.items()} == {q: 3 for q in sent}
    finally:
        broker.stop()
    # what it writes back keeps RocketMQ's bits
    topics = json.loads((store / "config" / "topics.json").read_text())["topicConfigTable"]
    assert topics["TBW102"]["perm"] == 7


def test_rocketlite_delivers_the_delayed_messages_apache_rocketmq_left_pending(tmp_path):
    cluster = rocketmq_harness.RocketMQCluster(tmp_path / "apache").start()
    try:
        with RemotingClient(cluster.name_server) as client:
            queues, _ = rocketmq_harness.make_topic(client, "DelayedByApache")
            mq = next(q for q in queues if q.queue_id == 0)
            for i in range(20):  # level 3: 10 s
                client.send(mq, [f"later-{i}".encode()], [{"DELAY": "3"}])
    finally:
        cluster.stop(keep_store=True)  # before they fall due
    store = tmp_path / "apache" / "store"
    # RocketMQ's delay progress, in fastjson's dialect: rocketlite resumes from it
    assert "offsetTable" in (store / "config" / "delayOffset.json").read_text()

    broker = BrokerProcess("broker-a", store, tmp_path / "rocketlite.log", []).start()
    try:

        def delivered() -> list[bytes]:
            rows = read_queue(broker.endpoint, "DelayedByApache", 0, "broker-a")
            later = sorted(r["body"] for r in rows if r["body"].startswith(b"later-"))
            assert len(later) >= 20, f"{len(later)} of 20 delivered"
            return later

        later = eventually(delivered, what="the delayed messages", timeout=60, interval=0.5)
    finally:
        broker.stop()
    assert later == sorted(f"later-{i}".encode() for i in range(20))
