"""The broker's rates over remoting, as ``mqadmin statsAll``, ``brokerStatus`` and the
exporter read them, from a real broker process: VIEW_BROKER_STATS_DATA (315) answers
RocketMQ's BrokerStatsData for what was put into a topic and got by a group, and says an
item it keeps nothing under does not exist; GET_BROKER_RUNTIME_INFO (28) carries the put
and get totals. With ACL, a topic's rates need a right on it and the broker's a super
user.
"""

from __future__ import annotations

import json

import pytest

from rmq_spark.auth.remoting_signature import sign_request
from rmq_spark.client import Admin, ClientConfig
from rmq_spark.client.remoting import RemotingClient
from rmq_spark.structs import MessageQueue
from rmq_spark.wire.remoting.codes import RequestCode, ResponseCode
from tests.support.broker_harness import TEST_STORE_FLAGS, BrokerProcess
from tests.support.remoting_wire import Wire

NAME = "broker-stats"


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    root = tmp_path_factory.mktemp("remoting-stats")
    process = BrokerProcess(
        NAME, root / "store", root / "broker.log", [*TEST_STORE_FLAGS, "--remoting-port", "0"]
    ).start()
    with Admin(process.endpoint) as admin:
        admin.create_topic("Rated", queues=2)
    yield process
    process.clean_up()


def stats(wire: Wire, name: str, key: str):
    return wire.call(RequestCode.VIEW_BROKER_STATS_DATA, {"statsName": name, "statsKey": key})


def test_stats_data_counts_puts_and_gets_over_the_last_minute_hour_and_day(broker):
    with RemotingClient(broker.remoting_address) as client:
        client.route("Rated")
        for queue_id in range(2):
            mq = MessageQueue("Rated", NAME, queue_id)
            client.send(mq, [b"x" * 100] * 5, [{}] * 5)
        got = client.pull(MessageQueue("Rated", NAME, 0), 0, max_messages=3, group="Readers")
        assert len(got.records()) == 3
    with Wire(broker.remoting_address) as wire:
        answer = stats(wire, "TOPIC_PUT_NUMS", "Rated")
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        data = json.loads(bytes(answer.body))
        assert set(data) == {"statsMinute", "statsHour", "statsDay"}
        assert [data[w]["sum"] for w in ("statsMinute", "statsHour", "statsDay")] == [10] * 3
        assert data["statsMinute"]["tps"] > 0
        size = json.loads(bytes(stats(wire, "TOPIC_PUT_SIZE", "Rated").body))
        assert size["statsDay"]["sum"] > 10 * 100  # whole records: headers and bodies
        gets = json.loads(bytes(stats(wire, "GROUP_GET_NUMS", "Rated@Readers").body))
        assert gets["statsDay"]["sum"] == 3
        whole = json.loads(bytes(stats(wire, "BROKER_PUT_NUMS", "DefaultCluster").body))
        assert whole["statsDay"]["sum"] >= 10
        for name, key in (
            ("TOPIC_PUT_NUMS", "Nowhere"),
            ("GROUP_GET_NUMS", "Rated@Nobody"),
            ("GROUP_GET_NUMS", "no-at-sign"),
            ("NO_SUCH_STATS", "Rated"),
        ):
            missing = stats(wire, name, key)
            assert missing.code == ResponseCode.SYSTEM_ERROR
            assert missing.remark == f"The stats <{name}> <{key}> not exist"
        lacking = wire.call(RequestCode.VIEW_BROKER_STATS_DATA, {"statsName": "TOPIC_PUT_NUMS"})
        assert lacking.code != ResponseCode.SUCCESS and "statsKey" in lacking.remark
        runtime = wire.call(RequestCode.GET_BROKER_RUNTIME_INFO)
        table = json.loads(bytes(runtime.body))["table"]
        assert int(table["msgPutTotalTodayNow"]) >= 10
        assert int(table["msgGetTotalTodayNow"]) >= 3
        assert len(table["putTps"].split()) == 3


SECRETS = {"root": "root-secret-1", "alice": "alice-secret-1"}
ACL = {
    "users": [
        {"username": "root", "password": SECRETS["root"], "userType": "Super"},
        {"username": "alice", "password": SECRETS["alice"]},
    ],
    "acls": [
        {
            "subject": "User:alice",
            "policies": [{"entries": [{"resource": ["Topic:Rated"], "actions": ["Sub"]}]}],
        }
    ],
}


def signed_stats(wire: Wire, user: str, name: str, key: str):
    ext = sign_request({"statsName": name, "statsKey": key}, b"", user, SECRETS[user])
    return wire.call(RequestCode.VIEW_BROKER_STATS_DATA, ext)


def test_with_acl_a_topics_rates_need_a_right_on_it_and_the_brokers_a_super_user(
    tmp_path,
):
    acl = tmp_path / "acl.json"
    acl.write_text(json.dumps(ACL))
    process = BrokerProcess(
        NAME,
        tmp_path / "store",
        tmp_path / "broker.log",
        [*TEST_STORE_FLAGS, "--remoting-port", "0", "--acl", str(acl)],
    ).start()
    try:
        root = ClientConfig(access_key="root", secret_key=SECRETS["root"])
        with Admin(process.endpoint, root) as admin:
            admin.create_topic("Rated", queues=1)
            admin.create_topic("Secret", queues=1)
        with RemotingClient(process.remoting_address, root) as client:
            for topic in ("Rated", "Secret"):
                client.route(topic)
                client.send(MessageQueue(topic, NAME, 0), [b"x"], [{}])
        with Wire(process.remoting_address) as wire:
            assert signed_stats(wire, "alice", "TOPIC_PUT_NUMS", "Rated").code == 0
            for name, key in (("TOPIC_PUT_NUMS", "Secret"), ("BROKER_PUT_NUMS", "DefaultCluster")):
                refused = signed_stats(wire, "alice", name, key)
                assert refused.code == ResponseCode.NO_PERMISSION, (name, refused.remark)
            assert signed_stats(wire, "root", "BROKER_PUT_NUMS", "DefaultCluster").code == 0
            unsigned = stats(wire, "TOPIC_PUT_NUMS", "Rated")
            assert unsigned.code == ResponseCode.NO_PERMISSION
    finally:
        process.clean_up()
