"""Opening a store directory: its files opened and the commit log recovered, in order.

:func:`open_recovered` checks and records the file sizes, opens the topic and offset
tables, the commit log, the consume queues and the checkpoints, runs recovery (see
:mod:`rmq_spark.store.recovery`) and opens the message index. It hands back what it opened
as an :class:`OpenedStore`; :class:`~rmq_spark.store.message_store.MessageStore` then
marks the store open (the ``abort`` file), writes a checkpoint and starts its threads.
A write the disk has no room for fails the open with an error saying what was being done
(:func:`no_space_at_open`).

>>> last_store_timestamp(None, RocketMQCheckpoint(1_500, 1_400, 1_000))
1500
"""

from __future__ import annotations

import logging
import resource
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from rmq_spark.offsets.broker_table import ConsumerOffsetTable
from rmq_spark.store import geometry
from rmq_spark.store.checkpoint import (
    Checkpoint,
    CheckpointFile,
    RocketMQCheckpoint,
    RocketMQCheckpointFile,
    open_checkpoints,
    rocketmq_recovery_start,
)
from rmq_spark.store.commitlog import CommitLog
from rmq_spark.store.config import StoreConfig
from rmq_spark.store.consume_queue import ConsumeQueue
from rmq_spark.store.failure import StoreHealth, is_no_space
from rmq_spark.store.index_builder import IndexBuilder, open_index
from rmq_spark.store.mapped_file import OpenFiles, open_files_limit
from rmq_spark.store.recovery import RecoveryReport, recover
from rmq_spark.store.topics import TopicTable

log = logging.getLogger("rmq_spark.store")


@dataclass
class OpenedStore:
    """The parts of a store directory, opened and recovered."""

    topics: TopicTable
    offsets: ConsumerOffsetTable
    commitlog: CommitLog
    checkpoint: CheckpointFile
    rocketmq_checkpoint: RocketMQCheckpointFile
    recovery: RecoveryReport
    #: the newest store time the checkpoints recorded: no append is stamped earlier
    last_store_ts: int
    #: None when the store keeps no message index
    index_builder: IndexBuilder | None


def open_recovered(
    cfg: StoreConfig,
    health: StoreHealth,
    queue: Callable[[str, int], ConsumeQueue],
    queues: Callable[[], list[ConsumeQueue]],
    files: OpenFiles,
) -> OpenedStore:
    """Open the parts of the store in ``cfg.store_dir`` (whose lock the caller holds) and
    recover it: from the checkpoint after a clean stop, from the last segments after a
    crash (an ``abort`` file left behind). ``queue(topic, queue_id)`` gets or creates a
    consume queue of the caller's; ``queues()`` lists those it has."""
    root = Path(cfg.store_dir)
    abnormal = (root / "abort").exists()
    record_geometry(cfg)  # before any file is opened
    topics = TopicTable.open(cfg.config_dir)
    offsets = ConsumerOffsetTable.open(
        cfg.config_dir,
        force_empty=cfg.force_empty_offsets,
        persist_interval_ms=cfg.offsets_persist_interval_ms,
        sync_commits=cfg.flush_mode == "SYNC",
    )
    commitlog = CommitLog(cfg.commitlog_dir, cfg.commitlog_segment_bytes, files)
    for topic, queue_id in existing_queues(cfg.consumequeue_dir):
        queue(topic, queue_id)
    note_open_files(files, commitlog, queues())
    with no_space_at_open(health, "creating the checkpoint file"):
        checkpoint, rocketmq_checkpoint = open_checkpoints(root)
    last, rocketmq_last = checkpoint.last, rocketmq_checkpoint.last
    if abnormal:
        log.warning("store %s was not shut down cleanly; recovering from the commit log", root)
    safe_offset = last.safe_offset if last else rocketmq_scan_start(commitlog, rocketmq_last)
    with no_space_at_open(health, "recovery (it rebuilds consume queues from the commit log)"):
        report = recover(
            commitlog,
            queue,
            queues(),
            safe_offset,
            abnormal=abnormal or last is None,
            schedule_delays_ms=cfg.schedule_delays_ms,
        )
        for cq in queues():
            cq.drop_below_physical(commitlog.min_offset)
    last_store_ts = last_store_timestamp(last, rocketmq_last)
    with no_space_at_open(health, "opening the message index"):
        builder = open_message_index(
            cfg,
            commitlog,
            rocketmq_last,
            abnormal=abnormal,
            last_store_ts=last_store_ts,
            files=files,
        )
    return OpenedStore(
        topics, offsets, commitlog, checkpoint, rocketmq_checkpoint, report, last_store_ts, builder
    )


def open_files_budget(cfg: StoreConfig) -> int:
    """How many descriptors the store's files may hold at once: the configured number, or
    what the process's soft file limit leaves (see :func:`open_files_limit`)."""
    if cfg.max_open_descriptors is not None:
        return cfg.max_open_descriptors
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return open_files_limit(soft if soft != resource.RLIM_INFINITY else 1 << 20)


