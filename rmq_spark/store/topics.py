"""Topic configurations, persisted like RocketMQ's ``config/topics.json``.

``{"topicConfigTable": {name: {"topicName", "readQueueNums", "writeQueueNums", "perm"}}}``.
Producers write to queues ``0..write_queue_nums-1`` and consumers read ``0..read_queue_nums-1``;
the two differ while a topic shrinks (lower the write count first, let consumers drain, then
lower the read count). ``perm`` is 2 (write), 4 (read) or 6 (both). RocketMQ also writes its
inherit (1) and priority (8) bits into ``perm`` (its ``TBW102`` has perm 7): they are kept
apart in ``rocketmq_bits`` and written back as they were read.

Changes are rare, so each one is written to disk (durably, with a .bak) before it is visible.

>>> TopicConfig("TopicA", 8, 8).is_writable
True
>>> TopicConfig("TopicA", 8, 8, perm=4).to_json()["perm"]
4
"""

from __future__ import annotations

import builtins
import dataclasses
import logging
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rmq_spark.durable_json import read_json_or_start_empty, write_json_atomic
from rmq_spark.errors import (
    AlreadyExistsError,
    CorruptDataError,
    InvalidArgumentError,
    InvalidNameError,
    NotFoundError,
)
from rmq_spark.names import SYSTEM_PREFIXES, check_message_type, validate_topic
from rmq_spark.structs import Permission

log = logging.getLogger("rmq_spark.store")

FILE_NAME = "topics.json"
TABLE_FIELD = "topicConfigTable"
MAX_QUEUES_PER_TOPIC = 1024
DEFAULT_QUEUES = 4
ALLOWED_PERMS = (int(Permission.WRITE), int(Permission.READ), int(Permission.READ_WRITE))
#: RocketMQ's PermName.PERM_INHERIT and PERM_PRIORITY: kept, never acted on
ROCKETMQ_PERM_BITS = 0x1 | 0x8
MESSAGE_TYPE_ATTRIBUTE = "message.type"


@dataclass(frozen=True)
class TopicConfig:
    """One topic's queue counts and permission; validated on construction."""

    name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int = int(Permission.READ_WRITE)
    message_type: str = "NORMAL"
    #: RocketMQ's inherit and priority bits of a topics.json it wrote (see the module doc)
    rocketmq_bits: int = 0

    def __post_init__(self) -> None:
        validate_topic(self.name, allow_system=True)
        where = f" for topic {self.name!r}"
        _check_queue_count("read_queue_nums", self.read_queue_nums, where)
        _check_queue_count("write_queue_nums", self.write_queue_nums, where)
        _check_perm("perm", self.perm, where)
        if self.rocketmq_bits & ~ROCKETMQ_PERM_BITS:
            raise InvalidArgumentError(
                f"rocketmq_bits={self.rocketmq_bits!r}{where}: use 0, 1, 8 or 9"
            )
        check_message_type(self.message_type, where)
        # Keep a plain int even when given a Permission flag, so equality and JSON are simple.
        object.__setattr__(self, "perm", int(self.perm))

    @property
    def is_readable(self) -> bool:
        """Whether consumers may read (perm 4 or 6)."""
        return bool(self.perm & Permission.READ)

    @property
    def is_writable(self) -> bool:
        """Whether producers may write (perm 2 or 6)."""
        return bool(self.perm & Permission.WRITE)

    def to_json(self) -> dict[str, Any]:
        """RocketMQ's field names: topicName, readQueueNums, writeQueueNums, perm, and the
        ``message.type`` attribute when it is not NORMAL."""
        out: dict[str, Any] = {
            "topicName": self.name,
            "readQueueNums": self.read_queue_nums,
            "writeQueueNums": self.write_queue_nums,
            "perm": self.perm | self.rocketmq_bits,
        }
        if self.message_type != "NORMAL":
            out["attributes"] = {MESSAGE_TYPE_ATTRIBUTE: self.message_type}
        return out

    @classmethod
    def from_json(cls, obj: Any) -> TopicConfig:
        """Parse :meth:`to_json`'s form (other RocketMQ fields are ignored).

        Raises CorruptDataError naming the bad field.
        """
        fields = ("topicName", "readQueueNums", "writeQueueNums", "perm")
        if not isinstance(obj, dict) or any(f not in obj for f in fields):
            raise CorruptDataError(
                f"a topic config must be an object with {', '.join(fields)}; got {obj!r}"
            )
        attributes = obj.get("attributes") or {}
        try:
            if not isinstance(attributes, dict):
                raise InvalidArgumentError(f"attributes must be an object, not {attributes!r}")
            perm = obj["perm"]
            bits = perm & ROCKETMQ_PERM_BITS if type(perm) is int else 0
            if bits and perm & ~ROCKETMQ_PERM_BITS not in ALLOWED_PERMS:
                bits = 0  # no read or write bit besides: refused below, naming perm as read
            return cls(
                obj["topicName"],
                obj["readQueueNums"],
                obj["writeQueueNums"],
                perm & ~ROCKETMQ_PERM_BITS if bits else perm,
                attributes.get(MESSAGE_TYPE_ATTRIBUTE, "NORMAL"),
                rocketmq_bits=bits,
            )
        except InvalidArgumentError as exc:
            raise CorruptDataError(f"bad topic config {obj!r}: {exc}") from exc


