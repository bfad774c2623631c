"""The driver's side of exactly-once writes through ``nameServer`` (Apache RocketMQ, or a
rocketlite broker's remoting port): ending a micro-batch's half messages once.

:func:`end_remoting_batch` records the batch in the checkpoint (decision and coordinates,
:mod:`.half_record`), then commits every half message with END_TRANSACTION, then marks the
record ended. A batch already recorded (a replay after the driver died) commits nothing
new: its own rows are rolled back, and the recorded batch is finished: the rows already in
their queues (found by unique key in each queue from where it ended when the batch was
recorded) are left alone, the rest committed. A process of the sink's producer group
(:mod:`.check_responder`, started here) answers the brokers' checks from the same record.
"""

from __future__ import annotations

import fcntl
import logging
import os
import pickle
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from rmq_spark.client.remoting.client import RemotingClient
from rmq_spark.client.remoting.transactions import COMMIT, ROLLBACK, HalfRef, end_halves
from rmq_spark.errors import RocketliteError
from rmq_spark.sink.half_record import BatchRecord, SinkState, still_to_end
from rmq_spark.sink.options import SinkOptions
from rmq_spark.sink.send import SinkCommit, producer_group
from rmq_spark.structs import MessageQueue

log = logging.getLogger("rmq_spark.sink")

__all__ = ["RemotingBatchEnd", "abort_remoting_batch", "end_remoting_batch", "finish", "scan"]

#: messages asked for per pull when looking for rows already committed
SCAN_PULL = 256


@dataclass(frozen=True)
class RemotingBatchEnd:
    batch_id: int
    replayed: bool
    committed: int
    rolled_back: int


def _halves(messages: Iterable[SinkCommit | None]) -> tuple[list[HalfRef], dict[str, str]]:
    halves: list[HalfRef] = []
    brokers: dict[str, str] = {}
    for message in messages:
        if message is None:
            continue
        halves += message.halves
        brokers.update(message.brokers)
    return halves, brokers


def end_remoting_batch(
    options: SinkOptions,
    sink_id: str,
    batch_id: int,
    messages: Iterable[SinkCommit | None],
    state: SinkState | None,
    *,
    ordered: bool,
) -> RemotingBatchEnd:
    """Commit batch ``batch_id`` of the sink: every half message the tasks' commit messages
    name, once. ``state`` is None for a ``df.write`` job (nothing to replay)."""
    assert options.name_server is not None
    halves, brokers = _halves(messages)
    group = producer_group(sink_id)
    client = RemotingClient(options.name_server, options.client_config())
    try:
        for name, address in brokers.items():
            client.learn_broker(name, address)
        if state is None:
            end_halves(client, group, halves, COMMIT, ordered=ordered)
            return RemotingBatchEnd(batch_id, False, len(halves), 0)
        with state.ending():
            held = state.load(batch_id)
            if held is not None:
                recorded = {h.key for h in held.halves}
                strays = [h for h in halves if h.key not in recorded]
                _roll_back(client, group, strays, sink_id)
                if not held.ended:
                    finish(client, group, held, state)
                return RemotingBatchEnd(batch_id, True, 0, len(strays))
            record = BatchRecord(sink_id, batch_id, halves, brokers, ordered=ordered)
            for topic, broker, queue in sorted({(h.topic, h.broker, h.queue_id) for h in halves}):
                mq = MessageQueue(topic, broker, queue)
                record.queue_ends[(topic, broker, queue)] = client.max_offset(mq)
            state.save(record)  # the decision is durable before any half message ends
            end_halves(client, group, halves, COMMIT, ordered=ordered)
            record.ended = True
            state.save(record)
            state.prune()
        return RemotingBatchEnd(batch_id, False, len(halves), 0)
    finally:
        client.close()


