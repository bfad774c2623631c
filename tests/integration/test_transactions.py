"""TransactionService on real stores: half messages, commit/rollback, checks, restarts.

Most tests build a ``Broker`` (store + services, no server) on a temp directory; the restart
tests run a real broker process (``tests/support/tx_broker_process.py``) and stop or kill it.
"""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest

from rmq_spark.broker import BrokerConfig
from rmq_spark.broker.core.broker import Broker
from rmq_spark.broker.transactions import state as ts
from rmq_spark.codec import record as rec
from rmq_spark.codec.properties import decode_properties, encode_properties
from rmq_spark.errors import (
    AlreadyExistsError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
)
from tests.support import scripts, tx_broker_process
from tests.support.broker_harness import TEST_STORE_OPTIONS

TOPIC = "Orders"


def open_broker(store_dir: Path, **kw) -> Broker:
    config = BrokerConfig(store_dir=store_dir, port=0, store_options=dict(TEST_STORE_OPTIONS))
    broker = Broker(config, 10911)
    if kw:
        broker.transactions.close()
        from rmq_spark.broker.transactions.service import TransactionService

        broker.transactions = TransactionService(broker.writes, **kw)
    if broker.store.topics.find(TOPIC) is None:
        broker.store.topics.create(TOPIC, 2)
    return broker


@pytest.fixture
def broker(tmp_path):
    b = open_broker(tmp_path / "store")
    yield b
    b.close()


def prepare(broker: Broker, txid: str, queue_id: int = 1, **kw):
    return broker.transactions.prepare(
        TOPIC,
        queue_id,
        f"body-{txid}".encode(),
        encode_properties({"k": "v"}),
        "TagA",
        transaction_id=txid,
        born_host="10.0.0.1:4000",
        born_timestamp_ms=1_700_000_000_000,
        **kw,
    )


def read_all(broker: Broker, topic: str, queue_id: int) -> list[rec.Record]:
    if broker.store.topics.find(topic) is None:
        return []
    got = broker.store.get_messages(topic, queue_id, 0, max_count=1000)
    return list(rec.iter_records(got.data)) if got.data else []


def delivered(broker: Broker, topic: str = TOPIC) -> list[str]:
    """UNIQ_KEYs readable from every queue of the topic."""
    return [
        decode_properties(r.properties)["UNIQ_KEY"]
        for q in range(2)
        for r in read_all(broker, topic, q)
    ]


def test_prepare_stores_an_invisible_half_message(broker):
    result = prepare(broker, "T1")
    assert delivered(broker) == []
    [half] = read_all(broker, ts.HALF_TOPIC, 0)
    assert half.physical_offset == int(result.physical_offsets[0])
    assert rec.transaction_type(half.sysflag) == rec.TRANSACTION_PREPARED_TYPE
    fields = decode_properties(half.properties)
    assert fields["REAL_TOPIC"] == TOPIC and fields["REAL_QID"] == "1"
    assert fields["TRAN_MSG"] == "true" and fields["UNIQ_KEY"] == "T1"
    assert broker.transactions.status("T1") == ts.PENDING


def test_commit_delivers_once_with_properties(broker):
    result = prepare(broker, "T1")
    assert broker.transactions.end("T1", True, topic=TOPIC) is True
    [msg] = read_all(broker, TOPIC, 1)
    assert msg.body == b"body-T1"
    assert rec.transaction_type(msg.sysflag) == rec.TRANSACTION_COMMIT_TYPE
    assert msg.prepared_tx_offset == int(result.physical_offsets[0])
    assert msg.born_host == "10.0.0.1:4000" and msg.born_timestamp == 1_700_000_000_000
    assert decode_properties(msg.properties) == {
        "k": "v",
        "UNIQ_KEY": "T1",
        "TAGS": "TagA",
        "TRAN_MSG": "true",
    }
    # Ending it again, either way, writes nothing and says so.
    assert broker.transactions.end("T1", True) is False
    assert broker.transactions.end("T1", False) is False
    assert delivered(broker) == ["T1"]
    assert broker.transactions.status("T1") == ts.COMMIT


def test_rollback_is_never_delivered(broker):
    prepare(broker, "T1")
    assert broker.transactions.end("T1", False) is True
    assert broker.transactions.end("T1", True) is False  # commit after rollback
    assert delivered(broker) == []
    assert broker.transactions.status("T1") == ts.ROLLBACK
    assert broker.transactions.pending() == {}


def test_unknown_or_mismatched_ids_are_clear_errors(broker):
    with pytest.raises(NotFoundError, match="no pending transaction 'nope'"):
        broker.transactions.end("nope", True)
    prepare(broker, "T1")
    with pytest.raises(InvalidArgumentError, match="belongs to topic 'Orders'"):
        broker.transactions.end("T1", True, topic="Other")
    with pytest.raises(AlreadyExistsError):
        prepare(broker, "T1")
    with pytest.raises(InvalidArgumentError, match="out of range"):
        prepare(broker, "T2", queue_id=7)
    assert broker.transactions.status("T1") == ts.PENDING


