"""The small files of a store directory, read without writing anything: who holds it, what
wrote it, and its config files (topics, consumer offsets, delay progress, groups).

Every reader here goes through the same parsers the broker uses (:mod:`rmq_spark.durable_json`
with its ``.bak`` fallback and fastjson dialect, the topic and offset-table codecs), but
never through the classes that own the files: those create directories, repair a main file
from its backup or cut a torn journal, and :class:`~rmq_spark.store.offline.StoreView` must
leave the directory exactly as it found it.
"""

from __future__ import annotations

import errno
import fcntl
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from rmq_spark.durable_json import read_json_with_backup
from rmq_spark.errors import (
    InvalidArgumentError,
    NotFoundError,
    StoreLockedError,
)
from rmq_spark.offsets.broker_table import COMPACTING_NAME, JOURNAL_NAME
from rmq_spark.offsets.broker_table import FILE_NAME as OFFSETS_FILE
from rmq_spark.offsets.journal import read_journal
from rmq_spark.offsets.json_codec import OffsetTable, offset_table_from_json
from rmq_spark.store import geometry
from rmq_spark.store.checkpoint import ROCKETLITE_FILE, StoreCheckpoints
from rmq_spark.store.config_files import (
    DELAY_OFFSETS_FILE,
    SUBSCRIPTION_GROUPS_FILE,
    delay_offsets_from_json,
    groups_from_json,
)
from rmq_spark.store.topics import FILE_NAME as TOPICS_FILE
from rmq_spark.store.topics import TopicConfig, topic_table_from_json

DELAY_FILE = DELAY_OFFSETS_FILE

StoreKind = Literal["rocketlite", "apache-rocketmq", "unknown"]

# struct flock of Linux (x86-64 and arm64): l_type, l_whence, l_start, l_len, l_pid
_FLOCK = struct.Struct("@hhqqi4x")


def check_store_dir(root: Path, *, allow_live: bool) -> str | None:
    """Who holds the store directory ``root`` (None: nobody). NotFoundError when it does not
    exist, InvalidArgumentError when it is not a store, StoreLockedError when a broker holds
    it and not ``allow_live``."""
    if not root.is_dir():
        raise NotFoundError(
            f"store directory {root} does not exist; give the directory a broker was "
            "started with (--store, RocketMQ's storePathRootDir)"
        )
    if not (root / "commitlog").is_dir():
        raise InvalidArgumentError(
            f"{root} is not a store directory: it has no commitlog/ subdirectory; give the "
            "store's root (the directory holding commitlog/, consumequeue/ and config/)"
        )
    holder = lock_holder(root)
    if holder is not None and not allow_live:
        raise StoreLockedError(
            f"store directory {root} is in use by {holder}; stop that broker, read a copy "
            "of the directory, or allow a live store (allow_live=True: reads stop at what "
            "was written when the view opened)"
        )
    return holder


def lock_holder(root: Path) -> str | None:
    """Who holds the store's ``lock`` file, or None when nobody does.

    Takes no lock a broker could trip over: a POSIX lock (Apache RocketMQ's
    ``FileChannel.tryLock``) is asked about with ``F_GETLK``, which acquires nothing; a
    ``flock`` (a rocketlite broker's) has no such question, so a shared one is tried and
    released at once (a broker starting in that microsecond would be told the store is in
    use). The lock file is never created. ``abort`` is not looked at: it is left behind by
    a crash as well as by a running broker.
    """
    try:
        fd = os.open(root / "lock", os.O_RDONLY)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"unknown (cannot open {root / 'lock'}: {exc.strerror})"
    try:
        return _posix_holder(fd) or _flock_holder(fd)
    finally:
        os.close(fd)


def _posix_holder(fd: int) -> str | None:
    query = _FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)
    try:
        answer = fcntl.fcntl(fd, fcntl.F_GETLK, query)
    except OSError:
        return None  # a file system without POSIX locks: the flock probe decides
    kind, _, _, _, pid = _FLOCK.unpack(answer)
    if kind == fcntl.F_UNLCK:
        return None
    return f"a POSIX lock (Apache RocketMQ's) of pid {pid}" if pid > 0 else "a POSIX lock"


def _flock_holder(fd: int) -> str | None:
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno not in (errno.EWOULDBLOCK, errno.EACCES):
            return None
        pid = os.pread(fd, 32, 0).decode(errors="replace").strip()
        return f"a rocketlite broker's flock (pid {pid})" if pid.isdigit() else "a flock"
    fcntl.flock(fd, fcntl.LOCK_UN)
    return None


def store_kind(root: Path, checkpoints: StoreCheckpoints) -> tuple[StoreKind, list[str]]:
    """Which software wrote the store, and the files that tell. "rocketlite" once rocketlite
    has opened it (a store Apache RocketMQ wrote gets rocketlite's files then too)."""
    config = root / "config"
    ours = [
        name
        for name, path in (
            (f"config/{geometry.FILE_NAME}", config / geometry.FILE_NAME),
            (ROCKETLITE_FILE, root / ROCKETLITE_FILE),
            (f"config/{JOURNAL_NAME}", config / JOURNAL_NAME),
        )
        if path.exists()
    ]
    if checkpoints.rocketlite is not None and not (root / ROCKETLITE_FILE).exists():
        ours.append("checkpoint (rocketlite's slots)")
    if ours:
        return "rocketlite", ours
    theirs = [name for name in ("index", "config/consumerFilter.json") if (root / name).exists()]
    if checkpoints.rocketmq is not None:
        theirs.insert(0, "checkpoint")
    return ("apache-rocketmq", theirs) if theirs else ("unknown", [])


