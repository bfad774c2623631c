"""The broker's state that the front-ends share: the store, the write path, and the
services around them (delays and timers, transactions, the sink's transactions, members,
locks and subscription groups), each handed only the parts it uses.

Every write goes through :attr:`Broker.writes` (:class:`~rmq_spark.broker.write_path.WritePath`).
"""

from __future__ import annotations

import logging

from rmq_spark.broker.config import BrokerConfig
from rmq_spark.broker.core.messaging import MessagingCore
from rmq_spark.broker.delivery.schedule import DelayScheduler
from rmq_spark.broker.delivery.timer import TimerService
from rmq_spark.broker.long_poll import PullNotifier
from rmq_spark.broker.membership.groups import RECONNECT_GRACE_MS, ConsumerRegistry
from rmq_spark.broker.membership.locks import QueueLockManager
from rmq_spark.broker.membership.subscription_groups import SubscriptionGroups
from rmq_spark.broker.sink_transactions.service import SinkTransactions
from rmq_spark.broker.stats import BrokerStats, RateHistory
from rmq_spark.broker.transactions.checks import TransactionChecks
from rmq_spark.broker.transactions.service import TransactionService
from rmq_spark.broker.write_path import WritePath
from rmq_spark.clock import now_ms
from rmq_spark.store import MessageStore

log = logging.getLogger("rmq_spark.broker")


class Broker:
    def __init__(
        self, config: BrokerConfig, bound_port: int, remoting_port: int | None = None
    ) -> None:
        self.config = config
        self.port = bound_port
        self.endpoint = config.advertised_endpoint or f"{config.host}:{bound_port}"
        # The address inside offset message ids. With the remoting port on, it is that port's:
        # RocketMQ's tools (mqadmin queryMsgById) dial the address in an id with the remoting
        # protocol, and the id a send answers must be the one consumers see in the record.
        self.store_host = f"{config.host}:{remoting_port or bound_port}"
        store_config = config.store_config()
        store_config.store_host = self.store_host
        self.store = MessageStore.open(store_config)
        self.start_ms = now_ms()
        self.notifier = PullNotifier()
        #: what the broker counts as it serves (messages in and out, request latencies)
        self.stats = BrokerStats()
        #: samples of its totals (rates over the last minutes, hour and day), taken by the
        #: server every RateHistory.step_s
        self.rates = RateHistory()
        #: the one write path (every service and front-end writes through it)
        self.writes = WritePath(config, self.store, self.notifier, self.store_host, self.stats)
        self.locks = QueueLockManager(config.queue_lock_lease_ms)
        # A member that leaves without unregistering loses its queue leases at once. Its
        # subscriptions are read by the core's one decoder (made below; heartbeats come
        # once the broker is up).
        self.consumers = ConsumerRegistry(
            config.consumer_session_timeout_ms,
            max_groups=config.max_consumer_groups,
            reconnect_grace_ms=RECONNECT_GRACE_MS,
            on_departure=self.locks.end_leases,
            read_filter=lambda kind, text: self.messaging.read_filter(kind, text),
            max_selectors=config.max_heartbeat_selectors,
        )
        #: PullMessages answered and the messages they carried (GetBrokerInfo.server_stats)
        self.pull_calls = 0
        self.messages_pulled = 0
        #: the Unix socket of short-circuit reads, "" when off (set by the server), and the
        #: queue ranges it handed out
        self.short_circuit_socket = ""
        self.short_circuit_reads = 0
        #: consumer groups' settings, in RocketMQ's subscriptionGroup.json
        self.subscription_groups = SubscriptionGroups(
            store_config.config_dir,
            retry_max_times=config.max_reconsume_times,
            seen=self._groups_seen,
        )
        self.subscription_groups.start()
        self.delays = DelayScheduler(self.writes, config.delay_levels_ms)
        self.delays.start()
        try:
            #: half messages and their commit/rollback/check (the v2 service drives checks)
            self.transactions = TransactionService(
                self.writes,
                check_interval_ms=config.transaction_check_interval_ms,
                check_after_ms=config.transaction_check_after_ms,
                max_checks=config.transaction_max_checks,
            )
            #: who is asked about orphaned transactions (each protocol adds its producers)
            self.transaction_checks = TransactionChecks(self.transactions)
            #: the Spark sink's staged sends and the batch ends that commit them
            self.sinks = SinkTransactions(
                self.writes, self.delays, config.sink_transaction_timeout_ms
            )
            #: RocketMQ 5 timer (delay) messages with a delivery time in ms
            self.timers = TimerService(self.writes)
            self.timers.start()
            #: the operations every front-end calls (reads, offsets, send-backs, look-ups)
            self.messaging = MessagingCore(
                config,
                self.store,
                self.writes,
                self.notifier,
                self.delays,
                self.subscription_groups,
            )
        except BaseException:
            self.delays.stop()
            self.store.close()
            raise

    def _groups_seen(self) -> set[str]:
        """Consumer groups with committed offsets or registered members."""
        with_offsets = {group for _, group in self.store.offsets.snapshot()}
        return with_offsets | set(self.consumers.groups())

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def writable(self) -> bool:
        return self.writes.writable

    def close(self) -> None:
        self.timers.stop()
        self.delays.stop()
        self.transactions.close()
        self.consumers.close()
        self.subscription_groups.close()
        self.notifier.close()
        self.store.close()
