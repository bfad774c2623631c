"""Edits of an ACL file's content (the dict :mod:`rmq_spark.auth.acl_file` reads): users
and grants, for the admin RPCs. Pure: each function changes ``data`` in place or reads it,
and raises a RocketliteError naming the problem; :meth:`AclFile.edit` validates, writes and
reloads.

A grant sets a user's entry for one resource pattern: entries for the same pattern
(compared after parsing, so ``topic:a`` is ``Topic:a``) are removed first, from every
policy of the user, including multi-resource entries, which keep their other resources.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rmq_spark.auth.acl import Action, Decision, Pattern, parse_networks
from rmq_spark.errors import (
    AlreadyExistsError,
    InvalidArgumentError,
    NotFoundError,
    StoreError,
)

SECRET_KEYS = ("password", "secret", "secretFile", "secretEnv")


@dataclass(frozen=True)
class UserRow:
    username: str
    user_type: str  # "Super" | "Normal"
    enabled: bool
    secret_source: str  # "password" | "secretFile" | "secretEnv"


@dataclass(frozen=True)
class EntryRow:
    resource: str
    actions: tuple[str, ...]
    decision: str  # "Allow" | "Deny"
    source_ips: tuple[str, ...] = ()


def _users(data: dict) -> list:
    users = data.setdefault("users", [])
    if not isinstance(users, list):
        data["users"] = users = [users]
    return users


def _acls(data: dict) -> list:
    acls = data.setdefault("acls", [])
    if not isinstance(acls, list):
        data["acls"] = acls = [acls]
    return acls


def _as_list(value: object) -> list:
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


def _find_user(data: dict, name: str) -> dict:
    for user in _users(data):
        if isinstance(user, dict) and user.get("username") == name:
            return user
    raise NotFoundError(f"no user {name!r} in the ACL file")


def check_username(name: str) -> str:
    if not name or not name.strip() or name != name.strip() or "," in name or " " in name:
        raise InvalidArgumentError(f"username {name!r} must be non-empty, without spaces or commas")
    return name


def _row(user: dict) -> UserRow:
    source = next((k for k in SECRET_KEYS if k in user), "password")
    return UserRow(
        user["username"],
        str(user.get("userType", "Normal")).capitalize(),
        str(user.get("userStatus", "enable")).lower() == "enable",
        "password" if source == "secret" else source,
    )


def create_user(data: dict, name: str, secret: str, user_type: str = "Normal") -> UserRow:
    check_username(name)
    if not secret:
        raise InvalidArgumentError(f"user {name!r}: the secret is empty")
    if user_type not in ("Super", "Normal"):
        raise InvalidArgumentError(f"user type {user_type!r} must be Super or Normal")
    if any(isinstance(u, dict) and u.get("username") == name for u in _users(data)):
        raise AlreadyExistsError(f"user {name!r} already exists")
    user = {"username": name, "password": secret, "userType": user_type}
    _users(data).append(user)
    return _row(user)


def delete_user(data: dict, name: str) -> None:
    user = _find_user(data, name)
    row = _row(user)
    if row.user_type == "Super" and row.enabled:
        others = [
            r
            for r in list_users(data)
            if r.user_type == "Super" and r.enabled and r.username != name
        ]
        if not others:
            raise StoreError(
                f"user {name!r} is the last enabled super user: deleting it would leave "
                "nobody to manage the broker"
            )
    _users(data).remove(user)
    subject = f"User:{name}"
    data["acls"] = [
        a for a in _acls(data) if not (isinstance(a, dict) and a.get("subject") == subject)
    ]


def list_users(data: dict) -> list[UserRow]:
    rows = [_row(u) for u in _users(data) if isinstance(u, dict) and "username" in u]
    return sorted(rows, key=lambda r: r.username)


def _pattern(resource: str) -> str:
    try:
        return str(Pattern.parse(resource))
    except ValueError as exc:
        raise InvalidArgumentError(str(exc)) from None


def _remove_resource(data: dict, name: str, pattern: str) -> int:
    """Remove ``pattern`` from the user's entries; how many entries named it."""
    removed = 0
    subject = f"User:{name}"
    for acl in _acls(data):
        if not isinstance(acl, dict) or acl.get("subject") != subject:
            continue
        for policy in _as_list(acl.get("policies")):
            if not isinstance(policy, dict):
                continue
            kept = []
            for entry in _as_list(policy.get("entries")):
                resources = _as_list(entry.get("resource")) if isinstance(entry, dict) else []
                others = [r for r in resources if not _same(r, pattern)]
                if len(others) == len(resources):
                    kept.append(entry)
                    continue
                removed += 1
                if others:
                    entry["resource"] = others if len(others) > 1 else others[0]
                    kept.append(entry)
            policy["entries"] = kept
    return removed


