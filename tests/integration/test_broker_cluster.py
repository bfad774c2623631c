"""Several rocketlite brokers behind one name server: broker-a's remoting port plays the
name server, broker-b and broker-c register with it (``--namesrv-addr``). Routes, cluster
info and topic lists name all three; rocketlite's remoting producer and client send and read
across them; a topic created or deleted on one broker shows in the routes at once; a broker
that stops cleanly, or is killed, leaves them. Registrations sent by hand (RocketMQ's JSON
and its compressed form, bad ones too) are answered as Apache RocketMQ's name server
answers them."""

from __future__ import annotations

import json
import uuid

import pytest

from rmq_spark.client import Admin
from rmq_spark.client.remoting import RemotingClient, RemotingProducer
from rmq_spark.errors import NotFoundError
from rmq_spark.wire.remoting import bodies
from tests.support import java_probe
from tests.support.broker_harness import start_broker
from tests.support.eventually import eventually
from tests.support.remoting_wire import Wire

REGISTER, UNREGISTER, ROUTE, CLUSTER_INFO, TOPIC_LIST = 103, 104, 105, 106, 206


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    root = tmp_path_factory.mktemp("cluster")
    name_server = start_broker(root, "broker-a", "--remoting-port", "0")
    ns = name_server.remoting_address
    members = [
        start_broker(root, name, "--remoting-port", "0", "--namesrv-addr", ns)
        for name in ("broker-b", "broker-c")
    ]
    brokers = {b.name: b for b in [name_server, *members]}
    yield brokers
    for broker in brokers.values():
        broker.clean_up()


def cluster_info(ns: str) -> dict:
    with Wire(ns) as wire:
        answer = wire.call(CLUSTER_INFO)
    assert answer.code == 0, answer.remark
    return json.loads(answer.body)


def brokers_in_cluster(ns: str) -> dict[str, str]:
    """broker name -> master address, as ``mqadmin clusterList`` reads them."""
    info = cluster_info(ns)
    return {name: data["brokerAddrs"]["0"] for name, data in info["brokerAddrTable"].items()}


def new_topic(brokers, queues: int = 2) -> str:
    topic = f"Cluster{uuid.uuid4().hex[:8]}"
    for broker in brokers:
        with Admin(broker.endpoint) as admin:
            admin.create_topic(topic, queues=queues)
    return topic


def route_brokers(client: RemotingClient, topic: str) -> set[str]:
    """The brokers the topic's route names (none when the name server knows no route)."""
    try:
        return {mq.broker_name for mq in client.route(topic).readable}
    except NotFoundError:
        return set()


def test_cluster_info_names_every_broker_at_its_remoting_address(cluster):
    ns = cluster["broker-a"].remoting_address
    info = cluster_info(ns)
    assert info["clusterAddrTable"] == {"DefaultCluster": ["broker-a", "broker-b", "broker-c"]}
    assert brokers_in_cluster(ns) == {n: b.remoting_address for n, b in cluster.items()}
    with Wire(ns) as wire:
        system = json.loads(wire.call(304).body)["topicList"]
    assert set(system) == {"DefaultCluster", "broker-a", "broker-b", "broker-c"}


def test_messages_go_to_and_come_back_from_every_broker(cluster):
    ns = cluster["broker-a"].remoting_address
    topic = new_topic(cluster.values(), queues=2)
    with RemotingClient(ns) as client:
        # a new topic on each broker is in the routes a moment after the create returns
        eventually(lambda: route_brokers(client, topic) == set(cluster), what="the routes")
        route = client.route(topic)
        assert route.addresses == {n: b.remoting_address for n, b in cluster.items()}
        assert len(route.writable) == 6
        with RemotingProducer(ns) as producer:
            sent = [producer.send(topic, f"m-{i}".encode()) for i in range(60)]
        assert {r.message_queue.broker_name for r in sent} == set(cluster)
        read = []
        for mq in route.readable:
            answer = client.pull(mq, 0, max_messages=100)
            read += [bytes(b) for b in answer.records().column("body").to_pylist()]
    assert sorted(read) == sorted(f"m-{i}".encode() for i in range(60))
    with Wire(ns) as wire:
        listed = json.loads(wire.call(TOPIC_LIST).body)["topicList"]
        by_cluster = json.loads(wire.call(224, {"cluster": "DefaultCluster"}).body)["topicList"]
    assert topic in listed and topic in by_cluster


