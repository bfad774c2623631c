"""The sizes a store's files were made with, kept so a restart with other sizes is refused.

Commit-log segments and consume-queue files are fixed-size, and offsets are computed from
those sizes: a store opened with a different ``commitlog_segment_bytes`` or
``consumequeue_entries_per_file`` would read records at the wrong places (and "extend"
files to the new size). RocketMQ refuses to start then, and so does rocketlite: the sizes
are written to ``config/storeGeometry.json`` when the store is created, and every later
open compares them with its settings. A store from before that file existed has its sizes
read from the files present.

:func:`check_geometry` is the decision, a pure function of what was configured, recorded
and found.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rmq_spark.durable_json import (
    read_json_or_start_empty,
    read_json_with_backup,
    write_json_atomic,
)
from rmq_spark.errors import StoreError

FILE_NAME = "storeGeometry.json"
ENTRY_BYTES = 20

_FLAGS = {
    "commitlog_segment_bytes": "--commitlog-segment-bytes",
    "consumequeue_entries_per_file": "--consumequeue-entries-per-file",
}


@dataclass(frozen=True)
class Geometry:
    commitlog_segment_bytes: int
    consumequeue_entries_per_file: int

    def to_json(self) -> dict[str, int]:
        return {
            "commitlog_segment_bytes": self.commitlog_segment_bytes,
            "consumequeue_entries_per_file": self.consumequeue_entries_per_file,
        }


def check_geometry(
    configured: Geometry, recorded: Geometry | None, found: dict[str, int | None]
) -> None:
    """Raise StoreError when the store's sizes (recorded, else ``found`` in its files; None
    = nothing to tell) differ from the configured ones, naming the flag and both sizes.

    >>> check_geometry(Geometry(1024, 10), Geometry(1024, 10), {})
    >>> check_geometry(Geometry(2048, 10), None, {"commitlog_segment_bytes": 1024})
    ... # doctest: +ELLIPSIS
    Traceback (most recent call last):
    rmq_spark.errors.StoreError: the store was made with --commitlog-segment-bytes 1024, ...
    """
    for name, flag in _FLAGS.items():
        want = getattr(configured, name)
        have = getattr(recorded, name) if recorded is not None else found.get(name)
        if have is not None and have != want:
            raise StoreError(
                f"the store was made with {flag} {have}, but this broker is set to {want}; "
                f"start it with {flag} {have} (a store's file sizes cannot change)"
            )


def sizes_in_files(commitlog_dir: Path, consumequeue_dir: Path) -> dict[str, int | None]:
    """The sizes a store without a recorded geometry was made with, read from its files:
    the largest commit-log segment and the largest consume-queue file (a file cut short by
    a crash is only ever smaller)."""
    segments = [p.stat().st_size for p in _numbered(commitlog_dir)]
    queue_files = [
        p.stat().st_size
        for topic in _dirs(consumequeue_dir)
        for queue in _dirs(topic)
        for p in _numbered(queue)
    ]
    largest_segment = max(segments, default=0)
    largest_queue_file = max(queue_files, default=0)
    return {
        "commitlog_segment_bytes": largest_segment or None,
        "consumequeue_entries_per_file": (largest_queue_file // ENTRY_BYTES) or None,
    }


def existing_sizes(config_dir: Path, commitlog_dir: Path, consumequeue_dir: Path) -> dict[str, int]:
    """The sizes an existing store was made with (recorded, else read from its files), for
    a broker that was not told them: it opens a store, its own or Apache RocketMQ's, with
    no flag beyond the directory. Empty for a new store."""
    try:
        recorded = _recorded(config_dir)
    except StoreError:
        recorded = None  # open() reports the damaged file
    if recorded is not None:
        return recorded.to_json()
    found = sizes_in_files(commitlog_dir, consumequeue_dir)
    return {name: size for name, size in found.items() if size is not None}


def load_or_record(
    config_dir: Path, configured: Geometry, find: Callable[[], dict[str, int | None]]
) -> None:
    """Check the store against ``configured`` (see :func:`check_geometry`; ``find`` reads
    the sizes from the files, asked only when none are recorded), then record them."""
    recorded = _recorded(config_dir)
    check_geometry(configured, recorded, find() if recorded is None else {})
    if recorded is None:
        config_dir.mkdir(parents=True, exist_ok=True)
        write_json_atomic(config_dir / FILE_NAME, configured.to_json(), validate=_parse)


#: the message index's file sizes, kept in the same file (RocketMQ's defaults when absent)
INDEX_FIELDS = ("index_hash_slots", "index_max_entries")
INDEX_FLAGS = ("--index-hash-slots", "--index-max-entries")


def recorded_index_sizes(config_dir: Path) -> tuple[int, int] | None:
    """The index file sizes recorded for the store, read only; None when none are."""
    try:
        document, source = read_json_with_backup(config_dir / FILE_NAME, validate=_parse)
    except StoreError:
        return None
    values = [document.get(name) for name in INDEX_FIELDS] if source != "none" else []
    if len(values) == 2 and all(isinstance(v, int) and v > 0 for v in values):
        return values[0], values[1]
    return None


def resolve_index_sizes(
    config_dir: Path, given: tuple[int | None, int | None], defaults: tuple[int, int]
) -> tuple[int, int]:
    """The index file sizes to use: the recorded ones, checked against those ``given``
    (None: not given); else those given or the defaults, then recorded. A store's index
    files are read with the sizes they were made with, so a mismatch raises StoreError
    naming the flag (as for the other file sizes)."""
    recorded = recorded_index_sizes(config_dir)
    if recorded is not None:
        for want, have, flag in zip(given, recorded, INDEX_FLAGS, strict=True):
            if want is not None and want != have:
                raise StoreError(
                    f"the store's message index was made with {flag} {have}, but this broker "
                    f"is set to {want}; start it with {flag} {have} (or without the flag)"
                )
        return recorded
    sizes = (given[0] or defaults[0], given[1] or defaults[1])
    document, source = read_json_with_backup(config_dir / FILE_NAME, validate=_parse)
    if source != "none":  # the segment sizes are recorded: add the index's beside them
        updated = {**document, **dict(zip(INDEX_FIELDS, sizes, strict=True))}
        write_json_atomic(config_dir / FILE_NAME, updated, validate=_parse)
    return sizes


def _recorded(config_dir: Path) -> Geometry | None:
    """The sizes recorded in ``config_dir`` (or its backup); None when none are."""
    document, source = read_json_or_start_empty(
        config_dir / FILE_NAME, validate=_parse, force_empty=False, what="no recorded geometry"
    )
    return _parse(document) if source != "none" else None


def _parse(document: object) -> Geometry:
    if not isinstance(document, dict):
        raise ValueError("the geometry must be a JSON object")
    values = [document.get(name) for name in _FLAGS]
    sizes = [v for v in values if isinstance(v, int) and not isinstance(v, bool) and v > 0]
    if len(sizes) != len(values):
        raise ValueError(f"sizes must be positive integers, got {values}")
    return Geometry(*sizes)


def _dirs(path: Path) -> list[Path]:
    return [p for p in path.iterdir() if p.is_dir()] if path.exists() else []


def _numbered(path: Path) -> list[Path]:
    return [p for p in path.iterdir() if p.name.isdigit()] if path.exists() else []
