"""ACL file: format, validation messages, secret indirection, reload."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

from rmq_spark.auth.acl import Action, Resource
from rmq_spark.auth.acl_file import AclFile, AclFileError, load
from tests.support.eventually import eventually

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "acl.json"


def write(path: Path, data) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data) if not isinstance(data, str) else data)
    os.replace(tmp, path)


def base(**extra):
    data = {
        "users": [
            {"username": "root", "password": "r", "userType": "Super"},
            {"username": "app", "password": "a"},
        ],
        "acls": [
            {
                "subject": "User:app",
                "policies": [
                    {
                        "entries": [
                            {"resource": "Topic:orders", "actions": ["Pub"], "decision": "Allow"}
                        ]
                    }
                ],
            }
        ],
    }
    data.update(extra)
    return data


def test_example_file_loads(monkeypatch):
    monkeypatch.setenv("BILLING_SECRET_KEY", "x")
    access, _ = load(EXAMPLE)
    assert access.users
    for user in access.users.values():
        assert user.secret


def test_load_and_evaluate(tmp_path):
    path = tmp_path / "acl.json"
    write(path, base())
    access, _ = load(path)
    app = access.user("app")
    assert access.authorize(app, Resource.topic("orders"), {Action.PUB}).allowed
    assert not access.authorize(app, Resource.topic("orders"), {Action.SUB}).allowed
    assert access.user("root").is_super
    assert access.replay_window_s == 900


def test_secret_file_and_env(tmp_path, monkeypatch):
    (tmp_path / "app.secret").write_text("from-file\n")
    monkeypatch.setenv("ACL_TEST_SECRET", "from-env")
    data = base()
    data["users"][1] = {"username": "app", "secretFile": "app.secret"}
    data["users"].append({"username": "env", "secretEnv": "ACL_TEST_SECRET"})
    path = tmp_path / "acl.json"
    write(path, data)
    access, files = load(path)
    assert access.secret_of("app") == "from-file"
    assert access.secret_of("env") == "from-env"
    assert files == [tmp_path / "app.secret"]


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d["users"].append({"username": "x"}), r"users\[2\] \(x\): give exactly one"),
        (lambda d: d["users"][1].update(userType="Admin"), r"users\[1\] \(app\): userType"),
        (lambda d: d["users"][1].update(pasword="a"), r"users\[1\] \(app\): unknown field"),
        (lambda d: d["users"].append({"username": "app", "password": "b"}), "listed twice"),
        (lambda d: d["users"][1].update(secretEnv="NOPE_NOT_SET_X"), "exactly one"),
        (
            lambda d: d["acls"][0]["policies"][0]["entries"][0].update(actions=["Publish"]),
            r"acls\[0\] \(User:app\)\.policies\[0\]\.entries\[0\]: action 'Publish'",
        ),
        (
            lambda d: d["acls"][0]["policies"][0]["entries"][0].update(resource="Queue:x"),
            r"entries\[0\]: resource 'Queue:x'",
        ),
        (
            lambda d: d["acls"][0]["policies"][0]["entries"][0].update(sourceIps=["10.0.0.300"]),
            r"entries\[0\]: source IP",
        ),
        (lambda d: d["acls"][0].update(subject="User:ghost"), r"acls\[0\] \(User:ghost\): no user"),
        (lambda d: d.update(replayWindowSeconds=-1), "replayWindowSeconds"),
    ],
)
def test_validation_names_the_entry(tmp_path, mutate, message):
    data = base()
    mutate(data)
    path = tmp_path / "acl.json"
    write(path, data)
    with pytest.raises(AclFileError, match=message):
        load(path)


def test_unset_env_secret(tmp_path):
    data = base()
    data["users"][1] = {"username": "app", "secretEnv": "ACL_TEST_NOT_SET_ANYWHERE"}
    path = tmp_path / "acl.json"
    write(path, data)
    with pytest.raises(AclFileError, match="ACL_TEST_NOT_SET_ANYWHERE is not set"):
        load(path)


def test_not_json(tmp_path):
    path = tmp_path / "acl.json"
    write(path, "{nope")
    with pytest.raises(AclFileError, match="not valid JSON"):
        load(path)


def test_reload_keeps_old_on_error_and_logs_once(tmp_path, caplog):
    path = tmp_path / "acl.json"
    write(path, base())
    acl = AclFile(path)
    first = acl.current
    assert not acl.check()
    write(path, "{broken")
    with caplog.at_level(logging.ERROR, logger="rmq_spark.auth"):
        assert not acl.check()
        assert not acl.check()
    assert acl.current is first
    assert len([r for r in caplog.records if r.levelno == logging.ERROR]) == 1
    data = base()
    data["acls"][0]["policies"][0]["entries"][0]["actions"] = ["Pub", "Sub"]
    write(path, data)
    assert acl.check()
    app = acl.current.user("app")
    assert acl.current.authorize(app, Resource.topic("orders"), {Action.SUB}).allowed


def test_secret_file_change_reloads(tmp_path):
    secret = tmp_path / "app.secret"
    secret.write_text("one")
    data = base()
    data["users"][1] = {"username": "app", "secretFile": str(secret)}
    path = tmp_path / "acl.json"
    write(path, data)
    acl = AclFile(path, interval_s=0.05).start()
    try:
        tmp = tmp_path / "s.tmp"
        tmp.write_text("two")
        os.replace(tmp, secret)
        eventually(lambda: acl.current.secret_of("app") == "two", what="the new secret")
    finally:
        acl.stop()
