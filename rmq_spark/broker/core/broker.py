"""Broker state shared by the servicers: the store plus the in-memory services around it.

Every write goes through :meth:`Broker.put_messages` (sends, delayed re-puts, send-backs), so
permission checks, auto-creation and long-poll wake-ups happen in one place.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np

from rmq_spark.broker.config import BrokerConfig
from rmq_spark.broker.core.long_poll import PullNotifier
from rmq_spark.broker.delivery.schedule import DelayScheduler
from rmq_spark.broker.delivery.timer import TimerService
from rmq_spark.broker.membership.groups import RECONNECT_GRACE_MS, ConsumerRegistry
from rmq_spark.broker.membership.locks import QueueLockManager
from rmq_spark.broker.membership.subscription_groups import SubscriptionGroups
from rmq_spark.broker.sink_transactions.service import SinkTransactions
from rmq_spark.broker.transactions.checks import TransactionChecks
from rmq_spark.broker.transactions.service import TransactionService
from rmq_spark.clock import now_ms
from rmq_spark.codec.batch_encode import EncodedBatch
from rmq_spark.errors import NotFoundError, PermissionDeniedError
from rmq_spark.names import check_sendable
from rmq_spark.store import AppendResult, MessageStore
from rmq_spark.store.topics import TopicConfig

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
        self.locks = QueueLockManager(config.queue_lock_lease_ms)
        # A member that leaves without unregistering loses its queue leases at once.
        self.consumers = ConsumerRegistry(
            config.consumer_session_timeout_ms,
            max_groups=config.max_consumer_groups,
            reconnect_grace_ms=RECONNECT_GRACE_MS,
            on_departure=self.locks.end_leases,
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
        self.delays = DelayScheduler(self, config.delay_levels_ms)
        self.delays.start()
        try:
            #: half messages and their commit/rollback/check (the v2 service drives checks)
            self.transactions = TransactionService(
                self,
                check_interval_ms=config.transaction_check_interval_ms,
                check_after_ms=config.transaction_check_after_ms,
                max_checks=config.transaction_max_checks,
            )
            #: who is asked about orphaned transactions (each protocol adds its producers)
            self.transaction_checks = TransactionChecks(self)
            #: the Spark sink's staged sends and the batch ends that commit them
            self.sinks = SinkTransactions(self, config.sink_transaction_timeout_ms)
            #: RocketMQ 5 timer (delay) messages with a delivery time in ms
            self.timers = TimerService(self)
            self.timers.start()
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
        return bool(self.config.broker_perm & 2)

    def topic_for_write(self, topic: str, *, own: bool = False) -> TopicConfig:
        """The topic's config, auto-creating it when the broker allows; checks permissions.
        Every client's write names its topic here, so the broker's own topics are refused
        here (ReservedTopicError) for every protocol; the broker's own writers into them
        pass ``own=True``."""
        if not own:
            check_sendable(topic)
        if not self.writable:
            raise PermissionDeniedError(
                f"broker {self.name} is read-only (perm {self.config.broker_perm}); "
                "send to another broker"
            )
        config = self.store.topics.find(topic)
        if config is None:
            if not self.config.auto_create_topics:
                raise NotFoundError(
                    f"topic {topic!r} does not exist on broker {self.name}; create it with "
                    f"'rocketlite topic create {topic}' (auto-creation is off)"
                )
            config = self.store.topics.create(topic, self.config.default_topic_queues)
            log.info("auto-created topic %s with %d queues", topic, config.write_queue_nums)
        return config

    def put_messages(
        self,
        topic: str,
        queue_id: int,
        bodies: Sequence[bytes],
        properties: Sequence[bytes],
        tags: Sequence[str | None],
        **fields,
    ) -> AppendResult:
        """The single write path: append to the store, then wake long-polling pulls. The
        broker's own topics are refused (see topic_for_write)."""
        self.topic_for_write(topic)
        return self._put(topic, queue_id, bodies, properties, tags, **fields)

    def put_own(
        self,
        topic: str,
        queue_id: int,
        bodies: Sequence[bytes],
        properties: Sequence[bytes],
        tags: Sequence[str | None],
        **fields,
    ) -> AppendResult:
        """:meth:`put_messages` for the broker's writes into its own topics (delayed and
        timer messages waiting for their time)."""
        self.topic_for_write(topic, own=True)
        return self._put(topic, queue_id, bodies, properties, tags, **fields)

    def _put(self, topic, queue_id, bodies, properties, tags, **fields) -> AppendResult:
        result = self.store.append(topic, queue_id, bodies, properties, tags=tags, **fields)
        self.notifier.notify(topic, queue_id)
        return result

    def put_encoded(
        self,
        topic: str,
        queue_id: int,
        records: EncodedBatch,
        tag_codes: np.ndarray,
    ) -> AppendResult:
        """Like :meth:`put_messages`, for records laid out beforehand (a committed sink
        transaction's, see :meth:`MessageStore.append_encoded`)."""
        self.topic_for_write(topic)
        result = self.store.append_encoded(topic, queue_id, records, tag_codes)
        self.notifier.notify(topic, queue_id)
        return result

    def close(self) -> None:
        self.timers.stop()
        self.delays.stop()
        self.transactions.close()
        self.consumers.close()
        self.subscription_groups.close()
        self.notifier.close()
        self.store.close()
