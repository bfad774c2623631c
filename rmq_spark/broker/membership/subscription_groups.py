"""Consumer groups' settings in ``config/subscriptionGroup.json``, RocketMQ's file.

Apache RocketMQ keeps one entry per consumer group (retry queues, the most retries before
the dead-letter queue, whether the group may consume, ...) and creates an entry when it
first sees a group. rocketlite keeps the same file so a store moves both ways:

- read: an entry's ``retryMaxTimes`` is the group's limit for send-backs that do not carry
  one; every field is kept as found and written back, including ones rocketlite does not use.
- written: every group the broker has seen (committed offsets, registered consumers) gets an
  entry with RocketMQ's fields; a new group's ``retryMaxTimes`` is the broker's
  ``--max-reconsume-times``. The file is written when a group appears (checked every 5 s
  and at close), with a ``.bak`` of the previous version, in RocketMQ's shape:
  ``{"subscriptionGroupTable": {group: {...}}, "dataVersion": {...}}``.

The file's codec is the store's (:mod:`rmq_spark.store.config_files`): its offline
readers read it too.

>>> entry = new_group_entry("orders-app", retry_max_times=16)
>>> (entry["groupName"], entry["retryMaxTimes"], entry["consumeEnable"])
('orders-app', 16, True)
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from rmq_spark.durable_json import read_json_with_backup, write_json_atomic
from rmq_spark.errors import InvalidArgumentError, shown
from rmq_spark.names import validate_group
from rmq_spark.store.config_files import (
    SUBSCRIPTION_GROUPS_FILE,
    groups_from_json,
    groups_to_json,
    new_group_entry,
)

log = logging.getLogger("rmq_spark.broker")

FILE_NAME = SUBSCRIPTION_GROUPS_FILE
PERSIST_INTERVAL_S = 5.0


class SubscriptionGroups:
    """The broker's group table; ``seen()`` lists the groups the broker knows of now."""

    def __init__(
        self, config_dir: Path, *, retry_max_times: int, seen: Callable[[], Iterable[str]]
    ) -> None:
        self._path = Path(config_dir) / FILE_NAME
        self._retry_max_times = retry_max_times
        self._seen = seen
        document, _ = read_json_with_backup(self._path, validate=groups_from_json)
        self._groups = groups_from_json(document) if document is not None else {}
        self._written = document is not None
        #: an entry was created, replaced or deleted since the last write
        self._changed = False
        #: groups deleted while the broker runs: not given a new entry when seen
        self._deleted: set[str] = set()
        self._version = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rmq-sub-groups", daemon=True)

    def start(self) -> None:
        self.persist()  # a new store gets the file at once, as RocketMQ's does
        self._thread.start()

    def retry_max_times(self, group: str) -> int:
        """The most reconsumes before the dead-letter queue for ``group``."""
        with self._lock:
            entry = self._groups.get(group)
        limit = entry.get("retryMaxTimes") if entry is not None else None
        return limit if isinstance(limit, int) and limit >= 1 else self._retry_max_times

    def table(self) -> dict[str, dict[str, Any]]:
        """Every group's entry (those seen since the last write included)."""
        self._note(self._seen())
        with self._lock:
            return {group: dict(entry) for group, entry in self._groups.items()}

    def update(self, entry: dict[str, Any]) -> dict[str, Any]:
        """Create or replace the entry of ``entry["groupName"]`` (RocketMQ's
        UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: the whole entry, checked by
        :func:`check_group_entry`), and write the file before answering; returns the
        entry stored."""
        checked = check_group_entry(entry)
        group = checked["groupName"]
        with self._lock:
            self._groups[group] = checked
            self._deleted.discard(group)
            self._changed = True
        self.persist()
        return dict(checked)

    def delete(self, group: str) -> bool:
        """Forget ``group``'s entry and write the file; False when it had none. The broker
        does not give it a new entry for the offsets or members it sees of it until it is
        created again (:meth:`update`) or the broker restarts."""
        with self._lock:
            had = self._groups.pop(group, None) is not None
            self._deleted.add(group)
            self._changed = True
        self.persist()
        return had

    def persist(self) -> bool:
        """Write the file if a group appeared or changed since the last write; True when
        written."""
        added = self._note(self._seen())
        with self._lock:
            changed, self._changed = self._changed, False
        if not added and not changed and self._written:
            return False
        with self._lock:
            self._version += 1
            document = groups_to_json(self._groups, self._version)
        write_json_atomic(self._path, document, validate=groups_from_json)
        self._written = True
        return True

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        try:
            self.persist()
        except OSError:
            log.exception("could not write %s at close", self._path)

    def _note(self, groups: Iterable[str]) -> bool:
        with self._lock:
            new = [g for g in groups if g not in self._groups and g not in self._deleted]
            for group in new:
                self._groups[group] = new_group_entry(group, retry_max_times=self._retry_max_times)
        return bool(new)

    def _run(self) -> None:
        while not self._stop.wait(PERSIST_INTERVAL_S):
            try:
                self.persist()
            except Exception:
                log.exception(
                    "could not write %s; retrying in %.0f s", self._path, PERSIST_INTERVAL_S
                )


#: the fields of RocketMQ's SubscriptionGroupConfig, by kind
_FLAGS = (
    "consumeEnable",
    "consumeFromMinEnable",
    "consumeBroadcastEnable",
    "notifyConsumerIdsChangedEnable",
)
_COUNTS = ("retryQueueNums", "retryMaxTimes", "brokerId", "whichBrokerWhenConsumeSlowly")


def check_group_entry(entry: object) -> dict[str, Any]:
    """A subscription group's entry as a tool sends it, checked: a valid ``groupName``,
    booleans and whole numbers where RocketMQ has them (``retryMaxTimes`` >= 1,
    ``retryQueueNums``, ``brokerId`` and ``whichBrokerWhenConsumeSlowly`` >= 0), RocketMQ's
    defaults for the fields left out; fields of newer RocketMQ versions are kept as sent.

    >>> check_group_entry({"groupName": "g", "retryMaxTimes": 3})["retryMaxTimes"]
    3
    """
    if not isinstance(entry, dict):
        raise InvalidArgumentError(
            f"a subscription group must be a JSON object, not {shown(entry)}"
        )
    group = validate_group(entry.get("groupName"))
    checked = {**new_group_entry(group, retry_max_times=16), **entry}
    for name in _FLAGS:
        if not isinstance(checked[name], bool):
            raise InvalidArgumentError(
                f"the subscription group {group} has {name} {shown(checked[name])}; it must "
                "be true or false"
            )
    for name in _COUNTS:
        value = checked[name]
        low = 1 if name == "retryMaxTimes" else 0
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value < 1 << 31:
            raise InvalidArgumentError(
                f"the subscription group {group} has {name} {shown(value)}; it must be a "
                f"whole number >= {low}"
            )
    return checked
