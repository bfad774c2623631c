"""The broker's consumer-offset table: the server side of RocketMQ's RemoteBrokerOffsetStore.

``(topic, group) -> {queue_id: offset}`` in memory, where offset is the *next* offset to
consume. Every change is appended to ``config/consumerOffset.journal``
(:mod:`rmq_spark.offsets.journal`) before :meth:`ConsumerOffsetTable.commit` returns, so an
acknowledged commit survives a killed broker (and, with ``sync_commits``, a power loss). A
daemon thread compacts the table into ``config/consumerOffset.json`` (RocketMQ's shape and
name) every ``persist_interval_ms`` while it has changes, and starts a new journal; opening
loads the JSON and replays the journals written after it.

Example::

    with ConsumerOffsetTable.open(config_dir) as offsets:
        offsets.commit("GroupA", "TopicA", {0: 42})  # -> {0: 42}
        offsets.query_one("GroupA", "TopicA", 1)  # -> None: never committed, which is not 0
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from types import TracebackType

from rmq_spark.durable_json import fsync_dir, read_json_or_start_empty, write_json_atomic
from rmq_spark.errors import InvalidArgumentError, ResourceExhaustedError, StoreError
from rmq_spark.names import validate_group, validate_topic
from rmq_spark.offsets.journal import OffsetJournal, encode_drop, encode_set, read_journal
from rmq_spark.offsets.json_codec import (
    MAX_OFFSET,
    MAX_QUEUE_ID,
    OffsetTable,
    is_valid_offset,
    is_valid_queue_id,
    offset_table_from_json,
    offset_table_to_json,
    table_key,
)

log = logging.getLogger("rmq_spark.store")

FILE_NAME = "consumerOffset.json"
JOURNAL_NAME = "consumerOffset.journal"
#: the journal being compacted into the JSON; removed once the JSON is written
COMPACTING_NAME = "consumerOffset.journal.compacting"
DEFAULT_PERSIST_INTERVAL_MS = 5000


class ConsumerOffsetTable:
    """Committed offsets per (group, topic, queue); thread-safe. Create it with :meth:`open`."""

    def __init__(
        self,
        path: Path,
        table: OffsetTable,
        persist_interval_ms: int,
        sync_commits: bool = False,
    ) -> None:
        self._path = path
        self._table = table
        self._sync_commits = sync_commits
        self._journal_path = path.with_name(JOURNAL_NAME)
        self._compacting_path = path.with_name(COMPACTING_NAME)
        self._journal: OffsetJournal | None = None
        self._interval_s = persist_interval_ms / 1000
        self._lock = threading.Lock()
        # Serialises file writes, which happen outside _lock so commits never wait on fsync;
        # without it two persists could finish out of order and leave an older table on disk.
        self._persist_lock = threading.Lock()
        self._version = 0  # bumped on every change; dirty while != _persisted_version
        self._persisted_version = 0
        self._closed = False
        self._stop = threading.Event()
        self._flusher: threading.Thread | None = None

    @classmethod
    def open(
        cls,
        config_dir: str | os.PathLike[str],
        *,
        force_empty: bool = False,
        persist_interval_ms: int = DEFAULT_PERSIST_INTERVAL_MS,
        sync_commits: bool = False,
    ) -> ConsumerOffsetTable:
        """Load ``config_dir/consumerOffset.json`` (or its .bak), replay the journal, and start
        periodic compaction. ``sync_commits``: a commit returns once fsynced (SYNC flush).

        When neither file can be read this raises StoreError, unless ``force_empty`` is set:
        then both files are renamed to ``*.corrupt-<time>`` and the table starts empty.
        """
        if (
            not isinstance(persist_interval_ms, int)
            or isinstance(persist_interval_ms, bool)
            or persist_interval_ms <= 0
        ):
            raise InvalidArgumentError(
                f"persist_interval_ms must be a positive integer, got {persist_interval_ms!r}"
            )
        directory = Path(config_dir)
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / FILE_NAME
        table, from_backup = _load(path, force_empty)
        offsets = cls(path, table, persist_interval_ms, sync_commits)
        replayed = offsets._replay_journals()
        if from_backup or replayed:
            offsets._version += 1  # rewrite the main file at the next persist
        offsets._start_flusher()
        return offsets

    def _replay_journals(self) -> int:
        """Apply the journals written after the JSON (the one being compacted first), then
        open the current one for appending; returns how many changes were applied."""
        applied = 0
        for path in (self._compacting_path, self._journal_path):
            changes, good = read_journal(path)
            for change in changes:
                _apply(self._table, change)
            applied += len(changes)
            if path == self._journal_path:
                self._journal = OffsetJournal(path, sync=self._sync_commits, keep_bytes=good)
        if applied:
            log.info("consumer offsets: replayed %d journaled changes", applied)
        return applied

    @property
    def path(self) -> Path:
        """The main JSON file."""
        return self._path

    def commit(
        self,
        group: str,
        topic: str,
        offsets: Mapping[int, int],
        *,
        increase_only: bool = False,
    ) -> dict[int, int]:
        """Store ``{queue_id: next offset to consume}``; return what is now stored for them.

        With ``increase_only`` a lower offset than the stored one is ignored (the stored one is
        returned). All values are checked before any is stored.
        """
        key = _key(group, topic)
        updates = _checked_offsets(key, offsets)
        end = None
        with self._lock:
            self._check_open()
            if not updates:
                return {}
            queues = self._table.setdefault(key, {})
            changed: dict[int, int] = {}
            for queue_id, offset in updates.items():
                old = queues.get(queue_id)
                if old == offset or (increase_only and old is not None and offset < old):
                    continue
                changed[queue_id] = offset
            if changed:
                # Journaled first: a change that could not be written is not made.
                end = self._append(encode_set(key[0], key[1], changed))
                queues.update(changed)
                self._version += 1
            stored = {queue_id: queues[queue_id] for queue_id in updates}
            if not queues:
                del self._table[key]
        if end is not None:
            self._make_durable(end)
        return stored

    def _append(self, payload: bytes) -> int:
        assert self._journal is not None
        try:
            return self._journal.append(payload)
        except OSError as exc:
            raise ResourceExhaustedError(
                f"cannot journal a consumer offset change in {self._journal.path}: {exc}; "
                "the commit was not made (free disk space and commit again)"
            ) from exc

    def _make_durable(self, end: int) -> None:
        journal = self._journal
        assert journal is not None
        try:
            journal.make_durable(end)
        except OSError as exc:
            raise StoreError(
                f"fsync of the consumer offset journal {journal.path} failed: {exc}; the "
                "commit may not survive a power loss"
            ) from exc

    def query(
        self, group: str, topic: str, queue_ids: Iterable[int] | None = None
    ) -> dict[int, int]:
        """Committed offsets of ``queue_ids`` (default: all); queues never committed are absent."""
        key = _key(group, topic)
        wanted = None if queue_ids is None else [_checked_queue_id(key, q) for q in queue_ids]
        with self._lock:
            queues = self._table.get(key, {})
            if wanted is None:
                return dict(sorted(queues.items()))
            return {q: queues[q] for q in wanted if q in queues}

    def query_one(self, group: str, topic: str, queue_id: int) -> int | None:
        """The committed offset of one queue, or None when there is none (which is not 0)."""
        return self.query(group, topic, [queue_id]).get(queue_id)

    def groups_of_topic(self, topic: str) -> list[str]:
        """Sorted names of the groups that have committed offsets for ``topic``."""
        validate_topic(topic, allow_system=True)
        with self._lock:
            return sorted(g for (t, g), queues in self._table.items() if t == topic and queues)

    def topics_of_group(self, group: str) -> list[str]:
        """Sorted names of the topics where ``group`` has committed offsets."""
        validate_group(group)
        with self._lock:
            return sorted(t for (t, g), queues in self._table.items() if g == group and queues)

    def remove_group(self, group: str, topic: str | None = None) -> int:
        """Forget ``group``'s offsets (on ``topic`` only, if given); returns entries removed."""
        validate_group(group)
        if topic is not None:
            validate_topic(topic, allow_system=True)
        return self._remove(lambda t, g: g == group and (topic is None or t == topic))

    def remove_topic(self, topic: str) -> int:
        """Forget all groups' offsets on ``topic`` (when it is deleted); returns entries removed."""
        validate_topic(topic, allow_system=True)
        return self._remove(lambda t, g: t == topic)

    def snapshot(self) -> OffsetTable:
        """A copy of the whole table: ``{(topic, group): {queue_id: offset}}``."""
        with self._lock:
            return {key: dict(queues) for key, queues in self._table.items() if queues}

    def persist(self) -> bool:
        """Compact: write the table durably if it changed since the last write, then drop
        the journal it covers; returns whether it wrote."""
        with self._persist_lock:
            with self._lock:
                if self._version == self._persisted_version:
                    return False
                version = self._version
                document = offset_table_to_json(self._table)
                self._rotate_journal()
            write_json_atomic(self._path, document, validate=offset_table_from_json)
            # The JSON holds every change of the journal set aside (this one's, or one an
            # earlier compaction left behind): it can go.
            self._compacting_path.unlink(missing_ok=True)
            with self._lock:
                self._persisted_version = version
            return True

    def _rotate_journal(self) -> None:
        """Start a new journal; the old one waits beside it until the JSON covers it. Not
        when an earlier compaction left its journal behind: overwriting that would lose
        its changes should this compaction fail too (the current one then grows on)."""
        journal = self._journal
        if journal is None or journal.size == 0 or self._compacting_path.exists():
            return
        journal.close()
        os.replace(self._journal_path, self._compacting_path)
        self._journal = OffsetJournal(self._journal_path, sync=self._sync_commits)
        fsync_dir(self._path.parent)

    def close(self) -> None:
        """Stop the persisting thread and persist what is left. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._stop.set()
        if self._flusher is not None:
            self._flusher.join()
        try:
            self.persist()
        except OSError as exc:
            # Nothing is lost: the journal holds every change, and the next open replays it.
            log.warning("consumer offsets not compacted into %s (%s)", self._path, exc)
        if self._journal is not None:
            self._journal.close()

    def __enter__(self) -> ConsumerOffsetTable:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _remove(self, match: Callable[[str, str], bool]) -> int:
        with self._lock:
            self._check_open()
            doomed = [key for key in self._table if match(*key)]
            for key in doomed:
                self._append(encode_drop(*key))
                del self._table[key]
            if doomed:
                self._version += 1
            return len(doomed)

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError(
                f"the consumer offset table {self._path} is closed; changes would be lost, "
                "so open it again first"
            )

    def _start_flusher(self) -> None:
        self._flusher = threading.Thread(
            target=self._run_flusher, name=f"offset-persist:{self._path}", daemon=True
        )
        self._flusher.start()

    def _run_flusher(self) -> None:
        failing = False
        while not self._stop.wait(self._interval_s):
            try:
                self.persist()
            except OSError as exc:
                # Keep the thread alive: the table stays dirty and the next tick retries
                # (e.g. after an operator frees disk space). The journal holds every change.
                if not failing:
                    log.error(
                        "compacting consumer offsets into %s failed (%s); retrying "
                        "every %s s, the journal keeps every change",
                        self._path,
                        exc,
                        self._interval_s,
                    )
                failing = True
            except Exception:
                log.exception("persisting consumer offsets to %s failed; retrying", self._path)
            else:
                failing = False


def _apply(table: OffsetTable, change: tuple) -> None:
    if change[0] == "set":
        _, topic, group, offsets = change
        table.setdefault((topic, group), {}).update(offsets)
    else:
        table.pop((change[1], change[2]), None)


def _load(path: Path, force_empty: bool) -> tuple[OffsetTable, bool]:
    """The stored table and whether it came from the backup."""
    document, source = read_json_or_start_empty(
        path,
        validate=offset_table_from_json,
        force_empty=force_empty,
        what="an empty consumer offset table",
    )
    if source == "none":
        return {}, False
    return offset_table_from_json(document), source == "backup"


def _key(group: str, topic: str) -> tuple[str, str]:
    # Retry and DLQ topics (%RETRY%group, %DLQ%group) have consumer offsets too.
    return validate_topic(topic, allow_system=True), validate_group(group)


def _checked_queue_id(key: tuple[str, str], queue_id: object) -> int:
    if not is_valid_queue_id(queue_id):
        raise InvalidArgumentError(
            f"queue id {queue_id!r} for {table_key(*key)} is not an integer in 0..{MAX_QUEUE_ID}"
        )
    return queue_id


def _checked_offsets(key: tuple[str, str], offsets: Mapping[int, int]) -> dict[int, int]:
    if not isinstance(offsets, Mapping):
        raise InvalidArgumentError(
            f"offsets for {table_key(*key)} must be a mapping of queue id -> offset, "
            f"got {type(offsets).__name__}"
        )
    checked = {}
    for queue_id, offset in offsets.items():
        queue_id = _checked_queue_id(key, queue_id)
        if not is_valid_offset(offset):
            raise InvalidArgumentError(
                f"offset {offset!r} for queue {queue_id} of {table_key(*key)} is not an integer "
                f"in 0..{MAX_OFFSET} (it is the next offset to consume, so never negative)"
            )
        checked[queue_id] = offset
    return checked
