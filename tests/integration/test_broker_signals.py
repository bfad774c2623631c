"""SIGTERM stops a broker process cleanly whenever it comes: whichever thread of the process
the kernel hands it to, and while the broker is still starting. Clean means exit code 0, the
store closed (no crash recovery at the next open) and every acknowledged SYNC send kept."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from rmq_spark.store.config import StoreConfig
from rmq_spark.store.message_store import MessageStore
from rmq_spark.wire.proto_gen.rocketlite.v1 import admin_pb2
from rmq_spark.wire.proto_gen.rocketlite.v1 import messaging_pb2 as m
from tests.support.broker_harness import TEST_STORE_FLAGS, TEST_STORE_OPTIONS, BrokerProcess
from tests.support.eventually import eventually

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/task").is_dir(), reason="needs Linux /proc to find the threads"
)

STOP_S = 10


def blocks_sigterm(pid: int, tid: int) -> bool:
    status = Path(f"/proc/{pid}/task/{tid}/status").read_text()
    blocked = int(next(line for line in status.splitlines() if line.startswith("SigBlk:"))[7:], 16)
    return bool(blocked >> (signal.SIGTERM - 1) & 1)


def another_thread(pid: int) -> int:
    """A thread of process ``pid`` other than its main one that would take a SIGTERM."""
    tids = sorted(int(name) for name in os.listdir(f"/proc/{pid}/task"))
    takers = [tid for tid in tids if tid != pid and not blocks_sigterm(pid, tid)]
    assert takers, f"every thread of {pid} but the main one blocks SIGTERM"
    return takers[0]


def assert_closed_cleanly(broker, code: int) -> None:
    log = broker.log_text()
    assert code == 0, broker.log_tail()
    assert "received SIGTERM" in log and "closed cleanly" in log, broker.log_tail()
    assert "Traceback" not in log, log
    assert not (broker.store_dir / "abort").exists(), "a clean shutdown removes the abort marker"


def test_a_sigterm_taken_by_another_thread_than_the_main_one_stops_the_broker_cleanly(
    broker_factory, connect
):
    # On a busy machine the kernel may give a process's SIGTERM to any of its threads;
    # kill() with a thread's id offers it to that thread first, which makes that happen now.
    broker = broker_factory("broker-s", "--flush", "SYNC")
    stubs = connect(broker.endpoint)
    stubs.admin.CreateTopic(admin_pb2.CreateTopicRequest(topic="T", read_queue_nums=1))
    request = m.SendMessagesRequest(topic="T", queue_id=0, messages=[m.Message(body=b"acked")])
    stubs.messaging.SendMessages(request, timeout=10)

    os.kill(another_thread(broker.process.pid), signal.SIGTERM)
    assert_closed_cleanly(broker, broker.wait_exit(STOP_S))
    with MessageStore.open(StoreConfig(broker.store_dir, **TEST_STORE_OPTIONS)) as store:
        assert store.recovery is not None and not store.recovery.abnormal, store.recovery
        assert store.get_messages("T", 0, 0).count == 1  # the acknowledged send is kept


def test_a_sigterm_while_the_broker_starts_closes_its_store_cleanly(tmp_path):
    broker = BrokerProcess(
        "broker-s", tmp_path / "broker-s", tmp_path / "broker-s.log", [*TEST_STORE_FLAGS]
    )
    try:
        process = broker.start_process("--flush", "SYNC")

        def store_opened() -> bool:
            if process.poll() is not None:
                pytest.fail(f"the broker exited while starting:\n{broker.log_tail()}")
            return " open: commit log " in broker.log_text()

        # polled often: the signal must come while the broker is still starting
        eventually(store_opened, what="the store to open", timeout=30, interval=0.002)
        process.send_signal(signal.SIGTERM)
        assert_closed_cleanly(broker, broker.wait_exit(STOP_S))
    finally:
        broker.clean_up()
