"""Durable JSON files: atomic replace with a ``.bak`` copy of the previous good version.

The broker keeps small tables (consumer offsets, topic configs) as JSON files, rewritten
whole on every persist. :func:`write_json_atomic` keeps this promise: at every instant, even
if the process or the machine dies mid-write, at least one of ``path`` and ``path + ".bak"``
is a complete, valid file (provided one was before). :func:`read_json_with_backup` reads it
back, falling back to the backup with a warning.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import tempfile
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from rmq_spark.errors import ResourceExhaustedError, StoreError

log = logging.getLogger("rmq_spark.store")

BACKUP_SUFFIX = ".bak"

#: Raises (any exception) when a parsed document has the wrong shape; return value ignored.
Validator = Callable[[Any], object]
Source = Literal["main", "backup", "none"]


def backup_path(path: str | os.PathLike[str]) -> Path:
    """The ``.bak`` file that :func:`write_json_atomic` keeps next to ``path``."""
    return Path(os.fspath(path) + BACKUP_SUFFIX)


def write_json_atomic(
    path: str | os.PathLike[str], obj: Any, *, validate: Validator | None = None
) -> None:
    """Durably replace ``path`` with ``obj`` as JSON, keeping the previous good file as .bak.

    Keys keep the caller's order (sort them for stable output). ``validate`` decides whether
    the current main file is "good" enough to become the backup; without it any valid JSON is.
    The directory must exist.
    """
    target = Path(path)
    data = (json.dumps(obj, indent=2, ensure_ascii=False, allow_nan=False) + "\n").encode()
    # Order matters for the crash windows: the main file is never missing or partial, because
    # both files only ever change by an atomic rename of a fully written, fsynced temp file.
    try:
        previous = _read_good(target, validate)
        if previous is not None:
            # A copy, not a rename, so the main file never disappears. A main file that does
            # not parse is never copied over the backup: the backup may be the only good one.
            _replace_durably(backup_path(target), previous)
        _replace_durably(target, data)
        fsync_dir(target.parent)
    except OSError as exc:
        if exc.errno not in (errno.EMFILE, errno.ENFILE):
            raise
        # The old file is still whole (every change is a rename): refuse this one write.
        raise ResourceExhaustedError(
            f"cannot write {target}: the process has no file descriptor left "
            f"({exc.strerror}); raise the file limit (ulimit -n) or close connections"
        ) from None


def read_json_with_backup(
    path: str | os.PathLike[str], *, validate: Validator | None = None
) -> tuple[Any, Source]:
    """Load ``path``, or its ``.bak`` when the main file is missing or corrupt.

    Returns ``(obj, source)`` with source ``"main"`` or ``"backup"``, or ``(None, "none")``
    when neither file exists. Raises :class:`StoreError` when a file exists but no valid
    version can be read. ``validate`` raises on a document with the wrong shape, which then
    counts as corrupt.
    """
    main = Path(path)
    backup = backup_path(main)
    main_obj, main_error = _load(main, validate)
    if main_error is None:
        return main_obj, "main"
    backup_obj, backup_error = _load(backup, validate)
    if isinstance(main_error, FileNotFoundError) and isinstance(backup_error, FileNotFoundError):
        return None, "none"
    if backup_error is None:
        log.warning(
            "%s is unreadable (%s); using the backup %s instead", main, _why(main_error), backup
        )
        return backup_obj, "backup"
    raise StoreError(
        f"cannot load {main} ({_why(main_error)}) nor its backup {backup} "
        f"({_why(backup_error)}); restore one of these files from a copy, or start with the "
        "force-empty option (force_empty=True), which moves both aside and begins empty"
    )


def read_json_or_start_empty(
    path: str | os.PathLike[str],
    *,
    validate: Validator | None,
    force_empty: bool,
    what: str,
) -> tuple[Any, Literal["main", "backup", "none"]]:
    """:func:`read_json_with_backup`, except that with ``force_empty`` unreadable files are
    renamed aside (kept for salvage) and ``(None, "none")`` is returned, with an error logged
    that names ``what`` starts empty."""
    try:
        return read_json_with_backup(path, validate=validate)
    except StoreError as exc:
        if not force_empty:
            raise
        moved = set_aside(path)
        log.error(
            "force_empty is set: starting with %s. Unreadable files were kept as %s. "
            "The error was: %s",
            what,
            ", ".join(str(p) for p in moved),
            exc,
        )
        return None, "none"


def set_aside(path: str | os.PathLike[str]) -> list[Path]:
    """Rename ``path`` and its ``.bak`` (those that exist) to ``<name>.corrupt-<UTC time>``.

    For force-empty starts: unreadable files stay on disk for salvage by hand (a truncated
    file still holds most of its entries) instead of being overwritten by the next write.
    Returns the new paths.
    """
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
    moved = []
    for source in (Path(path), backup_path(path)):
        target = source.with_name(f"{source.name}.corrupt-{stamp}")
        try:
            os.replace(source, target)
        except FileNotFoundError:
            continue
        moved.append(target)
    fsync_dir(Path(path).parent)
    return moved


def _load(path: Path, validate: Validator | None) -> tuple[Any, Exception | None]:
    """Parse and validate one file; returns ``(obj, None)`` or ``(None, the error)``."""
    try:
        return _read_version(path, validate)[1], None
    except Exception as exc:  # any failure means "not a good version"; the caller reports it
        return None, exc


def _read_version(path: Path, validate: Validator | None) -> tuple[bytes, Any]:
    """The raw bytes and parsed document of ``path``; raises if it is not a valid version."""
    data = path.read_bytes()
    obj = _parse(data)
    if validate is not None:
        validate(obj)
    return data, obj


def _parse(data: bytes) -> Any:
    if not data.strip():
        raise ValueError("the file is empty")
    text = data.decode("utf-8")
    try:
        # Strict JSON: NaN and Infinity are Python extensions that other readers reject.
        return json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as strict:
        # Apache RocketMQ's broker writes its config files with fastjson, whose maps keyed
        # by numbers are not JSON ({0:213664}); read those too, so its store opens here.
        from rmq_spark.codec.fastjson import loads as fastjson_loads

        try:
            return fastjson_loads(text)
        except ValueError:
            raise strict from None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _read_good(path: Path, validate: Validator | None) -> bytes | None:
    """The bytes of ``path`` if it holds a valid document, else None."""
    try:
        return _read_version(path, validate)[0]
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno in (errno.EMFILE, errno.ENFILE):
            raise  # not the file's fault: nothing is written
        log.warning("%s is not a valid version (%s); keeping the existing backup", path, exc)
        return None
    except Exception as exc:
        log.warning("%s is not a valid version (%s); keeping the existing backup", path, exc)
        return None


def _replace_durably(path: Path, data: bytes) -> None:
    """Write ``data`` to a temp file beside ``path``, fsync it, and rename it over ``path``."""
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as tmp:
            tmp.write(data)
            tmp.flush()
            os.fsync(tmp.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp_name)
        raise


def fsync_dir(directory: Path) -> None:
    """Make the renames themselves durable (POSIX only; Windows cannot open directories)."""
    if not hasattr(os, "O_DIRECTORY"):
        return
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _why(error: Exception) -> str:
    if isinstance(error, FileNotFoundError):
        return "missing"
    if isinstance(error, json.JSONDecodeError):
        return f"not valid JSON: {error}"
    return f"{type(error).__name__}: {error}"