def test_due_checks_timing_and_discard(tmp_path):
    broker = open_broker(tmp_path / "s", check_interval_ms=1_000, check_after_ms=500, max_checks=2)
    try:
        tx = broker.transactions
        t0 = prepare(broker, "A").store_timestamp
        prepare(broker, "B", check_after_ms=10_000)
        assert tx.due_checks(t0 + 499) == []
        [(txid, record)] = tx.due_checks(t0 + 600)
        assert txid == "A" and record.body == b"body-A"
        assert decode_properties(record.properties)["TRANSACTION_CHECK_TIMES"] == "1"
        assert tx.due_checks(t0 + 1_599) == []  # one check per interval
        checks = tx.due_checks(t0 + 1_600)
        assert [t for t, _ in checks] == ["A"]
        assert decode_properties(checks[0][1].properties)["TRANSACTION_CHECK_TIMES"] == "2"
        # Past max_checks: discarded, never delivered; B's own delay has now passed too.
        assert [t for t, _ in tx.due_checks(t0 + 11_000)] == ["B"]
        assert tx.status("A") == ts.DISCARD
        assert [r.body for r in read_all(broker, ts.CHECK_MAX_TOPIC, 0)] == [b"body-A"]
        assert tx.end("A", True) is False
        assert delivered(broker) == []
    finally:
        broker.close()
    # Check counts survive a restart.
    broker = open_broker(tmp_path / "s", check_interval_ms=1_000, check_after_ms=500, max_checks=2)
    try:
        assert broker.transactions.pending()["B"].checks == 1
        assert broker.transactions.status("A") == ts.DISCARD
    finally:
        broker.close()


def test_commit_whose_copy_was_not_written_is_written_at_restart(tmp_path, monkeypatch):
    store_dir = tmp_path / "s"
    broker = open_broker(store_dir)
    prepare(broker, "T1")
    prepare(broker, "T2")
    assert broker.transactions.end("T2", True)

    def fail(*args, **kwargs):
        raise OSError("simulated stop between the op and the copy")

    with monkeypatch.context() as m:
        m.setattr(broker.writes, "put_messages", fail)
        with pytest.raises(OSError):
            broker.transactions.end("T1", True)
    assert broker.transactions.status("T1") == ts.COMMIT
    assert delivered(broker) == ["T2"]
    broker.close()
    # Without the verified mark (as after SIGKILL before it was saved) every commit is checked.
    (store_dir / "config" / "transactionState.json").unlink()
    for _ in range(2):
        broker = open_broker(store_dir)
        try:
            assert sorted(delivered(broker)) == ["T1", "T2"]
            assert broker.transactions.end("T1", True) is False
        finally:
            broker.close()


def test_failed_copy_is_retried_by_a_repeated_commit(broker, monkeypatch):
    prepare(broker, "T1")
    with monkeypatch.context() as m:
        m.setattr(
            broker.writes, "put_messages", lambda *a, **k: (_ for _ in ()).throw(OSError("x"))
        )
        with pytest.raises(OSError):
            broker.transactions.end("T1", True)
    assert broker.transactions.end("T1", False) is False  # already committed
    assert broker.transactions.end("T1", True) is True
    assert broker.transactions.end("T1", True) is False
    assert delivered(broker) == ["T1"]


@pytest.mark.parametrize("how", ["sigkill", "sigterm"])
def test_restart_keeps_pending_and_never_redelivers(tmp_path, how):
    store_dir = tmp_path / "store"
    process = subprocess.Popen(
        scripts.command("tx_broker_process", str(store_dir)),
        stdout=subprocess.PIPE,
        env=scripts.env(),
        stderr=open(tmp_path / "broker.log", "wb"),  # noqa: SIM115
    )
    try:
        line = process.stdout.readline().decode().strip()
        assert line == "DONE", (tmp_path / "broker.log").read_text()
    finally:
        process.send_signal(signal.SIGKILL if how == "sigkill" else signal.SIGTERM)
        code = process.wait(30)
        process.stdout.close()
    assert code == (-signal.SIGKILL if how == "sigkill" else 0)

    for _ in range(2):  # a second restart must not change anything either
        broker = open_broker(store_dir)
        try:
            topic = tx_broker_process.TOPIC
            tx = broker.transactions
            assert sorted(tx.pending()) == ["pending-1", "pending-2"]
            assert tx.pending()["pending-2"].check_after_ms == 3_600_000
            assert delivered(broker, topic) == ["committed-1"]
            assert tx.end("committed-1", True) is False
            assert tx.end("rolled-back-1", True) is False
            assert tx.status("rolled-back-1") == ts.ROLLBACK
            assert delivered(broker, topic) == ["committed-1"]
        finally:
            broker.close()

    broker = open_broker(store_dir)
    try:
        assert broker.transactions.end("pending-1", True, topic=tx_broker_process.TOPIC)
        assert broker.transactions.end("pending-2", False)
        assert sorted(delivered(broker, tx_broker_process.TOPIC)) == ["committed-1", "pending-1"]
    finally:
        broker.close()
    broker = open_broker(store_dir)
    try:
        assert broker.transactions.pending() == {}
        assert sorted(delivered(broker, tx_broker_process.TOPIC)) == ["committed-1", "pending-1"]
    finally:
        broker.close()


def test_commit_to_an_unwritable_topic_records_nothing(broker):
    prepare(broker, "T1")
    broker.store.topics.update(TOPIC, perm=4)
    with pytest.raises(PermissionDeniedError):
        broker.transactions.end("T1", True)
    assert broker.transactions.status("T1") == ts.PENDING
    broker.store.topics.update(TOPIC, perm=6)
    assert broker.transactions.end("T1", True) is True
    assert delivered(broker) == ["T1"]