def test_a_topic_on_one_broker_routes_there_only_and_leaves_when_deleted(cluster):
    ns = cluster["broker-a"].remoting_address
    topic = new_topic([cluster["broker-b"], cluster["broker-c"]])
    with RemotingClient(ns) as client:
        eventually(lambda: route_brokers(client, topic) == {"broker-b", "broker-c"}, what="route")
        assert route_brokers(client, topic) == {"broker-b", "broker-c"}
        with Admin(cluster["broker-c"].endpoint) as admin:
            admin.delete_topic(topic)
        eventually(
            lambda: route_brokers(client, topic) == {"broker-b"},
            what="the deleted topic to leave broker-c's route",
            timeout=5,
        )


def test_a_stopped_broker_unregisters_and_a_killed_one_leaves_at_once(cluster, tmp_path):
    ns = cluster["broker-a"].remoting_address
    stopped = start_broker(tmp_path, "broker-d", "--remoting-port", "0", "--namesrv-addr", ns)
    killed = start_broker(tmp_path, "broker-e", "--remoting-port", "0", "--namesrv-addr", ns)
    try:
        assert {"broker-d", "broker-e"} <= set(brokers_in_cluster(ns))
        topic = new_topic([stopped, killed, cluster["broker-b"]])
        with RemotingClient(ns) as client:
            want = {"broker-b", "broker-d", "broker-e"}
            eventually(lambda: route_brokers(client, topic) == want, what="the route")
            assert stopped.stop() == 0
            assert "broker-d" not in brokers_in_cluster(ns)  # UNREGISTER before it exited
            assert route_brokers(client, topic) == {"broker-b", "broker-e"}
            killed.kill()
            eventually(
                lambda: "broker-e" not in brokers_in_cluster(ns),
                what="the killed broker to leave the cluster",
                timeout=5,
            )
            assert route_brokers(client, topic) == {"broker-b"}
        assert "unregistered from name server" in stopped.log_text()
    finally:
        stopped.clean_up()
        killed.clean_up()


def test_a_broker_registers_again_with_a_restarted_name_server(tmp_path):
    from tests.support.broker_harness import free_port

    port = free_port()
    name_server = start_broker(tmp_path, "broker-n", "--remoting-port", str(port))
    member = start_broker(
        tmp_path, "broker-m", "--remoting-port", "0", "--namesrv-addr", f"127.0.0.1:{port}"
    )
    try:
        ns = name_server.remoting_address
        assert set(brokers_in_cluster(ns)) == {"broker-n", "broker-m"}
        name_server.restart()
        eventually(
            lambda: "broker-m" in brokers_in_cluster(ns),
            what="broker-m to register with the restarted name server",
            timeout=10,
        )
    finally:
        member.clean_up()
        name_server.clean_up()


def registration(name: str, address: str, **extra: str) -> dict[str, str]:
    return {
        "brokerName": name,
        "brokerAddr": address,
        "clusterName": "OtherCluster",
        "haServerAddr": address,
        "brokerId": "0",
        **extra,
    }