def note_open_files(files: OpenFiles, commitlog: CommitLog, queues: list[ConsumeQueue]) -> None:
    """Say when the store has more files than its descriptor budget may keep open at once:
    it works, but files close and open again as reads and writes move between them."""
    count = len(commitlog.segments) + sum(len(cq.files) for cq in queues)
    if files.limit is not None and count > files.limit:
        log.info(
            "the store has %d files; at most %d descriptors are kept open for them (one "
            "for most files, two for one being both written and read, under a file limit "
            "of %d): the least recently used close and open again on demand. Raise the "
            "limit (ulimit -n) to keep them all open.",
            count,
            files.limit,
            resource.getrlimit(resource.RLIMIT_NOFILE)[0],
        )


def store_health(cfg: StoreConfig) -> StoreHealth:
    """The store's health (disk full, fail-stop; see :mod:`rmq_spark.store.failure`): it
    needs room for one more commit-log segment and one more consume-queue file."""
    cq_file_bytes = cfg.consumequeue_entries_per_file * 20
    return StoreHealth(
        Path(cfg.store_dir),
        needed_bytes=cfg.commitlog_segment_bytes + cq_file_bytes,
        needed_what=(
            f"one commit-log segment of {cfg.commitlog_segment_bytes:,} bytes and one "
            f"consume-queue file of {cq_file_bytes:,} bytes"
        ),
        max_used_ratio=cfg.disk_max_used_ratio,
    )


@contextmanager
def no_space_at_open(health: StoreHealth, doing: str) -> Iterator[None]:
    """Turn a full disk met while ``doing`` a step of opening into the store's one-line
    error saying so (see :meth:`~rmq_spark.store.failure.StoreHealth.no_space_at_open`);
    other errors pass as they are."""
    try:
        yield
    except OSError as exc:
        if not is_no_space(exc):
            raise
        raise health.no_space_at_open(exc, doing) from exc


def record_geometry(cfg: StoreConfig) -> None:
    """Refuse a store made with other file sizes than ``cfg``'s (a store opened with other
    sizes reads garbage), and record them when none are. Runs before any file is opened.
    A full disk only postpones the recording to a later start."""
    try:
        geometry.load_or_record(
            cfg.config_dir,
            geometry.Geometry(cfg.commitlog_segment_bytes, cfg.consumequeue_entries_per_file),
            lambda: geometry.sizes_in_files(cfg.commitlog_dir, cfg.consumequeue_dir),
        )
    except OSError as exc:
        if not is_no_space(exc):
            raise
        log.warning("disk full: the store's file sizes are recorded at a later start")


def existing_queues(consumequeue_dir: Path) -> list[tuple[str, int]]:
    """(topic, queue id) of every queue directory under ``consumequeue/``, sorted."""
    if not consumequeue_dir.exists():
        return []
    return [
        (topic_dir.name, int(qdir.name))
        for topic_dir in sorted(consumequeue_dir.iterdir())
        for qdir in sorted(topic_dir.iterdir())
        if qdir.name.isdigit()
    ]


def rocketmq_scan_start(commitlog: CommitLog, cp: RocketMQCheckpoint | None) -> int | None:
    """Where to scan from in a store only Apache RocketMQ wrote (it has no
    ``rocketlite.checkpoint``): RocketMQ's own rule over its checkpoint ``cp``, or None
    (scan the whole commit log) when that file is absent or empty."""
    if cp is None or cp.min_timestamp <= 0:
        return None
    firsts = [
        (seg.start_offset, commitlog.first_store_timestamp(seg)) for seg in commitlog.segments
    ]
    start = rocketmq_recovery_start(firsts, cp)
    if start is not None:
        log.info("recovery starts at %d, from RocketMQ's checkpoint", start)
    return start


def last_store_timestamp(last: Checkpoint | None, rocketmq: RocketMQCheckpoint | None) -> int:
    """The newest store time either checkpoint recorded (0 when neither did): appends never
    stamp an earlier one, even when the clock went back."""
    return max(
        last.physic_msg_timestamp if last else 0,
        rocketmq.physic_msg_timestamp if rocketmq else 0,
    )


def open_message_index(
    cfg: StoreConfig,
    commitlog: CommitLog,
    rocketmq: RocketMQCheckpoint | None,
    *,
    abnormal: bool,
    last_store_ts: int,
    files: OpenFiles,
) -> IndexBuilder | None:
    """The message index's builder (its ``index`` is the index), None when ``cfg`` keeps
    no index. After a crash (``abnormal``) the keys newer than RocketMQ's checkpoint
    ``rocketmq`` records as indexed are built again (see
    :func:`~rmq_spark.store.index_builder.open_index`)."""
    if not cfg.message_index:
        return None
    return open_index(
        cfg,
        commitlog,
        crash_index_ts=(rocketmq.index_msg_timestamp if rocketmq else 0) if abnormal else None,
        last_store_ts=last_store_ts,
        files=files,
    )