@dataclass(frozen=True)
class StoredTopic:
    """A topic as the store knows it: from ``topics.json`` (``configured``), or only from
    its consume-queue directories (then the counts and perm are None)."""

    name: str
    read_queue_nums: int | None = None
    write_queue_nums: int | None = None
    perm: int | None = None
    message_type: str | None = None

    @property
    def configured(self) -> bool:
        return self.perm is not None

    @classmethod
    def of(cls, config: TopicConfig) -> StoredTopic:
        return cls(
            config.name,
            config.read_queue_nums,
            config.write_queue_nums,
            config.perm,
            config.message_type,
        )


@dataclass(frozen=True)
class StoreGeometry:
    """Segment and queue-file sizes: ``recorded`` in config/storeGeometry.json (rocketlite),
    else read from the largest files (None when there are none)."""

    commitlog_segment_bytes: int | None
    consumequeue_entries_per_file: int | None
    recorded: bool


def read_geometry(root: Path) -> StoreGeometry:
    config = root / "config"
    sizes = geometry.existing_sizes(config, root / "commitlog", root / "consumequeue")
    return StoreGeometry(
        sizes.get("commitlog_segment_bytes"),
        sizes.get("consumequeue_entries_per_file"),
        (config / geometry.FILE_NAME).exists(),
    )


def index_sizes(root: Path) -> tuple[int, int]:
    """The message index's file sizes (hash slots, entries): recorded with the store's
    other sizes, else RocketMQ's defaults (what RocketMQ made its files with)."""
    from rmq_spark.store.index_file import DEFAULT_HASH_SLOTS, DEFAULT_MAX_ENTRIES

    return geometry.recorded_index_sizes(root / "config") or (
        DEFAULT_HASH_SLOTS,
        DEFAULT_MAX_ENTRIES,
    )


def read_topics(config_dir: Path) -> dict[str, TopicConfig]:
    """``topics.json`` (or its backup); empty when there is none."""
    document, source = read_json_with_backup(
        config_dir / TOPICS_FILE, validate=topic_table_from_json
    )
    return {} if source == "none" else topic_table_from_json(document)


def read_consumer_offsets(config_dir: Path) -> OffsetTable:
    """``{(topic, group): {queue id: offset}}``: ``consumerOffset.json`` (or its backup) and
    then rocketlite's journals of the changes made since, as the broker replays them."""
    document, source = read_json_with_backup(
        config_dir / OFFSETS_FILE, validate=offset_table_from_json
    )
    table = {} if source == "none" else offset_table_from_json(document)
    for name in (COMPACTING_NAME, JOURNAL_NAME):
        changes, _ = read_journal(config_dir / name)
        for change in changes:
            if change[0] == "set":
                table.setdefault((change[1], change[2]), {}).update(change[3])
            else:
                table.pop((change[1], change[2]), None)
    return {key: queues for key, queues in table.items() if queues}


def offsets_by_group(config_dir: Path) -> dict[str, dict[tuple[str, int], int]]:
    """:func:`read_consumer_offsets` as ``{group: {(topic, queue id): offset}}``, sorted."""
    groups: dict[str, dict[tuple[str, int], int]] = {}
    for (topic, group), queues in sorted(read_consumer_offsets(config_dir).items()):
        groups.setdefault(group, {}).update({(topic, q): o for q, o in sorted(queues.items())})
    return groups


def read_delay_offsets(config_dir: Path) -> dict[int, int]:
    """``delayOffset.json``: ``{delay level: next schedule-queue offset to deliver}``."""
    # Imported here, as in read_subscription_groups: the broker package costs a Spark
    # worker half a second to import.

    document, source = read_json_with_backup(
        config_dir / DELAY_FILE, validate=lambda d: delay_offsets_from_json(_text_keys(d))
    )
    return {} if source == "none" else delay_offsets_from_json(_text_keys(document))


def read_subscription_groups(config_dir: Path) -> list[str]:
    """Group names of RocketMQ's ``subscriptionGroup.json``; empty when there is none."""

    document, source = read_json_with_backup(
        config_dir / SUBSCRIPTION_GROUPS_FILE, validate=groups_from_json
    )
    return [] if source == "none" else sorted(groups_from_json(document))


def _text_keys(document: Any) -> Any:
    """fastjson writes delayOffset.json's levels as bare numbers ({1:5}): as text ({"1": 5})."""
    table = document.get("offsetTable") if isinstance(document, dict) else None
    if not isinstance(table, dict):
        return document
    return {**document, "offsetTable": {str(k): v for k, v in table.items()}}
