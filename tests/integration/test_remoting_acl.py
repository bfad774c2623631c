"""Access control on the remoting port: the broker's ACL file, RocketMQ's request signature
(its ACL client hook's), the same users and policies as the gRPC port."""

from __future__ import annotations

import json

import pytest

from rmq_spark.auth.remoting_signature import sign_request
from rmq_spark.client import Admin, ClientConfig
from rmq_spark.client.connection import NO_RETRY
from rmq_spark.client.remoting import RemotingClient, RemotingConnection
from rmq_spark.codec.arrow_decode import decode_records
from rmq_spark.errors import PermissionDeniedError
from rmq_spark.structs import MessageQueue
from rmq_spark.wire.remoting.codes import RequestCode, ResponseCode
from rmq_spark.wire.remoting.frame import Command
from tests.support.broker_harness import TEST_STORE_FLAGS, BrokerProcess
from tests.support.eventually import eventually

SECRETS = {
    "root": "root-secret",
    "app": "app-secret",
    "reader": "reader-secret",
    "writer": "writer-secret",
}
ACL = {
    "users": [
        {"username": "root", "password": SECRETS["root"], "userType": "Super"},
        {"username": "app", "password": SECRETS["app"]},
        {"username": "reader", "password": SECRETS["reader"]},
        {"username": "writer", "password": SECRETS["writer"]},
    ],
    "acls": [
        {"subject": "User:app", "policies": [{"entries": [
            {"resource": ["Topic:orders", "Group:billing"], "actions": ["All"]}]}]},
        {"subject": "User:reader", "policies": [{"entries": [
            {"resource": ["Topic:orders", "Group:audit"], "actions": ["Sub"]}]}]},
        {"subject": "User:writer", "policies": [{"entries": [
            {"resource": ["Topic:orders"], "actions": ["Pub"]}]}]},
    ],
}  # fmt: skip
MQ = MessageQueue("orders", "broker-a", 0)


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    root = tmp_path_factory.mktemp("remoting-acl")
    (root / "acl.json").write_text(json.dumps(ACL))
    flags = [*TEST_STORE_FLAGS, "--acl", str(root / "acl.json"), "--remoting-port", "0"]
    process = BrokerProcess("broker-a", root / "store", root / "broker.log", flags).start()
    with Admin(process.endpoint, ClientConfig(access_key="root", secret_key="root-secret")) as a:
        a.create_topic("orders", queues=1)
        a.create_topic("payments", queues=1)
    yield process
    process.clean_up()


def client(broker, user: str | None = None) -> RemotingClient:
    keys = {"access_key": user, "secret_key": SECRETS[user]} if user else {}
    return RemotingClient(broker.remoting_address, ClientConfig(retry=NO_RETRY, **keys))


def test_a_user_with_rights_sends_and_reads(broker):
    with client(broker, "app") as app:
        sent = app.send(MQ, [b"signed"], [{"TAGS": "Paid"}])
        answer = app.pull(MQ, sent.queue_offset, group="billing")
        app.commit_offset("billing", MQ, sent.queue_offset + 1)
        assert app.committed_offset("billing", MQ) == sent.queue_offset + 1
    assert decode_records(answer.data).column("body").to_pylist() == [b"signed"]


@pytest.mark.parametrize("user", [None, "unknown"])
def test_unsigned_or_unknown_callers_are_refused(broker, user):
    config = ClientConfig(retry=NO_RETRY)
    if user == "unknown":
        config = ClientConfig(retry=NO_RETRY, access_key="unknown", secret_key="guess")
    with (
        RemotingClient(broker.remoting_address, config) as anonymous,
        pytest.raises(PermissionDeniedError, match=r"access control: (no credentials|invalid)"),
    ):
        anonymous.route("orders")


def test_rights_are_per_topic_group_and_action(broker):
    with client(broker, "app") as app, pytest.raises(PermissionDeniedError, match="payments"):
        app.send(MessageQueue("payments", "broker-a", 0), [b"not mine"])
    with client(broker, "reader") as reader:
        assert reader.route("orders").readable == [MQ]  # Sub is enough to find it
        with pytest.raises(PermissionDeniedError, match="orders"):
            reader.send(MQ, [b"readers do not write"])
        reader.pull(MQ, 0, group="audit")
        with pytest.raises(PermissionDeniedError, match="billing"):
            reader.pull(MQ, 0, group="billing")  # another group's position


def _admin_request(broker, user: str) -> Command:
    ext = {"topic": "made-by-admin", "readQueueNums": "2", "writeQueueNums": "2", "perm": "6"}
    signed = sign_request(ext, b"", user, SECRETS[user])
    connection = RemotingConnection(broker.remoting_address)
    try:
        return connection.call(Command(RequestCode.UPDATE_AND_CREATE_TOPIC, signed), 5.0)
    finally:
        connection.close()


def test_creating_topics_is_for_super_users(broker):
    refused = _admin_request(broker, "app")
    assert refused.code == ResponseCode.NO_PERMISSION and "super user" in refused.remark
    assert _admin_request(broker, "root").code == ResponseCode.SUCCESS
    with client(broker, "root") as root:
        assert len(root.route("made-by-admin").readable) == 2


def _query(broker, user: str, topic: str) -> Command:
    ext = {
        "topic": topic,
        "key": "acl-key",
        "maxNum": "64",
        "beginTimestamp": "0",
        "endTimestamp": str(2**63 - 1),
        "_UNIQUE_KEY_QUERY": "false",
    }
    signed = sign_request(ext, b"", user, SECRETS[user])
    connection = RemotingConnection(broker.remoting_address)
    try:
        return connection.call(Command(RequestCode.QUERY_MESSAGE, signed), 5.0)
    finally:
        connection.close()


def test_finding_messages_by_key_needs_sub_on_the_topic(broker):
    with client(broker, "app") as app:
        sent = app.send(MQ, [b"keyed"], [{"KEYS": "acl-key"}])
    with client(broker, "reader") as reader:  # Sub on orders
        [(batch, name)] = eventually(
            lambda: reader.query_messages("orders", "acl-key"), what="the key in the index"
        )
    assert (batch.column("body").to_pylist(), name) == ([b"keyed"], "broker-a")
    assert batch.column("msgId").to_pylist() == sent.offset_msg_ids
    assert _query(broker, "app", "orders").code == ResponseCode.SUCCESS  # All includes Sub
    with client(broker, "writer") as writer, pytest.raises(PermissionDeniedError, match="orders"):
        writer.query_messages("orders", "acl-key")  # Pub finds the route, not the messages
    for user in ("writer", "reader"):
        topic = "orders" if user == "writer" else "payments"
        refused = _query(broker, user, topic)
        assert refused.code == ResponseCode.NO_PERMISSION, refused
        assert refused.remark.startswith("access control:") and topic in refused.remark
