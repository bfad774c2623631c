"""Editing the ACL file: users and grants (rmq_spark.auth.acl_admin, AclFile.edit)."""

from __future__ import annotations

import json
import os
import stat

import pytest

from rmq_spark.auth import acl_admin
from rmq_spark.auth.acl import Action, Resource
from rmq_spark.auth.acl_file import AclFile, AclFileBrokenError
from rmq_spark.errors import AlreadyExistsError, InvalidArgumentError, NotFoundError, StoreError


def base() -> dict:
    return {
        "replayWindowSeconds": 60,
        "users": [
            {"username": "root", "password": "root-s", "userType": "Super"},
            {"username": "app", "secretFile": "app.secret"},
            {"username": "etl", "secretEnv": "ETL_TEST_SECRET", "userStatus": "disable"},
        ],
        "acls": [
            {
                "subject": "User:app",
                "policies": [
                    {
                        "entries": [
                            {"resource": ["Topic:a", "Group:g"], "actions": ["Sub"]},
                            {"resource": "Topic:b", "actions": ["Pub"], "decision": "Deny"},
                        ]
                    }
                ],
            }
        ],
    }


@pytest.fixture
def acl_path(tmp_path, monkeypatch):
    monkeypatch.setenv("ETL_TEST_SECRET", "etl-s")
    (tmp_path / "app.secret").write_text("app-s\n")
    path = tmp_path / "acl.json"
    path.write_text(json.dumps(base()))
    path.chmod(0o640)
    return path


def test_create_list_delete_user(acl_path):
    acl = AclFile(acl_path)
    row = acl.edit(lambda d: acl_admin.create_user(d, "new", "new-s"))
    assert row == acl_admin.UserRow("new", "Normal", True, "password")
    assert acl.current.user("new").secret == "new-s"  # reloaded at once
    users = acl.read(acl_admin.list_users)
    assert [(u.username, u.user_type, u.enabled, u.secret_source) for u in users] == [
        ("app", "Normal", True, "secretFile"),
        ("etl", "Normal", False, "secretEnv"),
        ("new", "Normal", True, "password"),
        ("root", "Super", True, "password"),
    ]
    assert not any(s in repr(users) for s in ("root-s", "app-s", "etl-s", "new-s"))
    with pytest.raises(AlreadyExistsError):
        acl.edit(lambda d: acl_admin.create_user(d, "new", "x"))
    with pytest.raises(InvalidArgumentError):
        acl.edit(lambda d: acl_admin.create_user(d, "a b", "x"))
    acl.edit(lambda d: acl_admin.delete_user(d, "app"))
    assert acl.current.user("app") is None and "app" not in acl.current.entries
    with pytest.raises(NotFoundError):
        acl.edit(lambda d: acl_admin.delete_user(d, "app"))


def test_edits_keep_secret_sources_format_and_mode(acl_path):
    acl = AclFile(acl_path)
    acl.edit(lambda d: acl_admin.create_user(d, "s2", "s2-s", "Super"))
    data = json.loads(acl_path.read_text())
    assert data["replayWindowSeconds"] == 60
    by_name = {u["username"]: u for u in data["users"]}
    assert by_name["app"] == {"username": "app", "secretFile": "app.secret"}
    assert by_name["etl"]["secretEnv"] == "ETL_TEST_SECRET" and "password" not in by_name["etl"]
    assert by_name["s2"] == {"username": "s2", "password": "s2-s", "userType": "Super"}
    assert stat.S_IMODE(acl_path.stat().st_mode) == 0o640
    assert [p.name for p in acl_path.parent.iterdir() if p.name.endswith(".tmp")] == []


def test_grant_replaces_and_revoke_removes(acl_path):
    acl = AclFile(acl_path)
    rows = acl.edit(
        lambda d: acl_admin.grant(d, "app", "topic:a", ["pub"], "Allow", ["10.0.0.0/8"])
    )
    # Topic:a left the two-resource entry, Group:g stayed in it
    assert acl_admin.EntryRow("Group:g", ("Sub",), "Allow") in rows
    assert acl_admin.EntryRow("Topic:a", ("Pub",), "Allow", ("10.0.0.0/8",)) in rows
    assert len([r for r in rows if r.resource == "Topic:a"]) == 1
    user = acl.current.user("app")
    ip = __import__("ipaddress").ip_address("10.1.2.3")
    assert acl.current.authorize(user, Resource.topic("a"), [Action.PUB], ip).allowed
    assert not acl.current.authorize(user, Resource.topic("a"), [Action.SUB], ip).allowed
    acl.edit(lambda d: acl_admin.revoke(d, "app", "Topic:a"))
    assert not acl.current.authorize(user, Resource.topic("a"), [Action.PUB], ip).allowed
    with pytest.raises(NotFoundError):
        acl.edit(lambda d: acl_admin.revoke(d, "app", "Topic:a"))
    with pytest.raises(NotFoundError):
        acl.edit(lambda d: acl_admin.grant(d, "nobody", "Topic:a", ["Pub"]))
    with pytest.raises(InvalidArgumentError, match="action"):
        acl.edit(lambda d: acl_admin.grant(d, "app", "Topic:a", ["Publish"]))
    with pytest.raises(InvalidArgumentError, match="resource"):
        acl.edit(lambda d: acl_admin.grant(d, "app", "Queue:a", ["Pub"]))
    # a user without an acls entry gets one
    acl.edit(lambda d: acl_admin.grant(d, "etl", "Topic:*", ["Sub", "List"], "Deny"))
    found = acl.read(lambda d: acl_admin.list_acls(d, "etl"))
    assert found == {"etl": [acl_admin.EntryRow("Topic:*", ("Sub", "List"), "Deny")]}
    assert set(acl.read(acl_admin.list_acls)) == {"app", "etl"}


def test_the_last_super_user_stays(acl_path):
    acl = AclFile(acl_path)
    with pytest.raises(StoreError, match="last enabled super user"):
        acl.edit(lambda d: acl_admin.delete_user(d, "root"))
    acl.edit(lambda d: acl_admin.create_user(d, "root2", "r2", "Super"))
    acl.edit(lambda d: acl_admin.delete_user(d, "root"))


def test_a_broken_file_is_not_edited(acl_path):
    acl = AclFile(acl_path)
    acl_path.write_text("{broken")
    with pytest.raises(AclFileBrokenError, match="fix it by hand"):
        acl.edit(lambda d: acl_admin.create_user(d, "x", "y"))
    assert acl_path.read_text() == "{broken"
    assert acl.current.user("root") is not None  # the previous ACL stays


def test_a_failed_change_writes_nothing(acl_path):
    acl = AclFile(acl_path)
    before = acl_path.read_bytes()
    inode = os.stat(acl_path).st_ino

    def bad(data):
        data["users"].append({"username": "dup", "password": "1"})
        data["users"].append({"username": "dup", "password": "2"})

    with pytest.raises(InvalidArgumentError, match="invalid"):
        acl.edit(bad)
    assert acl_path.read_bytes() == before and os.stat(acl_path).st_ino == inode
