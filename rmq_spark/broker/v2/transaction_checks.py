"""Orphaned transactions: a half message left pending past its check time is asked about,
as a RocketMQ broker does, over the Telemetry stream of a live producer that publishes to
its topic; the producer's checker answers with EndTransaction."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random

from rocketmq.grpc_protocol import service_pb2 as spb

from rmq_spark.broker.core import Broker
from rmq_spark.broker.status import Workers
from rmq_spark.broker.v2 import convert
from rmq_spark.broker.v2.clients import ClientRegistry
from rmq_spark.codec.properties import REAL_TOPIC, decode_properties

log = logging.getLogger("rmq_spark.broker")

#: how often pending transactions are looked at (each has its own check times)
CHECK_LOOP_S = 1.0


class TransactionChecks:
    def __init__(self, broker: Broker, workers: Workers, clients: ClientRegistry) -> None:
        self._broker = broker
        self._workers = workers
        self._clients = clients
        self._checks: asyncio.Task | None = None

    def start(self) -> None:
        """Start checking (on the event loop); later calls do nothing."""
        if self._checks is None:
            self._checks = asyncio.create_task(self._check_transactions())

    async def stop(self) -> None:
        """Stop the transaction checks (on the event loop, before the server stops)."""
        if self._checks is not None:
            self._checks.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._checks

    async def _check_transactions(self) -> None:
        """Ask a live producer of the topic about each pending transaction that is due, as
        a RocketMQ broker does; the producer answers with EndTransaction."""
        while True:
            await asyncio.sleep(CHECK_LOOP_S)
            try:
                due = await self._workers.run(self._broker.transactions.due_checks)
            except Exception as exc:  # the store failed or is full: try again later
                log.warning("transaction checks skipped: %s", exc)
                continue
            for transaction_id, record in due:
                self._ask_producer(transaction_id, record)

    def _ask_producer(self, transaction_id: str, record) -> None:
        fields = decode_properties(record.properties)
        topic = fields.get(REAL_TOPIC, record.topic)
        outboxes = self._clients.producer_outboxes(topic)
        if not outboxes:
            log.info(
                "transaction %s of topic %s is pending and no producer of it is connected "
                "to be asked",
                transaction_id,
                topic,
            )
            return
        message = convert.incoming(record, topic=topic)
        command = spb.TelemetryCommand(
            recover_orphaned_transaction_command=spb.RecoverOrphanedTransactionCommand(
                message=message, transaction_id=transaction_id
            )
        )
        random.choice(outboxes).put_nowait(command)
