"""Offsets in a local file, for BROADCASTING consumers (RocketMQ's LocalFileOffsetStore).

In broadcasting mode every consumer reads every queue, so each keeps its own progress:
``{directory}/{client_id}/{group}/offsets.json``, with ``directory`` defaulting to
``$ROCKETLITE_OFFSETS_DIR`` or ``~/.rocketlite_offsets``. The file is written atomically with
the previous good version kept as ``offsets.json.bak`` (:mod:`rmq_spark.durable_json`), so a
crash mid-write never loses both. Its shape, nested so no separator can be ambiguous::

    {
      "version": 1,
      "clientId": "10.0.0.7@4242",
      "group": "GroupA",
      "offsetTable": {"TopicA": {"broker-a": {"0": 42, "1": 17}}}
    }

Each number is the *next* offset to consume of ``MessageQueue(topic, broker, queueId)``.

Improvements over RocketMQ, whose loader falls back to the ``.bak`` but silently starts
from nothing when both files are bad: here a bad main file falls back to the backup with a
warning, and when both are bad :meth:`LocalFileOffsetStore.load` raises a
:class:`~rmq_spark.errors.StoreError` naming both files, unless ``force_empty`` is set (the
bad files are then renamed aside for salvage, and the store starts empty).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rmq_spark.durable_json import read_json_or_start_empty, write_json_atomic
from rmq_spark.errors import CorruptDataError, InvalidArgumentError
from rmq_spark.names import validate_group
from rmq_spark.offsets.json_codec import is_valid_offset, is_valid_queue_id
from rmq_spark.offsets.store import OffsetStore
from rmq_spark.structs import MessageQueue

__all__ = ["DIRECTORY_ENV", "FILE_NAME", "LocalFileOffsetStore", "default_directory"]

log = logging.getLogger("rmq_spark.offsets")

FILE_NAME = "offsets.json"
FORMAT_VERSION = 1
DIRECTORY_ENV = "ROCKETLITE_OFFSETS_DIR"
TABLE_FIELD = "offsetTable"


def default_directory() -> Path:
    """``$ROCKETLITE_OFFSETS_DIR`` when set, else ``~/.rocketlite_offsets``."""
    configured = os.environ.get(DIRECTORY_ENV)
    return Path(configured) if configured else Path.home() / ".rocketlite_offsets"


class LocalFileOffsetStore(OffsetStore):
    """Offsets of one (client, group) in ``{directory}/{client_id}/{group}/offsets.json``."""

    def __init__(
        self,
        directory: str | os.PathLike[str] | None,
        client_id: str,
        group: str,
        *,
        force_empty: bool = False,
    ) -> None:
        super().__init__()
        validate_group(group)
        _check_client_id(client_id)
        base = default_directory() if directory is None else Path(directory)
        self.client_id = client_id
        self.group = group
        self.path = base / client_id / group / FILE_NAME
        self._force_empty = force_empty
        self._file_lock = threading.Lock()  # one writer of the file at a time
        self._on_disk: dict[MessageQueue, int] = {}  # what the file holds (after load/persist)

    def load(self) -> None:
        """Read the file (or its backup) into memory; a missing file means no offsets."""
        table = self._read_file()
        with self._file_lock:
            self._on_disk = dict(table)
        with self._lock:
            self._table.update(table)

    def _read_from_store(self, mq: MessageQueue) -> int | None:
        return self._read_file().get(mq)

    def persist_all(self, mqs: Iterable[MessageQueue] | None = None) -> dict[MessageQueue, int]:
        """Rewrite the file with every offset in memory, and return what the file holds
        (``mqs`` is accepted for the interface: one file holds all queues, so persisting
        some rewrites all of them). Queues no longer in memory
        (:meth:`~OffsetStore.remove_offset`) keep the offset the file had for them."""
        if mqs is not None:
            self._snapshot(mqs)  # validates the argument
        with self._file_lock:
            table = dict(sorted({**self._on_disk, **self.clone_offset_table()}.items()))
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_json_atomic(self.path, self._to_json(table), validate=_validate)
            self._on_disk = table
        return table

    def _read_file(self) -> dict[MessageQueue, int]:
        with self._file_lock:
            obj, source = read_json_or_start_empty(
                self.path,
                validate=_validate,
                force_empty=self._force_empty,
                what=f"no local offsets for group {self.group!r} (client {self.client_id!r})",
            )
        if source == "none":
            return {}
        return _table_from_json(obj)

    def _to_json(self, table: dict[MessageQueue, int]) -> dict[str, Any]:
        nested: dict[str, dict[str, dict[str, int]]] = {}
        for mq, offset in sorted(table.items()):
            nested.setdefault(mq.topic, {}).setdefault(mq.broker_name, {})[str(mq.queue_id)] = (
                offset
            )
        return {
            "version": FORMAT_VERSION,
            "clientId": self.client_id,
            "group": self.group,
            TABLE_FIELD: nested,
        }


def _check_client_id(client_id: object) -> None:
    """A client id becomes a directory name: it must be one plain path component."""
    if (
        not isinstance(client_id, str)
        or client_id in ("", ".", "..")
        or any(sep in client_id for sep in ("/", "\\", "\0"))
    ):
        raise InvalidArgumentError(
            f"client_id {client_id!r} must be a non-empty name without '/', '\\' or NUL "
            "(it is used as a directory name), e.g. '10.0.0.7@4242'"
        )


def _validate(obj: Any) -> None:
    """Raise when ``obj`` is not an offsets document (it then counts as corrupt)."""
    _table_from_json(obj)


def _table_from_json(obj: Any) -> dict[MessageQueue, int]:
    def bad(where: str, value: object) -> CorruptDataError:
        return CorruptDataError(f"offsets file: {where} is {value!r}, which is not valid")

    if not isinstance(obj, dict) or not isinstance(obj.get(TABLE_FIELD), dict):
        raise CorruptDataError(f"offsets file: expected an object with an {TABLE_FIELD!r} object")
    if obj.get("version") != FORMAT_VERSION:
        raise bad("version", obj.get("version"))
    table: dict[MessageQueue, int] = {}
    for topic, brokers in obj[TABLE_FIELD].items():
        if not isinstance(brokers, dict):
            raise bad(f"topic {topic!r}", brokers)
        for broker, queues in brokers.items():
            if not isinstance(queues, dict):
                raise bad(f"broker {broker!r} of topic {topic!r}", queues)
            for queue_key, offset in queues.items():
                queue_id = int(queue_key) if queue_key.isascii() and queue_key.isdigit() else None
                if not is_valid_queue_id(queue_id) or str(queue_id) != queue_key:
                    raise bad(f"queue id under {topic!r}/{broker!r}", queue_key)
                if not is_valid_offset(offset):
                    raise bad(f"offset of {topic!r}/{broker!r}/{queue_key}", offset)
                table[MessageQueue(topic, broker, queue_id)] = offset
    return table
