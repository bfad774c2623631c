"""The broker's one write path: every message a client sends, and every message the broker
moves itself (a delay or timer falling due, a send-back, a committed transaction), is
stored through :class:`WritePath`, so permission checks, auto-creation of topics and the
wake-up of held pulls happen in one place.

The services behind the broker core get this object, not the whole broker: it is all they
need to write, and the store it writes to is all they need to read.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np

from rmq_spark.broker.config import BrokerConfig
from rmq_spark.broker.long_poll import PullNotifier
from rmq_spark.broker.stats import BrokerStats
from rmq_spark.codec.batch_encode import EncodedBatch
from rmq_spark.errors import NotFoundError, PermissionDeniedError
from rmq_spark.names import check_sendable
from rmq_spark.store import AppendResult, MessageStore
from rmq_spark.store.topics import TopicConfig

log = logging.getLogger("rmq_spark.broker")


class WritePath:
    """Writes into ``store`` for broker ``config.name``, waking pulls through ``notifier``."""

    def __init__(
        self,
        config: BrokerConfig,
        store: MessageStore,
        notifier: PullNotifier,
        store_host: str,
        stats: BrokerStats | None = None,
    ) -> None:
        self.config = config
        self.store = store
        self.notifier = notifier
        #: messages in, counted here for every protocol and the broker's own moves
        self.stats = stats or BrokerStats()
        #: the address inside offset message ids (see Broker.store_host)
        self.store_host = store_host

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
        **fields: Any,
    ) -> AppendResult:
        """Append to the store, then wake long-polling pulls. The broker's own topics are
        refused (see topic_for_write)."""
        self.topic_for_write(topic)
        return self._put(topic, queue_id, bodies, properties, tags, **fields)

    def put_own(
        self,
        topic: str,
        queue_id: int,
        bodies: Sequence[bytes],
        properties: Sequence[bytes],
        tags: Sequence[str | None],
        **fields: Any,
    ) -> AppendResult:
        """:meth:`put_messages` for the broker's writes into its own topics (delayed and
        timer messages waiting for their time)."""
        self.topic_for_write(topic, own=True)
        return self._put(topic, queue_id, bodies, properties, tags, **fields)

    def _put(
        self,
        topic: str,
        queue_id: int,
        bodies: Sequence[bytes],
        properties: Sequence[bytes],
        tags: Sequence[str | None],
        **fields: Any,
    ) -> AppendResult:
        result = self.store.append(topic, queue_id, bodies, properties, tags=tags, **fields)
        self.notifier.notify(topic, queue_id)
        self.stats.stored(topic, result.count, result.wrote_bytes)
        return result

    def put_encoded(
        self, topic: str, queue_id: int, records: EncodedBatch, tag_codes: np.ndarray
    ) -> AppendResult:
        """Like :meth:`put_messages`, for records laid out beforehand (a committed sink
        transaction's, see :meth:`MessageStore.append_encoded`)."""
        self.topic_for_write(topic)
        result = self.store.append_encoded(topic, queue_id, records, tag_codes)
        self.notifier.notify(topic, queue_id)
        self.stats.stored(topic, result.count, result.wrote_bytes)
        return result
