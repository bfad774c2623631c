"""Managing users and grants with the ``rocketlite user`` / ``rocketlite acl`` commands
against a broker process started with ``--acl FILE`` (and one without)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from rmq_spark.client import Admin, ClientConfig, Producer, PullConsumer
from rmq_spark.client.consumer import ConsumerConfig
from rmq_spark.client.producer import ProducerConfig
from rmq_spark.errors import PermissionDeniedError
from rmq_spark.structs import MessageQueue
from tests.support.broker_harness import TEST_STORE_FLAGS, BrokerProcess
from tests.support.eventually import eventually

TOPIC = "acl-admin-t"
SECRETS = {"root": "root-secret-1", "plain": "plain-secret-1"}


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    root = tmp_path_factory.mktemp("acl-admin")
    acl = root / "acl.json"
    acl.write_text(
        json.dumps(
            {
                "users": [
                    {"username": "root", "password": SECRETS["root"], "userType": "Super"},
                    {"username": "plain", "password": SECRETS["plain"]},
                ]
            }
        )
    )
    process = BrokerProcess(
        "broker-acl-admin",
        root / "store",
        root / "broker.log",
        [*TEST_STORE_FLAGS, "--acl", str(acl)],
    )
    process.start()
    process.acl_path = acl
    with Admin(process.endpoint, ClientConfig(access_key="root", secret_key=SECRETS["root"])) as a:
        a.create_topic(TOPIC, queues=1)
    yield process
    process.clean_up()


def cli(endpoint: str, *args: str, user: str | None = "root", stdin: str = ""):
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROCKETLITE_")}
    if user is not None:
        env["ROCKETLITE_ACCESS_KEY"] = user
        env["ROCKETLITE_SECRET_KEY"] = SECRETS[user]
    return subprocess.run(
        [sys.executable, "-m", "rmq_spark.cli", *args, "--endpoints", endpoint],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def ok(result) -> str:
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_create_grant_revoke_list(broker, tmp_path):
    ep = broker.endpoint
    out = ok(cli(ep, "user", "create", "alice", stdin="alice-secret-1\n"))
    assert "created user alice" in out and "alice-secret-1" not in out
    ok(cli(ep, "acl", "grant", "alice", f"Topic:{TOPIC}", "--actions", "Pub"))
    alice = {"access_key": "alice", "secret_key": "alice-secret-1"}

    with Producer(ep, config=ProducerConfig(**alice)) as producer:
        sent = producer.send(TOPIC, b"from alice")
        with PullConsumer(ep, group="alice-g", config=ConsumerConfig(**alice)) as consumer:
            mq = MessageQueue(TOPIC, sent.message_queue.broker_name, sent.message_queue.queue_id)
            consumer.assign([mq])
            consumer.seek(mq, 0)
            with pytest.raises(PermissionDeniedError, match="access control"):
                consumer.pull(mq, max_messages=8)

        users = [json.loads(line) for line in ok(cli(ep, "user", "list", "--json")).splitlines()]
        assert {(u["user"], u["type"], u["status"]) for u in users} == {
            ("root", "Super", "enabled"),
            ("plain", "Normal", "enabled"),
            ("alice", "Normal", "enabled"),
        }
        table = ok(cli(ep, "user", "list"))
        for text in (json.dumps(users), table):
            assert not any(s in text for s in ("alice-secret-1", *SECRETS.values()))
        acls = [
            json.loads(line) for line in ok(cli(ep, "acl", "list", "alice", "--json")).splitlines()
        ]
        assert [(a["user"], a["resource"], a["actions"], a["decision"]) for a in acls] == [
            ("alice", f"Topic:{TOPIC}", ["Pub"], "Allow")
        ]

        ok(cli(ep, "acl", "revoke", "alice", f"Topic:{TOPIC}"))

        def refused() -> bool:
            try:
                producer.send(TOPIC, b"after revoke")
            except PermissionDeniedError:
                return True
            return False

        eventually(refused, what="the revoke to take effect", timeout=1.0)

    # a denied entry with a source network, then a super user from a secret file
    ok(cli(ep, "acl", "grant", "alice", "Topic:*", "--actions", "Sub,List", "--deny",
           "--source-ip", "10.0.0.0/8"))  # fmt: skip
    table = ok(cli(ep, "acl", "list"))
    assert "Topic:*" in table and "Deny" in table and "10.0.0.0/8" in table
    secret_file = tmp_path / "bob.secret"
    secret_file.write_text("bob-secret-1\n")
    ok(cli(ep, "user", "create", "bob", "--super", "--secret-file", str(secret_file)))
    with Admin(ep, ClientConfig(access_key="bob", secret_key="bob-secret-1")) as admin:
        assert "bob" in {u.username for u in admin.list_users() if u.user_type == "Super"}
    ok(cli(ep, "user", "delete", "bob"))
    ok(cli(ep, "user", "delete", "alice"))
    stored = json.loads(broker.acl_path.read_text())
    assert [u["username"] for u in stored["users"]] == ["root", "plain"]
    assert stored["acls"] == []

    result = cli(ep, "user", "create", "root", stdin="x\n")
    assert result.returncode == 1 and "already exists" in result.stderr


def test_a_normal_user_cannot_manage_users(broker):
    result = cli(broker.endpoint, "user", "create", "mallory", user="plain", stdin="m-secret\n")
    assert result.returncode == 1
    assert "access control" in result.stderr and "super" in result.stderr
    assert "mallory" not in broker.acl_path.read_text()
    result = cli(broker.endpoint, "acl", "list", user="plain")
    assert result.returncode == 1 and "access control" in result.stderr


def test_without_acl_the_calls_say_so(tmp_path):
    process = BrokerProcess(
        "broker-no-acl", tmp_path / "store", tmp_path / "b.log", TEST_STORE_FLAGS
    )
    process.start()
    try:
        for args in (("user", "list"), ("acl", "grant", "a", "Topic:x", "--actions", "Pub")):
            result = cli(process.endpoint, *args, user=None)
            assert result.returncode == 1
            assert "without access control (no --acl FILE)" in result.stderr, result.stderr
    finally:
        process.clean_up()
