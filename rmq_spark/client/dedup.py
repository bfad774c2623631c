"""Consumer-side idempotency: a bounded, persistent window of recently consumed message ids.

RocketMQ delivers every message at least once: after a consumer crash, a rebalance or an
unacknowledged pull, the same message comes again. It keeps its client message id (the
``UNIQ_KEY`` property) across redeliveries, consumer retries and producer retries, so a
consumer that remembers which ids it has already processed can skip the repeats.
:class:`DedupWindow` is that memory::

    with DedupWindow("state/orders-dedup.journal") as window:
        for msg_id, body in batch:
            if window.is_duplicate(msg_id):
                continue
            apply_side_effect(body)          # e.g. write to the database
            window.mark_consumed(msg_id)     # only after the side effect succeeded
        commit_offsets(...)                  # only after the marks returned

What it guarantees: an id passed to :meth:`DedupWindow.mark_consumed` is reported as a
duplicate by every later check, in this process and after a restart (the mark is on disk
before the call returns), as long as it is among the ``capacity`` most recently marked ids.

Its limits:

* The window is bounded. Once ``capacity`` newer ids have been marked, the oldest id is
  forgotten and passes again. Choose ``capacity`` larger than the number of messages that
  can be consumed between a message's first delivery and its last possible redelivery
  (for example the messages consumed during the longest retry or rebalance delay).
* Mark after the side effect succeeded, never before: an id marked before a failed side
  effect is skipped on redelivery and its effect is lost.
* A crash between the side effect and the mark is not covered: the message is redelivered,
  its id is not in the window, and the side effect runs a second time. Only a side effect
  that records the id in the same transaction (or is idempotent itself) closes that gap.
  A crash after the mark but before the offset commit is covered: the redelivered message
  is recognised and skipped (and should then be acknowledged again).
* The id identifies a send, not a business event: a message the application sends twice
  (two calls to ``send``) has two ids. Deduplicate such messages on a business key instead.
* One window per file: several processes appending to the same journal are not supported.

Persistence: the journal ``path`` is a UTF-8 text file with one id per line, oldest first.
Each :meth:`~DedupWindow.mark_consumed` call appends its ids with one write (and an
``fsync`` unless ``fsync=False``). When the journal would grow beyond ``2 * capacity``
lines, the window is rewritten instead (compaction): to ``path + ".tmp"``, fsynced, renamed
over ``path``, and the directory fsynced, so the journal is complete at every instant.
Opening tolerates a torn last line and unreadable lines: they are skipped with a warning.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from rmq_spark.client.push.listener import ConsumeContext, ConsumeStatus
from rmq_spark.durable_json import fsync_dir
from rmq_spark.errors import InvalidArgumentError, RocketliteError, StoreError

if TYPE_CHECKING:
    from rmq_spark.client.push.message import ReceivedMessage

__all__ = ["DedupWindow", "deduplicating"]

log = logging.getLogger("rmq_spark.client")

TMP_SUFFIX = ".tmp"


class DedupWindow:
    """The ``capacity`` most recently consumed message ids, optionally kept in a journal file.

    ``path`` is the journal file (its parent directories are created), or None to keep the
    window in memory only (it is then lost when the process ends). An existing journal is
    loaded on open. ``capacity`` (at least 1) is the number of ids remembered; marking more
    forgets the least recently marked ones. With ``fsync=False`` every mark is written to the
    operating system before :meth:`mark_consumed` returns (it survives a crash of the
    process) but not forced to disk (a power loss can lose the latest marks); compaction
    always fsyncs, because a lost rewrite could lose the whole window.

    Keys are non-empty strings without ``"\\n"`` and ``"\\r"``, normally the 32-character
    hexadecimal ``UNIQ_KEY`` of a message. All methods are thread-safe.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None,
        capacity: int = 100_000,
        *,
        fsync: bool = True,
    ) -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise InvalidArgumentError(f"capacity must be an int of at least 1, got {capacity!r}")
        self._capacity = capacity
        self._fsync = fsync
        self._lock = threading.Lock()
        self._window: OrderedDict[str, None] = OrderedDict()
        self._closed = False
        self._path: Path | None = None if path is None else Path(path)
        self._fd: int | None = None
        # Complete lines in the journal file; compaction starts once it would pass 2*capacity.
        self._journal_lines = 0
        # Set when an append failed: the journal may end in a partial line, so the next mark
        # rewrites it from memory instead of appending after the fragment.
        self._rewrite_needed = False
        if self._path is not None:
            self._open_journal(self._path)

    # -- checks --------------------------------------------------------------------------

    def __contains__(self, key: str) -> bool:
        """True when ``key`` is in the window, i.e. it was consumed recently."""
        _check_key(key)
        with self._lock:
            self._check_open()
            return key in self._window

    def __len__(self) -> int:
        """The number of ids in the window (at most ``capacity``)."""
        with self._lock:
            self._check_open()
            return len(self._window)

    def is_duplicate(self, key: str) -> bool:
        """True when ``key`` is in the window (the same as ``key in window``)."""
        return key in self

    def filter_new(self, keys: Iterable[str]) -> list[bool]:
        """For each key, True when it is not yet consumed and should be processed.

        A key that occurs more than once in ``keys`` is True (at most) at its first
        occurrence and False at the later ones. Nothing is marked: call
        :meth:`mark_consumed` after processing.
        """
        batch = _check_keys(keys)
        with self._lock:
            self._check_open()
            seen: set[str] = set()
            answers = []
            for key in batch:
                answers.append(key not in self._window and key not in seen)
                seen.add(key)
            return answers

    # -- updates -------------------------------------------------------------------------

    def mark_consumed(self, keys: str | Iterable[str]) -> None:
        """Add ``keys`` (one key, or an iterable of keys) to the window as the newest ids.

        A key already in the window moves to the newest position. Beyond ``capacity`` the
        oldest ids are forgotten. With a journal, the keys are written (and fsynced unless
        ``fsync=False``) before this returns. All keys are validated first: on an invalid
        key nothing is marked. When writing fails, the error propagates and none of the keys
        count as marked in this process (some may have reached the file).
        """
        if isinstance(keys, str):
            _check_key(keys)
            batch = [keys]
        else:
            batch = _check_keys(keys)
        with self._lock:
            self._check_open()
            if not batch:
                return
            if self._path is None:
                _apply(self._window, batch, self._capacity)
                return
            if self._rewrite_needed or self._journal_lines + len(batch) > 2 * self._capacity:
                # Rewriting the whole window is one atomic step, so the new keys go into it
                # rather than being appended to a journal about to be replaced.
                window = OrderedDict(self._window)
                _apply(window, batch, self._capacity)
                self._compact(window)
                self._window = window
                return
            self._append(batch)
            _apply(self._window, batch, self._capacity)

    def flush(self) -> None:
        """Compact the journal now: rewrite it to hold exactly the current window.

        Does nothing in memory-only mode. Marks are already durable without this; it only
        shrinks the file (for example before copying it).
        """
        with self._lock:
            self._check_open()
            if self._path is not None:
                self._compact(self._window)

    def close(self) -> None:
        """Close the journal. Idempotent; every other method raises afterwards."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._close_fd()

    def __enter__(self) -> DedupWindow:
        with self._lock:
            self._check_open()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        where = "memory" if self._path is None else str(self._path)
        state = "closed" if self._closed else f"{len(self._window)} ids"
        return f"DedupWindow({where}, capacity={self._capacity}, {state})"

    # -- internals (called with the lock held) ----------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            where = "in memory" if self._path is None else f"on {self._path}"
            raise RocketliteError(
                f"the DedupWindow {where} was closed; open a new DedupWindow to use it again"
            )

    def _open_journal(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        # A leftover temp file is a compaction that did not reach its rename: the journal
        # still holds everything, so the temp file is just dropped.
        with contextlib.suppress(FileNotFoundError):
            os.unlink(_tmp_path(path))
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            data = b""
        except OSError as exc:
            raise StoreError(
                f"cannot read the dedup journal {path}: {exc}; fix its permissions or pass "
                "another path"
            ) from exc
        keys, lines, skipped = _parse_journal(data)
        _apply(self._window, keys, self._capacity)
        self._journal_lines = lines
        if skipped:
            log.warning(
                "dedup journal %s: skipped %d unreadable line(s) (a torn last line or bytes "
                "that are not a valid id); kept the %d newest readable id(s)",
                path,
                skipped,
                len(self._window),
            )
        if skipped or lines > 2 * self._capacity:
            # Rewrite now: appending after a torn line would glue the next id onto it.
            self._compact(self._window)
        else:
            self._reopen_fd()

    def _reopen_fd(self) -> None:
        assert self._path is not None
        self._close_fd()
        self._fd = os.open(self._path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def _close_fd(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)

    def _append(self, batch: list[str]) -> None:
        data = "".join(key + "\n" for key in batch).encode("utf-8")
        try:
            if self._fd is None:
                self._reopen_fd()
            assert self._fd is not None
            view = memoryview(data)
            while view:
                written = os.write(self._fd, view)
                view = view[written:]
            if self._fsync:
                os.fsync(self._fd)
        except BaseException:
            self._rewrite_needed = True
            raise
        self._journal_lines += len(batch)

    def _compact(self, window: OrderedDict[str, None]) -> None:
        assert self._path is not None
        path = self._path
        tmp = _tmp_path(path)
        data = "".join(key + "\n" for key in window).encode("utf-8")
        self._rewrite_needed = True  # until the new file is in place and open
        # Closed before the rename: Windows cannot replace a file that is open.
        self._close_fd()
        try:
            with open(tmp, "wb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        fsync_dir(path.parent)
        self._journal_lines = len(window)
        self._reopen_fd()
        self._rewrite_needed = False


def _tmp_path(path: Path) -> Path:
    return Path(os.fspath(path) + TMP_SUFFIX)


def _apply(window: OrderedDict[str, None], keys: Iterable[str], capacity: int) -> None:
    """Mark ``keys`` in order as newest in ``window``, evicting the oldest beyond capacity."""
    for key in keys:
        window[key] = None
        window.move_to_end(key)
        while len(window) > capacity:
            window.popitem(last=False)


def _parse_journal(data: bytes) -> tuple[list[str], int, int]:
    """The valid keys of a journal in file order, its complete line count, and the number
    of lines skipped (a torn last line included)."""
    lines = data.split(b"\n")
    torn = lines.pop()  # what follows the last newline: empty unless the last line is torn
    skipped = 1 if torn else 0
    keys = []
    for raw in lines:
        try:
            key = raw.decode("utf-8")
        except UnicodeDecodeError:
            skipped += 1
            continue
        if _key_problem(key) is None:
            keys.append(key)
        else:
            skipped += 1
    return keys, len(lines), skipped


def _key_problem(key: object) -> str | None:
    """Why ``key`` is not a valid id, or None when it is."""
    if not isinstance(key, str):
        return f"is a {type(key).__name__}, not a str"
    if not key:
        return "is empty"
    if "\n" in key or "\r" in key:
        return "contains a line break"
    try:
        key.encode("utf-8")
    except UnicodeEncodeError:
        return "cannot be encoded as UTF-8 (it holds a lone surrogate)"
    return None


def _check_key(key: object) -> None:
    problem = _key_problem(key)
    if problem is not None:
        raise InvalidArgumentError(
            f"message id {key!r} {problem}; an id must be a non-empty str without '\\n' and "
            "'\\r' (normally the 32-character hex UNIQ_KEY of the message)"
        )


def _check_keys(keys: Iterable[str]) -> list[str]:
    """``keys`` as a list, every one validated; rejects a lone str/bytes passed as a batch."""
    if isinstance(keys, bytes | bytearray | memoryview):
        raise InvalidArgumentError(
            f"message ids must be str, got {type(keys).__name__} {bytes(keys)[:40]!r}; "
            "decode them first"
        )
    if isinstance(keys, str):
        raise InvalidArgumentError(
            f"expected an iterable of message ids, got the single str {keys!r}; wrap it in a list"
        )
    if not isinstance(keys, Iterable):
        _check_key(keys)  # raises, naming the value
    batch = list(keys)
    for key in batch:
        _check_key(key)
    return batch


def deduplicating(
    listener: Callable[[Sequence[ReceivedMessage], ConsumeContext], ConsumeStatus],
    window: DedupWindow,
) -> Callable[[Sequence[ReceivedMessage], ConsumeContext], ConsumeStatus]:
    """Wrap a concurrent push-consumer listener so it sees each ``msg_id`` once.

    Messages whose id is in ``window`` are acknowledged without calling ``listener``; the
    ids of the messages ``listener`` acknowledges (all on CONSUME_SUCCESS, up to its
    ``ack_index`` otherwise) are marked after it returns. Failed messages keep the
    consumer's retry path: the wrapper maps the listener's ``ack_index`` back onto the
    whole batch.

    >>> window = DedupWindow("state/orders.dedup")                        # doctest: +SKIP
    >>> consumer.register_listener(deduplicating(apply_orders, window))   # doctest: +SKIP
    """

    def wrapped(messages: Sequence[ReceivedMessage], context: ConsumeContext) -> ConsumeStatus:
        fresh = window.filter_new([m.msg_id for m in messages])
        new_positions = [i for i, is_new in enumerate(fresh) if is_new]
        if not new_positions:
            return ConsumeStatus.CONSUME_SUCCESS
        new_messages = [messages[i] for i in new_positions]
        inner = ConsumeContext(context.message_queue)
        status = listener(new_messages, inner)
        last = len(new_messages) - 1
        if status is ConsumeStatus.CONSUME_SUCCESS:
            acked = last if inner.ack_index is None else min(inner.ack_index, last)
        else:
            acked = -1 if inner.ack_index is None else min(inner.ack_index, last)
        window.mark_consumed([m.msg_id for m in new_messages[: acked + 1]])
        context.delay_level_when_next_consume = inner.delay_level_when_next_consume
        if acked == last:
            return ConsumeStatus.CONSUME_SUCCESS
        context.ack_index = new_positions[acked + 1] - 1  # everything before the first failure
        return ConsumeStatus.RECONSUME_LATER

    return wrapped
