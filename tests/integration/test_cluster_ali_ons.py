"""``ali-ons`` (the pure-JavaScript RocketMQ client) over a cluster of rocketlite brokers:
broker-a's remoting port is its name server, broker-b and broker-c register with it. Its
producer spreads messages over every broker's queues, and its push consumer receives each
of them once. The JavaScript side and its packages are those of
``test_remoting_ali_ons.py``; without ``node`` and ``npm`` the module is skipped."""

from __future__ import annotations

import shutil
import uuid

import pytest

from rmq_spark.client import Admin
from rmq_spark.client.remoting import RemotingClient
from rmq_spark.errors import NotFoundError
from tests.integration import test_remoting_ali_ons as ali
from tests.support.broker_harness import read_queue, start_broker
from tests.support.eventually import eventually

pytestmark = [
    pytest.mark.skipif(
        shutil.which("node") is None or shutil.which("npm") is None,
        reason="needs Node.js and npm on PATH (ali-ons is a JavaScript client)",
    ),
    pytest.mark.xdist_group("node"),
]

#: npm's packages, installed once (the fixture of the ali-ons module)
node_modules = ali.node_modules
NAMES = ("broker-a", "broker-b", "broker-c")
QUEUES = 2


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    root = tmp_path_factory.mktemp("ali-ons-cluster")
    name_server = start_broker(root, "broker-a", "--remoting-port", "0")
    ns = name_server.remoting_address
    brokers = {"broker-a": name_server}
    for name in NAMES[1:]:
        brokers[name] = start_broker(root, name, "--remoting-port", "0", "--namesrv-addr", ns)
    yield brokers
    for broker in brokers.values():
        broker.clean_up()


def test_ali_ons_sends_to_and_consumes_from_every_broker(cluster, node_modules):
    ns_broker = cluster["broker-a"]
    topic = f"ali-cluster-{uuid.uuid4().hex[:6]}"
    for broker in cluster.values():
        with Admin(broker.endpoint) as admin:
            admin.create_topic(topic, queues=QUEUES)

    def routed() -> bool:
        with RemotingClient(ns_broker.remoting_address) as client:
            try:
                return {mq.broker_name for mq in client.route(topic).writable} == set(NAMES)
            except NotFoundError:
                return False

    eventually(routed, what=f"{topic} routed to every broker", timeout=10)
    sent = ali.produce(ns_broker, topic, 24, "cl")
    assert {s["status"] for s in sent} == {"SEND_OK"}
    stored = {
        name: [
            row["body"].decode()
            for q in range(QUEUES)
            for row in read_queue(broker.endpoint, topic, q, name)
        ]
        for name, broker in cluster.items()
    }
    assert all(stored.values()), {name: len(bodies) for name, bodies in stored.items()}
    assert sorted(b for bodies in stored.values() for b in bodies) == sorted(
        s["body"] for s in sent
    )

    consumer = ali.Consumer(
        ns_broker, topic, "ali-cluster-group", "*", "--instance", "one", "--expect", "24"
    )
    try:
        consumer.wait_for(lambda: len(consumer.of("GOT")) >= 24, 40, "24 messages")
        consumer.finish()
    finally:
        consumer.kill()
    got = sorted(g["body"] for g in consumer.of("GOT"))
    assert got == sorted(s["body"] for s in sent), consumer.report()
    assert ali.unexpected_errors(consumer.events) == [], consumer.report()
