"""The ACL file the broker loads (``--acl FILE``), in JSON (YAML too when PyYAML is
importable and the name ends in ``.yaml`` / ``.yml``)::

    {
      "replayWindowSeconds": 900,
      "users": [
        {"username": "admin", "password": "admin-secret", "userType": "Super"},
        {"username": "app", "secretFile": "/run/secrets/app", "userType": "Normal"},
        {"username": "etl", "secretEnv": "ETL_SECRET", "userStatus": "disable"}
      ],
      "acls": [
        {"subject": "User:app", "policies": [{"entries": [
          {"resource": ["Topic:orders", "Group:billing"], "actions": ["Pub", "Sub"],
           "sourceIps": ["10.0.0.0/8"], "decision": "Allow"}
        ]}]}
      ]
    }

Each user gives its secret in exactly one way: ``password`` (or ``secret``) inline,
``secretFile`` (a file holding it; surrounding whitespace is dropped; relative to the ACL
file) or ``secretEnv`` (an environment variable of the broker). Secrets are kept in the
clear: HMAC verification needs the plain secret, so no hash can be stored; protect the
file (and the secret files) like a key.

:class:`AclFile` keeps the current :class:`AccessControl` and reloads it when the file (or
a secret file it names) changes: a new version that fails validation is refused with one
error in the log, and the previous one stays in force.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from rmq_spark.auth.acl import (
    AccessControl,
    Action,
    Decision,
    Entry,
    Pattern,
    User,
    UserType,
    parse_networks,
)
from rmq_spark.errors import InvalidArgumentError, StoreError

T = TypeVar("T")

log = logging.getLogger("rmq_spark.auth")

#: how often the reload thread looks at the file
POLL_INTERVAL_S = 1.0

_USER_KEYS = {
    "username",
    "password",
    "secret",
    "secretFile",
    "secretEnv",
    "userType",
    "userStatus",
}
_ACL_KEYS = {"subject", "policies"}
_POLICY_KEYS = {"policyType", "entries"}
_ENTRY_KEYS = {"resource", "actions", "sourceIps", "decision"}
_TOP_KEYS = {"users", "acls", "replayWindowSeconds"}


class AclFileError(InvalidArgumentError):
    """The ACL file is unreadable or invalid; the message names the file and the entry."""


class AclFileBrokenError(StoreError):
    """The ACL file on disk is invalid now, so it cannot be edited (FAILED_PRECONDITION)."""


def _is_yaml(path: Path) -> bool:
    return path.suffix.lower() in (".yaml", ".yml")


def _read(path: Path) -> Any:
    text = path.read_text(encoding="utf-8")
    if _is_yaml(path):
        try:
            import yaml  # type: ignore[import-untyped]
        except ImportError:
            raise AclFileError(
                f"{path}: YAML ACL files need PyYAML, which is not installed; use JSON"
            ) from None
        return yaml.safe_load(text)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise AclFileError(f"{path}: not valid JSON: {exc}") from None


def _unknown(where: str, item: dict, allowed: set[str]) -> None:
    extra = sorted(set(item) - allowed)
    if extra:
        raise ValueError(f"{where}: unknown field(s) {', '.join(extra)}")


def _list(value: Any, where: str) -> list:
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list):
        raise ValueError(f"{where} must be a list")
    return value


def _secret(user: dict, where: str, base: Path, secret_files: list[Path]) -> str:
    given = [k for k in ("password", "secret", "secretFile", "secretEnv") if k in user]
    if len(given) != 1:
        raise ValueError(f"{where}: give exactly one of password, secretFile, secretEnv")
    key = given[0]
    value = user[key]
    if not isinstance(value, str) or not value:
        raise ValueError(f"{where}: {key} must be a non-empty string")
    if key == "secretFile":
        path = Path(value) if Path(value).is_absolute() else base / value
        secret_files.append(path)
        try:
            secret = path.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ValueError(f"{where}: cannot read secretFile {path}: {exc.strerror}") from None
        if not secret:
            raise ValueError(f"{where}: secretFile {path} is empty")
        return secret
    if key == "secretEnv":
        secret = os.environ.get(value, "")
        if not secret:
            raise ValueError(f"{where}: environment variable {value} is not set or empty")
        return secret
    return value


def parse(
    data: Any, base: Path = Path("."), secret_files: list[Path] | None = None
) -> AccessControl:
    """An :class:`AccessControl` from the file's parsed content; ValueError naming the bad
    entry otherwise. ``secret_files`` collects the secret files read."""
    secret_files = [] if secret_files is None else secret_files
    if not isinstance(data, dict):
        raise ValueError("the file must hold an object with users and acls")
    _unknown("top level", data, _TOP_KEYS)
    window = data.get("replayWindowSeconds", 15 * 60)
    if window is not None and (
        isinstance(window, bool) or not isinstance(window, int | float) or window < 0
    ):
        raise ValueError("replayWindowSeconds must be a number >= 0, or null to skip the check")
    users: dict[str, User] = {}
    for i, item in enumerate(_list(data.get("users", []), "users")):
        where = f"users[{i}]"
        if not isinstance(item, dict):
            raise ValueError(f"{where} must be an object")
        name = item.get("username")
        if not isinstance(name, str) or not name.strip() or "," in name or " " in name:
            raise ValueError(f"{where}: username must be a non-empty name without spaces/commas")
        where = f"users[{i}] ({name})"
        _unknown(where, item, _USER_KEYS)
        if name in users:
            raise ValueError(f"{where}: user {name} is listed twice")
        kind = str(item.get("userType", "Normal")).capitalize()
        if kind not in ("Super", "Normal"):
            raise ValueError(f"{where}: userType {item.get('userType')!r} must be Super or Normal")
        status = str(item.get("userStatus", "enable")).lower()
        if status not in ("enable", "disable"):
            raise ValueError(
                f"{where}: userStatus {item.get('userStatus')!r} must be enable or disable"
            )
        users[name] = User(
            name, _secret(item, where, base, secret_files), UserType(kind), status == "enable"
        )
    entries: dict[str, tuple[Entry, ...]] = {}
    for i, acl in enumerate(_list(data.get("acls", []), "acls")):
        where = f"acls[{i}]"
        if not isinstance(acl, dict):
            raise ValueError(f"{where} must be an object")
        _unknown(where, acl, _ACL_KEYS)
        subject = acl.get("subject")
        if not isinstance(subject, str) or not subject.startswith("User:"):
            raise ValueError(f"{where}: subject {subject!r} must be User:NAME")
        name = subject[len("User:") :]
        where = f"acls[{i}] ({subject})"
        if name not in users:
            raise ValueError(f"{where}: no user {name} in users")
        found: list[Entry] = list(entries.get(name, ()))
        for j, policy in enumerate(_list(acl.get("policies", []), f"{where}.policies")):
            pwhere = f"{where}.policies[{j}]"
            if not isinstance(policy, dict):
                raise ValueError(f"{pwhere} must be an object")
            _unknown(pwhere, policy, _POLICY_KEYS)
            if str(policy.get("policyType", "Custom")).lower() != "custom":
                raise ValueError(f"{pwhere}: policyType must be Custom (the default)")
            for k, entry in enumerate(_list(policy.get("entries", []), f"{pwhere}.entries")):
                found += _entries(entry, f"{pwhere}.entries[{k}]")
        entries[name] = tuple(found)
    return AccessControl(users, entries, None if window is None else float(window))


def _entries(entry: Any, where: str) -> list[Entry]:
    if not isinstance(entry, dict):
        raise ValueError(f"{where} must be an object")
    _unknown(where, entry, _ENTRY_KEYS)
    try:
        resources = [Pattern.parse(r) for r in _list(entry.get("resource"), "resource")]
        actions = frozenset(Action.parse(a) for a in _list(entry.get("actions"), "actions"))
        networks = parse_networks(_list(entry.get("sourceIps", []), "sourceIps"))
        decision = Decision.parse(entry.get("decision", "Allow"))
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None
    if not resources:
        raise ValueError(f"{where}: resource is empty")
    if not actions:
        raise ValueError(f"{where}: actions is empty")
    return [Entry(p, actions, decision, networks, where) for p in resources]


def load(path: str | Path) -> tuple[AccessControl, list[Path]]:
    """Read and validate ``path``; the ACL and the secret files it named. AclFileError."""
    path = Path(path)
    try:
        data = _read(path)
    except OSError as exc:
        raise AclFileError(f"cannot read ACL file {path}: {exc.strerror}") from None
    secret_files: list[Path] = []
    try:
        return parse(data, path.parent, secret_files), secret_files
    except ValueError as exc:
        raise AclFileError(f"ACL file {path}: {exc}") from None


def write_atomically(path: Path, data: Any) -> None:
    """Replace ``path`` with ``data`` in its format (JSON, or YAML for .yaml/.yml): a temp
    file in the same directory, with the old file's mode, fsynced, renamed over it, then
    the directory fsynced. A crash leaves either the old file or the new one."""
    if _is_yaml(path):
        import yaml  # type: ignore[import-untyped]

        text = yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
    else:
        text = json.dumps(data, indent=2, ensure_ascii=False) + "\n"
    try:
        mode = path.stat().st_mode & 0o7777
    except OSError:
        mode = 0o600
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            os.fchmod(f.fileno(), mode)
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _stamp(paths: list[Path]) -> tuple:
    out: list[tuple] = []
    for p in paths:
        try:
            st = p.stat()
            out.append((str(p), st.st_mtime_ns, st.st_size, st.st_ino))
        except OSError:
            out.append((str(p), None))
    return tuple(out)


class AclFile:
    """The current ACL of a file, reloaded when it changes (``check()``, or every
    ``interval_s`` on a thread after ``start()``)."""

    def __init__(self, path: str | Path, interval_s: float = POLL_INTERVAL_S) -> None:
        self.path = Path(path)
        self.interval_s = interval_s
        self.current, secret_files = load(self.path)  # a bad first file is fatal
        self._watched = [self.path, *secret_files]
        self._stamp = _stamp(self._watched)
        self._failed_stamp: tuple | None = None
        self._lock = threading.Lock()
        self._edit_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def check(self) -> bool:
        """Reload if the file changed; True when a new version took effect."""
        with self._lock:
            stamp = _stamp(self._watched)
            if stamp == self._stamp or stamp == self._failed_stamp:
                return False
            try:
                current, secret_files = load(self.path)
            except AclFileError as exc:
                self._failed_stamp = stamp
                log.error("%s; the previous ACL stays in force", exc)
                return False
            self.current = current
            self._watched = [self.path, *secret_files]
            self._stamp = _stamp(self._watched)
            self._failed_stamp = None
        log.info(
            "ACL file %s reloaded: %d users, %d with policies",
            self.path,
            len(current.users),
            len(current.entries),
        )
        return True

    def read(self, look: Callable[[dict], T]) -> T:
        """``look`` at the file's content as it is on disk now (validated)."""
        with self._edit_lock:
            return look(self._valid_data())

    def _valid_data(self) -> dict:
        try:
            data = _read(self.path)
            parse(data, self.path.parent)
        except (OSError, AclFileError, ValueError) as exc:
            raise AclFileBrokenError(
                f"the ACL file {self.path} cannot be used while it is invalid: {exc}; "
                "fix it by hand first"
            ) from None
        return data

    def edit(self, change: Callable[[dict], T]) -> T:
        """Apply ``change`` to the file's content (a dict it edits in place; its result is
        returned), validate the result, write it atomically and reload at once. Edits are
        serialised; the file's own format and every field ``change`` leaves alone (secret
        files, secret environment variables) are kept. AclFileBrokenError when the file on
        disk is invalid now; ``change`` raises to refuse (nothing is written)."""
        with self._edit_lock:
            data = self._valid_data()
            result = change(data)
            try:
                parse(data, self.path.parent)
            except ValueError as exc:  # a bug of ``change``, or a secret file gone meanwhile
                raise AclFileError(f"the change would make the ACL file invalid: {exc}") from None
            write_atomically(self.path, data)
            self.check()
            return result

    def start(self) -> AclFile:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="rmq-acl-reload", daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.check()
            except Exception:  # never let the reload thread die
                log.exception("ACL file %s: reload failed", self.path)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