def _same(resource: Any, pattern: str) -> bool:
    """Whether a resource of the file (any JSON value) is ``pattern``."""
    try:
        return str(Pattern.parse(resource)) == pattern
    except ValueError:
        return False


def grant(
    data: dict,
    name: str,
    resource: str,
    actions: list[str],
    decision: str = "Allow",
    source_ips: list[str] | tuple[str, ...] = (),
) -> list[EntryRow]:
    _find_user(data, name)
    pattern = _pattern(resource)
    if not actions:
        raise InvalidArgumentError("give at least one action (Pub, Sub, Create, ...)")
    try:
        parsed = [Action.parse(a).value for a in actions]
        verdict = Decision.parse(decision).value
        parse_networks(source_ips)
    except ValueError as exc:
        raise InvalidArgumentError(str(exc)) from None
    _remove_resource(data, name, pattern)
    entry: dict = {"resource": pattern, "actions": list(dict.fromkeys(parsed))}
    if source_ips:
        entry["sourceIps"] = [str(ip).strip() for ip in source_ips]
    entry["decision"] = verdict
    _policy(data, name)["entries"].append(entry)
    return list_acls(data, name)[name]


def _policy(data: dict, name: str) -> dict:
    """The user's first policy (made when missing), its entries a list."""
    subject = f"User:{name}"
    for acl in _acls(data):
        if isinstance(acl, dict) and acl.get("subject") == subject:
            policies = acl.setdefault("policies", [])
            if not isinstance(policies, list):
                acl["policies"] = policies = [policies]
            if not policies:
                policies.append({"entries": []})
            policy = policies[0]
            policy["entries"] = _as_list(policy.get("entries"))
            return policy
    fresh: dict = {"entries": []}
    _acls(data).append({"subject": subject, "policies": [fresh]})
    return fresh


def revoke(data: dict, name: str, resource: str) -> list[EntryRow]:
    _find_user(data, name)
    pattern = _pattern(resource)
    if not _remove_resource(data, name, pattern):
        raise NotFoundError(f"user {name!r} has no entry for {pattern}")
    return list_acls(data, name)[name]


def list_acls(data: dict, name: str | None = None) -> dict[str, list[EntryRow]]:
    """Entries by user (sorted by name; one row per resource pattern). With ``name``, that
    user only (NotFoundError if absent)."""
    if name:
        _find_user(data, name)
    out: dict[str, list[EntryRow]] = {}
    for acl in _acls(data):
        if not isinstance(acl, dict):
            continue
        user = str(acl.get("subject", ""))[len("User:") :]
        if name and user != name:
            continue
        rows = out.setdefault(user, [])
        for policy in _as_list(acl.get("policies")):
            for entry in _as_list(policy.get("entries") if isinstance(policy, dict) else None):
                if not isinstance(entry, dict):
                    continue
                for resource in _as_list(entry.get("resource")):
                    rows.append(
                        EntryRow(
                            str(resource),
                            tuple(str(a) for a in _as_list(entry.get("actions"))),
                            str(entry.get("decision", "Allow")).capitalize(),
                            tuple(str(ip) for ip in _as_list(entry.get("sourceIps"))),
                        )
                    )
    if name:
        out.setdefault(name, [])
    return dict(sorted(out.items()))