def abort_remoting_batch(
    options: SinkOptions,
    sink_id: str,
    messages: Iterable[SinkCommit | None],
    state: SinkState | None = None,
    batch_id: int = 0,
) -> int:
    """Roll back the half messages of the tasks that finished; those of the others are
    rolled back when a broker asks about them. A batch already recorded as committed (its
    commit failed after the record) keeps its recorded rows: they are finished, by the
    replay or by the check responder. Returns how many were rolled back."""
    assert options.name_server is not None
    halves, brokers = _halves(messages)
    client = RemotingClient(options.name_server, options.client_config())
    try:
        for name, address in brokers.items():
            client.learn_broker(name, address)
        if state is not None:
            with state.ending():
                held = state.load(batch_id)
                recorded = {h.key for h in held.halves} if held is not None else set()
                halves = [h for h in halves if h.key not in recorded]
                _roll_back(client, producer_group(sink_id), halves, sink_id)
        else:
            _roll_back(client, producer_group(sink_id), halves, sink_id)
        return len(halves)
    finally:
        client.close()


def _roll_back(client: RemotingClient, group: str, halves: list[HalfRef], sink_id: str) -> None:
    if not halves:
        return
    try:
        end_halves(client, group, halves, ROLLBACK)
    except RocketliteError as exc:
        # never visible either way: the brokers ask about them later and get a rollback
        log.warning("sink %s: rolling back %d rows failed (%s)", sink_id, len(halves), exc)


def finish(client: RemotingClient, group: str, record: BatchRecord, state: SinkState) -> int:
    """Commit the recorded half messages whose rows are not in their queues yet and mark
    the record ended; returns how many were committed. Call it holding ``state.ending()``."""
    for name, address in record.brokers.items():
        client.learn_broker(name, address)
    visible = scan(client, record)
    todo = still_to_end(record.halves, visible)
    end_halves(client, group, todo, COMMIT, ordered=record.ordered)
    record.ended = True
    state.save(record)
    log.info(
        "sink %s: batch %d finished: %d rows were in their queues, %d committed now",
        record.sink_id,
        record.batch,
        len(record.halves) - len(todo),
        len(todo),
    )
    return len(todo)


def scan(client: RemotingClient, record: BatchRecord) -> set[str]:
    """The unique keys of the record's rows already in their queues: each queue read from
    where it ended when the batch was recorded (the rows of this batch commit after it)."""
    wanted = {h.key for h in record.halves}
    found: set[str] = set()
    for (topic, broker, queue), start in sorted(record.queue_ends.items()):
        mq = MessageQueue(topic, broker, queue)
        end = client.max_offset(mq)
        offset = start
        while offset < end:
            answer = client.pull(mq, offset, max_messages=SCAN_PULL)
            if answer.next_begin_offset <= offset:
                break
            batch = answer.records(["properties"])
            for props in batch.column("properties").to_pylist():
                key = dict(props or ()).get("UNIQ_KEY")
                if key in wanted:
                    found.add(key)
            offset = answer.next_begin_offset
    return found


# -- the process that answers the brokers' checks ---------------------------------------------


def ensure_responder(options: SinkOptions, sink_id: str, state: SinkState) -> int | None:
    """Start the sink's check responder (:mod:`.check_responder`) unless one runs; returns
    the new process's id. It runs apart from Spark's processes (a session of its own), so
    it answers the brokers while the driver is down, and ends when it has been idle."""
    lock_path = state.path / "responder.lock"
    with open(lock_path, "a+b") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return None  # one runs
        fcntl.flock(handle, fcntl.LOCK_UN)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    log_file = open(state.path / "responder.log", "ab")  # noqa: SIM115 (handed to the child)
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", "rmq_spark.sink.check_responder"],
            stdin=subprocess.PIPE,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            close_fds=True,
        )
    finally:
        log_file.close()
    assert process.stdin is not None
    process.stdin.write(pickle.dumps((options, sink_id, str(state.path))))
    process.stdin.close()
    return process.pid


def responder_pid(path: Path) -> int | None:
    """The id of the sink's check responder while one runs (tests stop it with this)."""
    try:
        return int((path / "responder.pid").read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
