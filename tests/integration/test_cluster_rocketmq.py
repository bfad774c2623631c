"""rocketlite brokers and an Apache RocketMQ 4.9 broker in one cluster, both ways round:
Apache RocketMQ's name server and broker-a, and rocketlite's broker-r (whose remoting port is
the second name server) and broker-b. Every broker registers with both name servers
(broker-a through ``namesrvAddr`` in its broker.conf, the rocketlite ones with
``--namesrv-addr``). Through either name server, ``mqadmin clusterList`` lists all three,
``mqadmin updateTopic -c`` creates a topic on all three, and Apache RocketMQ's Java producer
and push consumer send and receive across them.

Needs ``ROCKETMQ_HOME`` (a RocketMQ 4.9 build) and a JDK; skipped with the reason otherwise.
"""

from __future__ import annotations

import uuid

import pytest

from rmq_spark.client.remoting import RemotingClient
from rmq_spark.errors import NotFoundError
from tests.support import java_probe
from tests.support.broker_harness import free_port, start_broker
from tests.support.eventually import eventually
from tests.support.rocketmq_harness import RocketMQCluster, needs_rocketmq

pytestmark = [needs_rocketmq, java_probe.NEEDS_JAVA, pytest.mark.xdist_group("rocketmq")]

BROKERS = {"broker-a", "broker-b", "broker-r"}


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    root = tmp_path_factory.mktemp("mixed-cluster")
    rocketlite_ns = f"127.0.0.1:{free_port()}"
    apache = RocketMQCluster(root / "apache")
    # the Apache broker registers with both name servers (a later line of broker.conf wins)
    apache.settings = (f"namesrvAddr={apache.name_server};{rocketlite_ns}",)
    both = f"{apache.name_server};{rocketlite_ns}"
    started = []
    try:
        # broker-r retries Apache's name server until it is up
        port = rocketlite_ns.rsplit(":", 1)[1]
        started.append(
            start_broker(root, "broker-r", "--remoting-port", port, "--namesrv-addr", both)
        )
        apache.start()
        started.append(
            start_broker(root, "broker-b", "--remoting-port", "0", "--namesrv-addr", both)
        )
        yield {
            "apache": apache,
            "name_servers": {"apache": apache.name_server, "rocketlite": rocketlite_ns},
            "rocketlite": {b.name: b for b in started},
        }
    finally:
        for broker in started:
            broker.clean_up()
        apache.stop()


def brokers_routed(name_server: str, topic: str) -> set[str]:
    with RemotingClient(name_server) as client:
        try:
            return {mq.broker_name for mq in client.route(topic).writable}
        except NotFoundError:
            return set()


def store_hosts(mixed) -> dict[str, str]:
    """Store address (as an offset message id holds it) -> broker name."""
    hosts = {b.remoting_address: name for name, b in mixed["rocketlite"].items()}
    hosts[mixed["apache"].broker_address] = "broker-a"
    return hosts


def host_of(offset_msg_id: str) -> str:
    ip = ".".join(str(int(offset_msg_id[i : i + 2], 16)) for i in range(0, 8, 2))
    return f"{ip}:{int(offset_msg_id[8:16], 16)}"


@pytest.mark.parametrize("which", ["apache", "rocketlite"])
def test_cluster_list_names_every_broker(mixed, java, which):
    ns = mixed["name_servers"][which]
    addresses = {
        "broker-a": mixed["apache"].broker_address,
        **{n: b.remoting_address for n, b in mixed["rocketlite"].items()},
    }

    def listed() -> str:
        out = java.mqadmin("clusterList", "-n", ns)
        assert all(name in out and addresses[name] in out for name in BROKERS), out
        return out

    out = eventually(listed, what=f"clusterList through the {which} name server", timeout=20)
    assert "Exception" not in out and "DefaultCluster" in out


@pytest.mark.parametrize("which", ["apache", "rocketlite"])
def test_update_topic_on_the_cluster_and_java_across_all_brokers(mixed, java, which):
    ns = mixed["name_servers"][which]
    topic = f"Mixed{which}{uuid.uuid4().hex[:6]}"
    out = java.mqadmin(
        "updateTopic", "-n", ns, "-c", "DefaultCluster", "-t", topic, "-r", "2", "-w", "2"
    )
    assert out.count("create topic to") == 3 and "success" in out, out
    for name_server in mixed["name_servers"].values():  # both name servers learn it
        eventually(
            lambda ns=name_server: brokers_routed(ns, topic) == BROKERS,
            what=f"{topic}'s route on {name_server} to name every broker",
            timeout=10,
        )
    sent = [
        line.split()
        for line in java("produce", ns, topic, "30", "sync")
        if line.startswith("SENT ")
    ]
    assert len(sent) == 30 and {s[5] for s in sent} == {"SEND_OK"}
    hosts = store_hosts(mixed)
    assert {hosts[host_of(s[4])] for s in sent} == BROKERS  # stored on all three
    lines = java("push", ns, topic, f"g-{topic}", "30", "60", "concurrent")
    got = [line.split(maxsplit=6) for line in lines if line.startswith("GOT ")]
    assert sorted(g[6] for g in got) == sorted(f"body-{i}" for i in range(30))
