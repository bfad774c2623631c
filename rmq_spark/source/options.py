"""The ``rocketlite`` source's options, parsed and checked once into :class:`SourceOptions`.

Spark hands a data source its options as a case-insensitive map of strings; names here are
matched the same way (``startingoffsets`` is ``startingOffsets``). The names and meanings
follow Spark's Kafka source where one exists, with RocketMQ words (``maxMessagesPerTrigger``
for ``maxOffsetsPerTrigger``). Every problem raises
:class:`~rmq_spark.errors.InvalidArgumentError` naming the option, the bad value and what is
allowed; unknown options are rejected with the closest valid names. The position options
(``startingOffsets`` and the other starting and ending options) are read by
:mod:`rmq_spark.source.position_options`, the trigger options by
:mod:`rmq_spark.source.trigger_options` and the partitioning options by
:mod:`rmq_spark.source.partition_options`, each group with the checks across its options;
:class:`SourceOptions` holds what they give.

>>> opts = SourceOptions.parse({"endpoints": "127.0.0.1:10911", "topic": "orders"},
...                            streaming=True)
>>> opts.topics, opts.starting.kind, opts.max_trigger_delay_ms
(('orders',), 'latest', 900000)
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from rmq_spark.codec.subscription import Subscription, parse_subscription
from rmq_spark.errors import InvalidArgumentError
from rmq_spark.names import (
    SYSTEM_PREFIXES,
    validate_group,
    validate_message_key,
    validate_topic,
)
from rmq_spark.source.partition_options import check_partition_options, partition_options
from rmq_spark.source.position_options import (
    EndingPosition,
    StartingPosition,
    check_positions,
    ending_position,
    starting_position,
)
from rmq_spark.source.sql_filter import SQL92, TAG, checked_sql_filter, selector_text
from rmq_spark.source.trigger_options import (
    DEFAULT_MAX_TRIGGER_DELAY_MS,
    check_trigger_options,
    trigger_options,
)
from rmq_spark.spark_options.connect_options import (
    DEFAULT_MAX_RETRIES,
    DEFAULT_RETRY_BACKOFF_MS,
    Credentials,
    FileReads,
    TlsFields,
    credential_options,
    endpoints_option,
    name_server_option,
    retry_options,
    store_options,
    tls_options,
)
from rmq_spark.spark_options.option_values import RawOptions, bad

#: canonical option names; Spark lower-cases keys, so they are matched ignoring case
OPTION_NAMES: tuple[str, ...] = (
    "endpoints",
    "topic",
    "topics",
    "topicPattern",
    "group",
    "subExpression",
    "sqlFilter",
    "startingOffsets",
    "startingTimestamp",
    "startingOffsetsByTimestamp",
    "groupFallback",
    "endingOffsets",
    "endingTimestamp",
    "maxMessagesPerTrigger",
    "maxBytesPerTrigger",
    "minMessagesPerTrigger",
    "maxTriggerDelay",
    "failOnDataLoss",
    "commitOffsets",
    "allocateStrategy",
    "numPartitions",
    "minPartitions",
    "maxMessagesPerPartition",
    "minMessagesPerPartition",
    "pullBatchSize",
    "pullTimeoutMs",
    "maxRetries",
    "retryBackoffMs",
    "filterPushdown",
    "tls",
    "tlsCaFile",
    "tlsCertFile",
    "tlsKeyFile",
    "accessKey",
    "secretKey",
    "secretKeyFile",
    "nameServer",
    "storePath",
    "allowLiveStore",
    "brokerName",
    "shortCircuit",
    "messageKey",
)
STREAMING_ONLY = frozenset(
    {
        "maxMessagesPerTrigger",
        "maxBytesPerTrigger",
        "minMessagesPerTrigger",
        "maxTriggerDelay",
        "commitOffsets",
    }
)
BATCH_ONLY = frozenset(
    {
        "endingOffsets",
        "endingTimestamp",
        "filterPushdown",
        "storePath",
        "allowLiveStore",
        "brokerName",
        "messageKey",
    }
)

#: Kafka source names people will type, and ours
_KAFKA_NAMES = {
    "kafka.bootstrap.servers": "endpoints",
    "subscribe": "topics",
    "subscribepattern": "topicPattern",
    "maxoffsetspertrigger": "maxMessagesPerTrigger",
    "minoffsetspertrigger": "minMessagesPerTrigger",
    "maxrecordsperpartition": "maxMessagesPerPartition",
    "groupidprefix": "group",
    "kafka.group.id": "group",
}
_BY_KEY = {name.lower(): name for name in OPTION_NAMES}

#: Messages asked for per pull. The vectorised decoder does ~2 M msgs/s, so 8192 messages
#: cost ~4 ms to decode against well under 1 ms of round trip: per-pull overhead stays small,
#: while one pull of 1 KiB messages (8 MiB) keeps a task's memory modest. Bigger pulls gain
#: little; the broker caps them anyway (max_pull_messages, max_pull_bytes).
DEFAULT_PULL_BATCH_SIZE = 8192
MAX_PULL_BATCH_SIZE = 65_536  # the broker's default max_pull_messages; more is lowered
DEFAULT_PULL_TIMEOUT_MS = 10_000  # RocketMQ's consumerPullTimeoutMillis
_MAX_INT = 2**31 - 1


@dataclass(frozen=True)
class SourceOptions:
    """Every option of the source, checked. Build it with :meth:`parse`."""

    streaming: bool
    #: rocketlite brokers' gRPC endpoints; empty when ``name_server`` is given
    endpoints: tuple[str, ...]
    #: the topics named by ``topic`` or ``topics``; empty when ``topic_pattern`` is used
    topics: tuple[str, ...]
    topic_pattern: str | None
    group: str | None
    #: the tag filter (option subExpression)
    subscription: Subscription
    starting: StartingPosition
    #: None for streaming queries
    ending: EndingPosition | None
    max_messages_per_trigger: int | None = None
    max_bytes_per_trigger: int | None = None
    min_messages_per_trigger: int | None = None
    max_trigger_delay_ms: int = DEFAULT_MAX_TRIGGER_DELAY_MS
    fail_on_data_loss: bool = True
    commit_offsets: bool = False
    allocate_strategy: str | None = None
    num_partitions: int | None = None
    min_partitions: int | None = None
    max_messages_per_partition: int | None = None
    #: group whole queues until a partition holds this many messages (small batches: one task)
    min_messages_per_partition: int | None = None
    pull_batch_size: int = DEFAULT_PULL_BATCH_SIZE
    pull_timeout_ms: int = DEFAULT_PULL_TIMEOUT_MS
    max_retries: int = DEFAULT_MAX_RETRIES
    retry_backoff_ms: int = DEFAULT_RETRY_BACKOFF_MS
    #: take WHERE filters over from Spark (batch reads; see rmq_spark.source.pushdown)
    filter_pushdown: bool = False
    #: connect with TLS; the files are read where the connections are made (the driver and
    #: every executor), so they must be at the same path on each machine
    tls: bool = False
    tls_ca_file: str | None = None
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    #: credentials for brokers with access control (``accessKey`` with ``secretKey`` or
    #: ``secretKeyFile``); None = the client's default (ROCKETLITE_ACCESS_KEY / _SECRET_KEY)
    access_key: str | None = None
    secret_key: str | None = field(default=None, repr=False)
    #: a RocketMQ name server (``host:9876``, several separated by ``;``): read an Apache
    #: RocketMQ cluster, or rocketlite's remoting port, over RocketMQ's remoting protocol
    name_server: str | None = None
    #: a store directory read without any broker (batch reads): rocketlite's or RocketMQ's
    store_path: str | None = None
    #: read ``store_path`` although a running broker holds it (a snapshot of a moving store)
    allow_live_store: bool = False
    #: the broker name rows read from ``store_path`` carry
    store_broker_name: str = ""
    #: a task on a broker's host reads the broker's files itself (short-circuit reads,
    #: after the broker checked its rights) instead of pulling; pulls where it cannot
    short_circuit: bool = True
    #: read only the messages stored under this key (one of their KEYS, or their UNIQ_KEY),
    #: found through the brokers' message index (batch reads)
    message_key: str | None = None
    #: a SQL92 selector over the messages' properties (option sqlFilter, checked; with
    #: filter pushdown, also the predicates taken over from Spark): see
    #: :mod:`rmq_spark.source.sql_filter`
    sql_filter: str | None = None

    @property
    def selector(self) -> str | None:
        """The SQL92 selector the read applies, the tag filter included (``TAGS IN``), or
        None without ``sqlFilter`` (the tag filter alone then)."""
        return selector_text(self.sql_filter, self.subscription.tags)

    def pull_filter(self) -> tuple[str, str]:
        """(expression type, expression) of the read's pulls: ``("SQL92", selector)``, or
        ``("TAG", tags)`` without ``sqlFilter``."""
        selector = self.selector
        if selector is None:
            return TAG, self.subscription.expression
        return SQL92, selector

    def credentials(self) -> Credentials:
        """``access_key``/``secret_key`` for ClientConfig, when the options give them."""
        if self.access_key is None:
            return Credentials()
        return {"access_key": self.access_key, "secret_key": self.secret_key or ""}

    @classmethod
    def parse(
        cls, options: Mapping[str, str], streaming: bool, *, reads: FileReads | None = None
    ) -> SourceOptions:
        """Check ``options`` (Spark's map, any key case) for a streaming or batch query;
        parses sharing ``reads`` read the files the options name once."""
        raw = RawOptions(_canonical_keys(options), streaming)
        _check_mode(raw)
        topics, pattern = _subscription_target(raw)
        group = raw.get("group")
        if group is not None:
            group = _checked("group", group, validate_group)
        parsed = cls(
            streaming=streaming,
            endpoints=endpoints_option(raw),
            name_server=_name_server(raw),
            topics=topics,
            topic_pattern=pattern,
            group=group,
            subscription=_sub_expression(raw),
            starting=starting_position(raw, group),
            ending=ending_position(raw) if not streaming else None,
            # each group parsed where its options sit in this order (the first bad option
            # is the one reported), its checks across options made once all have parsed
            **(triggers := trigger_options(raw)),
            fail_on_data_loss=raw.flag("failOnDataLoss", True),
            commit_offsets=_commit_offsets(raw, group),
            **(partitioning := partition_options(raw)),
            pull_batch_size=raw.setting(
                "pullBatchSize", MAX_PULL_BATCH_SIZE, 1, DEFAULT_PULL_BATCH_SIZE
            ),
            pull_timeout_ms=raw.setting("pullTimeoutMs", _MAX_INT, 1, DEFAULT_PULL_TIMEOUT_MS),
            **retry_options(raw),
            filter_pushdown=raw.flag("filterPushdown", False),
            short_circuit=raw.flag("shortCircuit", True),
            message_key=_message_key(raw),
            sql_filter=_sql_filter(raw),
            **tls_options(raw, reads),
            **credential_options(raw, reads),
            **store_options(raw),
        )
        check_trigger_options(raw, triggers)
        check_partition_options(partitioning)
        check_positions(parsed.starting, parsed.ending, parsed.subscribes, _target(parsed))
        return parsed

    def tls_settings(self) -> TlsFields:
        """The ClientConfig TLS fields of these options."""
        return {
            "tls": self.tls,
            "tls_ca_file": self.tls_ca_file,
            "tls_cert_file": self.tls_cert_file,
            "tls_key_file": self.tls_key_file,
        }

    def subscribes(self, topic: str) -> bool:
        """True if ``topic`` is read by this source.

        A ``topicPattern`` must match the whole name, and matches the broker's retry and
        dead-letter topics (``%RETRY%...``, ``%DLQ%...``) only when the pattern itself starts
        with ``%``: ``.*`` should not read every group's retry copies as data.
        """
        if self.topic_pattern is None:
            return topic in self.topics
        if topic.startswith(SYSTEM_PREFIXES) and not self.topic_pattern.startswith("%"):
            return False
        return re.fullmatch(self.topic_pattern, topic) is not None


def _canonical_keys(options: Mapping[str, str]) -> dict[str, str]:
    values: dict[str, str] = {}
    for key, value in options.items():
        name = _BY_KEY.get(str(key).lower())
        if name is None:
            raise InvalidArgumentError(_unknown_message(str(key)))
        if name in values:
            raise InvalidArgumentError(
                f"option {name} is given twice (as different spellings of {key!r}); give it once"
            )
        if not isinstance(value, str):
            raise bad(name, value, "option values are strings, as Spark passes them")
        values[name] = value
    return values


def _unknown_message(key: str) -> str:
    lowered = key.lower()
    guesses = [_KAFKA_NAMES[lowered]] if lowered in _KAFKA_NAMES else []
    guesses += [_BY_KEY[k] for k in difflib.get_close_matches(lowered, list(_BY_KEY), n=3)]
    hint = f" (did you mean {' or '.join(dict.fromkeys(guesses))}?)" if guesses else ""
    return (
        f"unknown option {key!r} for the rocketlite source{hint}. "
        f"Valid options: {', '.join(OPTION_NAMES)}"
    )


def _subscription_target(raw: RawOptions) -> tuple[tuple[str, ...], str | None]:
    given = [name for name in ("topic", "topics", "topicPattern") if raw.has(name)]
    if len(given) != 1:
        found = f"got {' and '.join(given)}" if given else "got none"
        raise InvalidArgumentError(
            "give exactly one of the options topic (one topic), topics (comma-separated list) "
            f"or topicPattern (a regular expression over topic names); {found}"
        )
    name = given[0]
    text = raw.get(name) or ""
    if name == "topicPattern":
        try:
            re.compile(text)
        except re.error as exc:
            raise bad(name, text, f"not a regular expression ({exc})") from None
        if not text:
            raise bad(name, text, "expected a non-empty regular expression, e.g. 'orders-.*'")
        return (), text
    if not text.strip():
        raise bad(name, text, "expected a topic name")
    if name == "topic" and "," in text:
        raise bad(name, text, "one topic name; use the option topics for a comma-separated list")
    topics: list[str] = []
    for part in text.split(","):
        topic = part.strip()
        if not topic:
            raise bad(name, text, "an empty topic name in the list; remove the extra comma")
        _checked(name, topic, lambda t: validate_topic(t, allow_system=True), text)
        if topic in topics:
            raise bad(name, text, f"topic {topic!r} is listed twice; list each topic once")
        topics.append(topic)
    return tuple(topics), None


def _checked(
    name: str, text: str, check: Callable[[str], str], option_value: str | None = None
) -> str:
    try:
        return check(text)
    except InvalidArgumentError as exc:
        raise bad(name, text if option_value is None else option_value, str(exc)) from None


def _sub_expression(raw: RawOptions) -> Subscription:
    text = raw.get("subExpression")
    try:
        return parse_subscription(text)
    except InvalidArgumentError as exc:
        raise bad("subExpression", text, str(exc)) from None


def _sql_filter(raw: RawOptions) -> str | None:
    text = raw.get("sqlFilter")
    return None if text is None else checked_sql_filter(text)


def _commit_offsets(raw: RawOptions, group: str | None) -> bool:
    commit = raw.flag("commitOffsets", group is not None and raw.streaming)
    if commit and group is None:
        raise InvalidArgumentError(
            "option commitOffsets=true needs the option group (the consumer group to commit "
            "the query's progress to)"
        )
    return commit


def _check_mode(raw: RawOptions) -> None:
    wrong_mode = sorted((BATCH_ONLY if raw.streaming else STREAMING_ONLY).intersection(raw.values))
    if wrong_mode:
        if raw.streaming:
            where = "batch queries (spark.read); this is a streaming query (spark.readStream)"
        else:
            where = "streaming queries (spark.readStream); this is a batch query (spark.read)"
        raise InvalidArgumentError(f"option {wrong_mode[0]} only applies to {where}; remove it")


def _message_key(raw: RawOptions) -> str | None:
    text = raw.get("messageKey")
    return None if text is None else _checked("messageKey", text, validate_message_key)


def _name_server(raw: RawOptions) -> str | None:
    servers = name_server_option(raw)
    if servers is not None and raw.has("maxBytesPerTrigger"):
        raise InvalidArgumentError(
            "option maxBytesPerTrigger is not supported with nameServer: RocketMQ's brokers "
            "cannot measure the bytes of an offset range; use maxMessagesPerTrigger, or read "
            "rocketlite brokers through endpoints"
        )
    return servers


def _target(opts: SourceOptions) -> str:
    """What the options read, for messages."""
    if opts.topic_pattern is not None:
        return f"topicPattern={opts.topic_pattern!r}"
    return f"topics {', '.join(opts.topics)}"
