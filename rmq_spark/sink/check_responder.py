"""The live producer of an exactly-once sink's group: answers the brokers' checks of its
half messages (CHECK_TRANSACTION_STATE) from the records in the query's checkpoint.

    python -m rmq_spark.sink.check_responder   # the sink's settings pickled on stdin

The driver starts it (:func:`~rmq_spark.sink.half_commit.ensure_responder`) in a session of
its own, so it outlives a driver that dies: a batch recorded as committed is finished by it
(every recorded row not yet in its queue committed, once), a failed or replaced attempt's
row is rolled back, a row of a batch still being written is left to a later check. One runs
per checkpoint (a file lock); it heartbeats to the brokers the records and the topic's
route name, and ends after ``ROCKETLITE_SINK_RESPONDER_IDLE_S`` seconds (default 900) with
no check, no new record and nothing left to finish.
"""

from __future__ import annotations

import fcntl
import logging
import os
import pickle
import sys
import threading
import time
from pathlib import Path

from rmq_spark.client.remoting.client import RemotingClient
from rmq_spark.client.remoting.transactions import ROLLBACK, CheckListener, CheckRequest
from rmq_spark.errors import RocketliteError
from rmq_spark.sink import half_record as hr
from rmq_spark.sink.half_commit import finish
from rmq_spark.sink.options import SinkOptions
from rmq_spark.sink.send import producer_group

log = logging.getLogger("rmq_spark.sink.responder")

DEFAULT_IDLE_S = 900.0
POLL_S = 2.0


class Responder:
    def __init__(self, options: SinkOptions, sink_id: str, state: hr.SinkState) -> None:
        assert options.name_server is not None
        self.options = options
        self.sink_id = sink_id
        self.state = state
        self.group = producer_group(sink_id)
        self.client = RemotingClient(options.name_server, options.client_config())
        self._lock = threading.Lock()  # the state's cache
        self.listener = CheckListener(options.client_config(), self.group, self.answer)

    def answer(self, check: CheckRequest) -> int | None:
        text = check.properties.get(hr.BATCH_PROPERTY)
        batch = int(text) if text is not None and text.isdigit() else None
        with self._lock:
            views = self.state.views()
        decision = hr.check_answer(views, batch, check.half.key)
        log.debug("check of %s (batch %s): %s", check.half.key, batch, decision)
        if decision == hr.UNKNOW:
            return None
        if decision == hr.ROLLBACK:
            return ROLLBACK
        assert batch is not None
        with self.state.ending():
            try:
                record = self._finish_unended(batch)
            except RocketliteError as exc:
                log.warning("finishing batch %d failed (%s); the next check retries", batch, exc)
                return None
        # the recorded copy is committed now. The broker asked about a copy it wrote while
        # checking (RocketMQ does so on every check): roll that copy back. Or about the
        # recorded one (rocketlite's brokers check in place): nothing more to send.
        recorded = (
            next((h for h in record.halves if h.key == check.half.key), None) if record else None
        )
        if recorded is not None and recorded.commit_log_offset == check.half.commit_log_offset:
            return None
        return ROLLBACK

    def _finish_unended(self, batch: int) -> hr.BatchRecord | None:
        """``batch``'s record, after committing its rows if it was not ended yet (its
        driver died between recording and ending it). The caller holds
        ``state.ending()``; RocketliteError when the commit failed."""
        with self._lock:
            record = self.state.load(batch)
        if record is not None and not record.ended:
            finish(self.client, self.group, record, self.state)
        return record

    def addresses(self) -> set[str]:
        found: set[str] = set()
        with self._lock:
            for batch in self.state.batches()[-hr.KEEP_ENDED :]:
                record = self.state.load(batch)
                if record is not None:
                    found |= set(record.brokers.values())
        if self.options.topic:
            try:
                found |= set(self.client.route(self.options.topic).addresses.values())
            except RocketliteError as exc:
                log.info("route of %s: %s", self.options.topic, exc)
        return found

    def run(self, idle_s: float) -> None:
        last_active = time.time()
        while True:
            self.listener.watch(self.addresses())
            with self._lock:
                unended = self.state.unended()
                newest = max(
                    (p.stat().st_mtime for p in self.state.path.glob("batch-*.json")),
                    default=0.0,
                )
            last_active = max(last_active, newest, self.listener.last_check_ms / 1000)
            for batch in unended:
                # a record the driver's commit left unended (the commit holds the lock from
                # recording to ending): the driver died; finish the batch now
                with self.state.ending():
                    try:
                        self._finish_unended(batch)
                    except RocketliteError as exc:
                        log.warning("finishing batch %d failed: %s", batch, exc)
            if not unended and time.time() - last_active > idle_s:
                log.info("idle for %.0f s: stopping", idle_s)
                return
            if not self.state.path.exists():
                return
            time.sleep(POLL_S)

    def close(self) -> None:
        self.listener.close()
        self.client.close()


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    options, sink_id, path = pickle.loads(sys.stdin.buffer.read())
    state = hr.SinkState(Path(path))
    handle = open(state.path / "responder.lock", "a+b")  # noqa: SIM115 (held until exit)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return 0  # another one runs
    (state.path / "responder.pid").write_text(f"{os.getpid()}\n")
    idle_s = float(os.environ.get("ROCKETLITE_SINK_RESPONDER_IDLE_S", DEFAULT_IDLE_S))
    responder = Responder(options, sink_id, state)
    log.info("answering checks of producer group %s (sink %s)", responder.group, sink_id)
    try:
        responder.run(idle_s)
    finally:
        responder.close()
        (state.path / "responder.pid").unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