def topic_table_to_json(topics: Mapping[str, TopicConfig]) -> dict[str, Any]:
    """The whole table in topics.json shape, sorted by name for stable output."""
    return {TABLE_FIELD: {name: topics[name].to_json() for name in sorted(topics)}}


def topic_table_from_json(obj: Any) -> dict[str, TopicConfig]:
    """Parse topics.json's shape; raises CorruptDataError naming the bad entry."""
    if not isinstance(obj, dict) or not isinstance(obj.get(TABLE_FIELD), dict):
        raise CorruptDataError(f'expected a JSON object with a "{TABLE_FIELD}" object inside')
    topics = {}
    for name, entry in obj[TABLE_FIELD].items():
        config = TopicConfig.from_json(entry)
        if config.name != name:
            raise CorruptDataError(
                f"{TABLE_FIELD} key {name!r} does not match its topicName {config.name!r}"
            )
        topics[name] = config
    return topics


class TopicTable:
    """The broker's topics; thread-safe. Create it with :meth:`open`."""

    def __init__(self, path: Path, topics: dict[str, TopicConfig]) -> None:
        self._path = path
        self._topics = topics  # replaced, never mutated, so a failed write changes nothing
        self._lock = threading.Lock()
        #: counts the changes made since the table was opened: a reader that keeps its own
        #: copy of the table (what a broker registers with name servers) sees it move
        self.version = 0

    @classmethod
    def open(cls, config_dir: str | os.PathLike[str], *, force_empty: bool = False) -> TopicTable:
        """Load ``config_dir/topics.json`` (or its .bak, which is then rewritten as main).

        When neither file can be read this raises StoreError, unless ``force_empty`` is set:
        then both files are renamed to ``*.corrupt-<time>`` and the table starts empty.
        """
        directory = Path(config_dir)
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / FILE_NAME
        document, source = read_json_or_start_empty(
            path, validate=topic_table_from_json, force_empty=force_empty, what="no topics"
        )
        table = cls(path, {} if source == "none" else topic_table_from_json(document))
        if source == "backup":
            with table._lock:
                table._save(table._topics)  # repair the main file now
        return table

    @property
    def path(self) -> Path:
        """The main JSON file."""
        return self._path

    def create(
        self,
        name: str,
        queues: int = DEFAULT_QUEUES,
        *,
        read_queues: int | None = None,
        write_queues: int | None = None,
        perm: int = int(Permission.READ_WRITE),
        system: bool = False,
        message_type: str = "NORMAL",
    ) -> TopicConfig:
        """Create a topic with ``queues`` read and write queues (each can be set apart).

        Idempotent when the topic exists with the same config; AlreadyExistsError otherwise.
        ``%RETRY%``/``%DLQ%`` names need ``system=True`` (see :meth:`ensure_system_topic`).
        """
        validate_topic(name, allow_system=system)
        _check_queue_count("queues", queues)
        config = TopicConfig(
            name,
            queues if read_queues is None else read_queues,
            queues if write_queues is None else write_queues,
            perm,
            message_type,
        )
        with self._lock:
            existing = self._topics.get(name)
            if existing == config:
                return config
            if existing is not None:
                raise AlreadyExistsError(
                    f"topic {name!r} already exists as {_describe(existing)}, not "
                    f"{_describe(config)}; use update() to change it"
                )
            self._save({**self._topics, name: config})
            return config

    def update(
        self,
        name: str,
        *,
        queues: int | None = None,
        read_queues: int | None = None,
        write_queues: int | None = None,
        perm: int | None = None,
        message_type: str | None = None,
    ) -> TopicConfig:
        """Change queue counts (grow or shrink), perm and/or message type; returns the new
        config.

        ``queues`` sets both counts; ``read_queues``/``write_queues`` override it. Messages in
        queues beyond a lowered read count stay on disk but are not served.
        """
        if queues is not None:
            _check_queue_count("queues", queues)
        with self._lock:
            current = self._get_locked(name)
            changed = dataclasses.replace(
                current,
                read_queue_nums=_first(read_queues, queues, current.read_queue_nums),
                write_queue_nums=_first(write_queues, queues, current.write_queue_nums),
                perm=current.perm if perm is None else perm,
                message_type=current.message_type if message_type is None else message_type,
            )
            if changed != current:
                self._save({**self._topics, name: changed})
            return changed

    def delete(self, name: str) -> TopicConfig:
        """Remove a topic's config and return it; NotFoundError if it does not exist."""
        with self._lock:
            removed = self._get_locked(name)
            self._save({n: c for n, c in self._topics.items() if n != name})
            return removed

    def get(self, name: str) -> TopicConfig:
        """The topic's config; NotFoundError (saying how to create it) if it does not exist."""
        with self._lock:
            return self._get_locked(name)

    def find(self, name: str) -> TopicConfig | None:
        """The topic's config, or None if it does not exist."""
        with self._lock:
            return self._topics.get(name)

    def ensure_system_topic(
        self, name: str, queues: int = 1, perm: int = int(Permission.READ_WRITE)
    ) -> TopicConfig:
        """Return the ``%RETRY%``/``%DLQ%`` topic ``name``, creating it if needed.

        An existing topic is returned as it is, even if its config differs.
        """
        if not (isinstance(name, str) and name.startswith(SYSTEM_PREFIXES)):
            raise InvalidNameError(
                f"{name!r} is not a system topic name (prefixes {', '.join(SYSTEM_PREFIXES)}); "
                "use create() for ordinary topics"
            )
        validate_topic(name, allow_system=True)
        _check_queue_count("queues", queues)
        config = TopicConfig(name, queues, queues, perm)
        with self._lock:
            existing = self._topics.get(name)
            if existing is not None:
                return existing
            self._save({**self._topics, name: config})
            return config

    def list(self) -> builtins.list[TopicConfig]:
        """All topics, sorted by name."""
        with self._lock:
            return [self._topics[name] for name in sorted(self._topics)]

    def _get_locked(self, name: str) -> TopicConfig:
        config = self._topics.get(name)
        if config is None:
            validate_topic(name, allow_system=True)  # a bad name deserves the clearer error
            raise NotFoundError(
                f"topic {name!r} does not exist on this broker; create it first "
                "(the admin create-topic call, or TopicTable.create)"
            )
        return config

    def _save(self, topics: dict[str, TopicConfig]) -> None:
        """Write ``topics`` durably, then make them current. Caller holds the lock."""
        write_json_atomic(self._path, topic_table_to_json(topics), validate=topic_table_from_json)
        self._topics = topics
        self.version += 1


def _check_queue_count(label: str, value: object, where: str = "") -> None:
    if (
        not isinstance(value, int)
        or isinstance(value, bool)
        or not 1 <= value <= MAX_QUEUES_PER_TOPIC
    ):
        raise InvalidArgumentError(
            f"{label}={value!r}{where} is out of range: use a whole number in "
            f"1..{MAX_QUEUES_PER_TOPIC}"
        )


def _check_perm(label: str, value: object, where: str = "") -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value not in ALLOWED_PERMS:
        raise InvalidArgumentError(
            f"{label}={value!r}{where} is not allowed: use 2 (write only), 4 (read only) "
            "or 6 (read and write)"
        )


def _first(*values: int | None) -> int:
    return next(v for v in values if v is not None)


def _describe(config: TopicConfig) -> str:
    return (
        f"read_queue_nums={config.read_queue_nums}, write_queue_nums={config.write_queue_nums}, "
        f"perm={config.perm}, message_type={config.message_type}"
    )
