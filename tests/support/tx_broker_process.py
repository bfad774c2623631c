"""A broker process for the transaction restart tests.

Run as ``python -m tests.support.tx_broker_process STORE_DIR``. It serves a broker on the
store (clean shutdown on SIGTERM, as ``python -m rmq_spark.broker`` does), then through its
``TransactionService`` prepares four transactions on topic ``TxOrders``: ``pending-1``
(left pending), ``committed-1`` (committed), ``rolled-back-1`` (rolled back) and
``pending-2`` (left pending, with its own one-hour check delay), and prints ``DONE``. It then
serves until it is stopped (SIGTERM) or killed (SIGKILL).
"""

from __future__ import annotations

import sys
import time

from rmq_spark.broker import BrokerConfig
from rmq_spark.broker.server import serve
from rmq_spark.codec.properties import encode_properties
from tests.support.broker_harness import TEST_STORE_OPTIONS

TOPIC = "TxOrders"


def run_transactions(server) -> None:
    broker = server.broker
    if broker.store.topics.find(TOPIC) is None:
        broker.store.topics.create(TOPIC, 2)
    tx = broker.transactions
    now = time.time_ns() // 1_000_000

    def prepare(txid: str, queue_id: int, check_after_ms: int | None = None) -> None:
        tx.prepare(
            TOPIC,
            queue_id,
            f"body of {txid}".encode(),
            encode_properties({"order": txid}),
            "TagT",
            transaction_id=txid,
            born_host="127.0.0.1:5555",
            born_timestamp_ms=now,
            check_after_ms=check_after_ms,
        )

    prepare("pending-1", 0)
    prepare("committed-1", 1)
    prepare("rolled-back-1", 0)
    prepare("pending-2", 1, check_after_ms=3_600_000)
    assert tx.end("committed-1", True, topic=TOPIC)
    assert tx.end("rolled-back-1", False)
    print("DONE", flush=True)


def main() -> None:
    config = BrokerConfig(
        store_dir=sys.argv[1], port=0, name="broker-tx", store_options=dict(TEST_STORE_OPTIONS)
    )
    serve(config, on_started=run_transactions)


if __name__ == "__main__":
    main()