def test_registrations_in_rocketmqs_forms_and_bad_ones(cluster):
    ns = cluster["broker-a"].remoting_address
    topics = (bodies.TopicConfigRow("HandTopic", 3, 2, 6),)
    plain = bodies.register_broker_body(bodies.BrokerTopics(1, 1, topics))
    packed = bodies.compressed_register_broker_body(bodies.BrokerTopics(1, 1, topics))
    with Wire(ns) as java_like, Wire(ns) as compressing:
        crc = str(bodies.body_crc32(plain))
        answer = java_like.call(
            REGISTER, registration("hand-x", "127.0.0.1:1", bodyCrc32=crc), plain, version=401
        )
        assert answer.code == 0, answer.remark
        answer = compressing.call(
            REGISTER, registration("hand-y", "127.0.0.1:2", compressed="true"), packed, version=401
        )
        assert answer.code == 0, answer.remark
        with RemotingClient(ns) as client:
            route = client.route("HandTopic")
        assert route.addresses == {"hand-x": "127.0.0.1:1", "hand-y": "127.0.0.1:2"}
        assert [(mq.broker_name, mq.queue_id) for mq in route.writable] == [
            ("hand-x", 0), ("hand-x", 1), ("hand-y", 0), ("hand-y", 1)
        ]  # fmt: skip
        assert len(route.readable) == 6
        assert cluster_info(ns)["clusterAddrTable"]["OtherCluster"] == ["hand-x", "hand-y"]

        bad_crc = java_like.call(REGISTER, registration("hand-x", "127.0.0.1:1", bodyCrc32="7"))
        assert (bad_crc.code, bad_crc.remark) == (1, "crc32 not match")
        no_id = java_like.call(REGISTER, {"brokerName": "z", "brokerAddr": "h:1"})
        assert no_id.code == 1 and "<clusterName> is null" in no_id.remark
        garbage = java_like.call(REGISTER, registration("hand-z", "h:3"), b"{not json", version=401)
        assert garbage.code != 0 and "not JSON" in garbage.remark
        own_name = java_like.call(REGISTER, registration("broker-a", "127.0.0.1:9"))
        assert own_name.code == 1 and "own broker" in own_name.remark
        # the one registered on this connection unregisters; the other's connection closes
        leaving = {k: v for k, v in registration("hand-x", "127.0.0.1:1").items()}
        del leaving["haServerAddr"]
        assert java_like.call(UNREGISTER, leaving).code == 0
        assert "hand-x" not in brokers_in_cluster(ns)
    eventually(
        lambda: "OtherCluster" not in cluster_info(ns)["clusterAddrTable"],
        what="the hand-registered broker to leave when its connection closed",
        timeout=5,
    )
    with Wire(ns) as wire:
        assert wire.call(ROUTE, {"topic": "HandTopic"}).code == 17
    assert set(brokers_in_cluster(ns)) == set(cluster)


def test_bad_name_server_flags_are_refused_naming_the_value(tmp_path):
    from tests.support.broker_harness import BrokerProcess

    for flags, said in [
        (["--namesrv-addr", "nohost"], "'nohost' is not a name server address"),
        (["--namesrv-addr", "127.0.0.1:1"], "needs the remoting port"),
        (["--cluster", "bad name"], "--cluster 'bad name'"),
        (["--broker-id", "-3"], "--broker-id -3"),
    ]:
        broker = BrokerProcess("broker-x", tmp_path / "s", tmp_path / "x.log", flags)
        process = broker.start_process()
        _, err = process.communicate(timeout=30)
        assert process.returncode == 2, flags
        text = broker.log_text()
        assert said in text and "Traceback" not in text, text
        assert err is None


@java_probe.NEEDS_JAVA
def test_java_and_mqadmin_see_one_cluster_of_rocketlite_brokers(cluster, java):
    ns = cluster["broker-a"].remoting_address
    listed = java.mqadmin("clusterList", "-n", ns)
    assert all(b.remoting_address in listed for b in cluster.values()), listed
    topic = f"JavaCluster{uuid.uuid4().hex[:6]}"
    out = java.mqadmin("updateTopic", "-n", ns, "-c", "DefaultCluster", "-t", topic, "-w", "2")
    assert out.count("create topic to") == 3 and "success" in out, out
    with RemotingClient(ns) as client:
        eventually(lambda: route_brokers(client, topic) == set(cluster), what="the route")
    sent = [x.split() for x in java("produce", ns, topic, "30", "sync") if x.startswith("SENT ")]
    # SENT queueId queueOffset msgId offsetMsgId status: the offset id names the store
    stores = {b.remoting_address: name for name, b in cluster.items()}
    hosts = {
        ".".join(str(int(s[4][i : i + 2], 16)) for i in range(0, 8, 2)) + f":{int(s[4][8:16], 16)}"
        for s in sent
    }
    assert {stores[h] for h in hosts} == set(cluster)
    lines = java("push", ns, topic, f"g-{topic}", "30", "60", "concurrent")
    got = [line.split(maxsplit=6)[6] for line in lines if line.startswith("GOT ")]
    assert sorted(got) == sorted(f"body-{i}" for i in range(30))
