"""Orphaned transactions: a half message left pending past its check time is asked about,
as a RocketMQ broker does, to a live producer of its topic, whichever protocol the producer
speaks; the producer's checker answers with its end of the transaction.

Each protocol adds an *asker*: ``ask(transaction_id, half_record, topic) -> bool`` sends the
question to one of its live producers of ``topic`` and says whether it found one (the
RocketMQ 5 service over a Telemetry stream, the remoting protocol with
CHECK_TRANSACTION_STATE on a producer's connection). The checks start with the first
producer that could answer, and each due transaction goes to one asker that has a producer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Callable
from typing import TYPE_CHECKING

from rmq_spark.codec.properties import REAL_TOPIC, decode_properties
from rmq_spark.codec.record import Record

if TYPE_CHECKING:
    from rmq_spark.broker.transactions.service import TransactionService
    from rmq_spark.broker.workers import Workers

log = logging.getLogger("rmq_spark.broker")

#: how often pending transactions are looked at (each has its own check times)
CHECK_LOOP_S = 1.0

Asker = Callable[[str, Record, str], bool]


class TransactionChecks:
    def __init__(self, transactions: TransactionService) -> None:
        self._transactions = transactions
        self._askers: list[Asker] = []
        self._checks: asyncio.Task | None = None

    def add_asker(self, asker: Asker) -> None:
        self._askers.append(asker)

    def start(self, workers: Workers) -> None:
        """Start checking (on the event loop); later calls do nothing."""
        if self._checks is None:
            self._checks = asyncio.get_running_loop().create_task(self._check(workers))

    async def stop(self) -> None:
        """Stop the checks (on the event loop, before the server stops)."""
        if self._checks is not None:
            self._checks.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._checks

    async def _check(self, workers: Workers) -> None:
        while True:
            await asyncio.sleep(CHECK_LOOP_S)
            try:
                due = await workers.run(self._transactions.due_checks)
            except Exception as exc:  # the store failed or is full: try again later
                log.warning("transaction checks skipped: %s", exc)
                continue
            for transaction_id, record in due:
                self._ask(transaction_id, record)

    def _ask(self, transaction_id: str, record: Record) -> None:
        topic = decode_properties(record.properties).get(REAL_TOPIC, record.topic)
        askers = random.sample(self._askers, len(self._askers))
        if not any(ask(transaction_id, record, topic) for ask in askers):
            log.info(
                "transaction %s of topic %s is pending and no producer of it is connected "
                "to be asked",
                transaction_id,
                topic,
            )
