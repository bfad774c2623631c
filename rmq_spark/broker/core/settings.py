"""The broker's settings as RocketMQ's tools read and change them (``mqadmin
getBrokerConfig`` and ``updateBrokerConfig``), for every front-end.

:func:`settings` answers every setting the broker runs with, under RocketMQ's name where
RocketMQ has a setting of the same meaning and unit (``brokerName``, ``brokerPermission``,
``autoCreateTopicEnable``, ``flushDiskType``, ...) and under its ``BrokerConfig`` or
``StoreConfig`` field's name in camel case otherwise (``maxPullBytes``,
``fileReservedMs``): a name never stands for another unit than RocketMQ's.

:func:`update` changes the settings in :data:`CHANGEABLE`, the ones every reader takes
from the live :class:`~rmq_spark.broker.config.BrokerConfig` at each use, so a change
holds from the next request on:

- ``brokerPermission`` (2, 4 or 6): reads and writes are refused from the next request,
  routes announce it, and the broker registers with its name servers again at once;
- ``autoCreateTopicEnable``: whether a send to an unknown topic creates it;
- ``defaultTopicQueueNums``: the queues such a topic, or one a tool creates without a
  count, gets;
- ``maxPullMessages``, ``maxPullBytes``, ``maxBatchMessages``, ``maxSubscriptionChars``:
  the limits of the next pull, send and subscription.

Every other setting is fixed while the broker runs (services took it at start: the store's
file sizes, the lease and session times, the transaction checker's timing, ...), and a
change of one is refused naming it and the flag to restart with. A change is checked whole
(the values parsed, then the whole configuration checked as at start) before any of it is
applied; it lasts until the broker stops (the flags say what a restart runs with).
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from rmq_spark.broker.config import BrokerConfig
from rmq_spark.errors import InvalidArgumentError, shown
from rmq_spark.store.config import StoreConfig

#: RocketMQ's names of the BrokerConfig and StoreConfig fields that mean what RocketMQ's
#: setting means, in the same unit
ROCKETMQ_NAMES = {
    "name": "brokerName",
    "cluster": "brokerClusterName",
    "broker_id": "brokerId",
    "namesrv_addrs": "namesrvAddr",
    "host": "brokerIP1",
    "remoting_port": "listenPort",
    "broker_perm": "brokerPermission",
    "auto_create_topics": "autoCreateTopicEnable",
    "default_topic_queues": "defaultTopicQueueNums",
    "property_filter": "enablePropertyFilter",
    "max_message_bytes": "maxMessageSize",
    "register_interval_ms": "registerNameServerPeriod",
    "transaction_check_after_ms": "transactionTimeOut",
    "transaction_check_interval_ms": "transactionCheckInterval",
    "transaction_max_checks": "transactionCheckMax",
    "delay_levels": "messageDelayLevel",
    "store_dir": "storePathRootDir",
    "flush_mode": "flushDiskType",
    "commitlog_segment_bytes": "mappedFileSizeCommitLog",
    "flush_interval_ms": "flushIntervalCommitLog",
    "sync_flush_timeout_ms": "syncFlushTimeout",
    "message_index": "messageIndexEnable",
    # rocketlite's own, under a name that does not read as RocketMQ's listenPort
    "port": "grpcPort",
}
#: the broker flag of a field, where it is not the field's name with dashes
_FLAGS = {
    "name": "--name",
    "store_dir": "--store",
    "namesrv_addrs": "--namesrv-addr",
    "broker_perm": "--broker-perm",
    "flush_mode": "--flush",
    "property_filter": "--no-property-filter",
    "consumer_session_timeout_ms": "--session-timeout-ms",
    "queue_lock_lease_ms": "--lock-lease-ms",
    "tls_cert_file": "--tls-cert",
    "tls_key_file": "--tls-key",
    "tls_client_ca_file": "--tls-client-ca",
    "acl_file": "--acl",
    "message_index": "--no-message-index",
}
#: BrokerConfig fields not shown: the store's own fields are shown from StoreConfig
_HIDDEN = frozenset({"store_options", "store_dir", "flush_mode", "max_message_bytes"})
#: StoreConfig fields not shown (the broker's fields say them, or they are internal)
_HIDDEN_STORE = frozenset({"broker_name", "schedule_delays_ms", "max_message_bytes"})


def _whole(low: int) -> Callable[[str, str], int]:
    def parse(key: str, text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            raise InvalidArgumentError(f"{key}={shown(text)} is not a whole number") from None
        if value < low:
            raise InvalidArgumentError(f"{key}={value} must be >= {low}")
        return value

    return parse


def _permission(key: str, text: str) -> int:
    value = _whole(0)(key, text)
    if value not in (2, 4, 6):
        raise InvalidArgumentError(
            f"{key}={value} must be 2 (write only), 4 (read only) or 6 (read and write)"
        )
    return value


def _boolean(key: str, text: str) -> bool:
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise InvalidArgumentError(f"{key}={shown(text)} must be true or false")
    return value == "true"


@dataclass(frozen=True)
class Changeable:
    #: the BrokerConfig field it sets
    field: str
    #: (key, text) -> value, InvalidArgumentError naming the key and the value
    parse: Callable[[str, str], Any]


#: the settings a running broker can change, by the name tools give them
CHANGEABLE: dict[str, Changeable] = {
    "brokerPermission": Changeable("broker_perm", _permission),
    "autoCreateTopicEnable": Changeable("auto_create_topics", _boolean),
    "defaultTopicQueueNums": Changeable("default_topic_queues", _whole(1)),
    "maxPullMessages": Changeable("max_pull_messages", _whole(1)),
    "maxPullBytes": Changeable("max_pull_bytes", _whole(1)),
    "maxBatchMessages": Changeable("max_batch_messages", _whole(1)),
    "maxSubscriptionChars": Changeable("max_subscription_chars", _whole(1)),
}
_updating = threading.Lock()


def key_of(field: str) -> str:
    """The name a field is shown and changed under.

    >>> key_of("broker_perm"), key_of("max_pull_bytes")
    ('brokerPermission', 'maxPullBytes')
    """
    if field in ROCKETMQ_NAMES:
        return ROCKETMQ_NAMES[field]
    head, *rest = field.split("_")
    return head + "".join(part.capitalize() for part in rest)


def flag_of(field: str) -> str:
    """The broker flag that sets a field.

    >>> flag_of("max_pull_bytes"), flag_of("consumer_session_timeout_ms")
    ('--max-pull-bytes', '--session-timeout-ms')
    """
    return _FLAGS.get(field, "--" + field.replace("_", "-"))


def _text(field: str, value: object) -> str:
    if field == "flush_mode":
        return f"{value}_FLUSH"  # RocketMQ's FlushDiskType names
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    if isinstance(value, tuple | list):
        return ";".join(str(item) for item in value)
    return str(value)


def settings(
    config: BrokerConfig, store: StoreConfig, *, grpc_port: int, remoting_port: int | None
) -> dict[str, str]:
    """Every setting the broker runs with, by the name tools know it under, as text; the
    ports are the ones bound (a configured 0 picks a free one)."""
    shown_fields: dict[str, str] = {}
    for item in dataclasses.fields(config):
        if item.name not in _HIDDEN:
            shown_fields[key_of(item.name)] = _text(item.name, getattr(config, item.name))
    for item in dataclasses.fields(store):
        if item.name not in _HIDDEN_STORE:
            shown_fields[key_of(item.name)] = _text(item.name, getattr(store, item.name))
    shown_fields[key_of("max_message_bytes")] = str(config.max_message_bytes)
    shown_fields[key_of("port")] = str(grpc_port)
    shown_fields[key_of("remoting_port")] = _text("remoting_port", remoting_port)
    return dict(sorted(shown_fields.items()))


def _fields_by_key(config: BrokerConfig, store: StoreConfig) -> dict[str, str]:
    names = {key_of(item.name): item.name for item in dataclasses.fields(store)}
    names.update({key_of(item.name): item.name for item in dataclasses.fields(config)})
    return names


def update(config: BrokerConfig, store: StoreConfig, changes: Mapping[str, str]) -> dict[str, Any]:
    """Apply ``changes`` (key -> text) to the live ``config``, all or nothing; returns the
    fields set with their values. InvalidArgumentError names the first key refused: one
    that is not a setting, one fixed while the broker runs (and its flag), or a value its
    setting does not take, alone or with the rest of the configuration."""
    if not changes:
        raise InvalidArgumentError(
            "the update names no setting; send key=value lines, e.g. brokerPermission=4"
        )
    values: dict[str, Any] = {}
    fields = _fields_by_key(config, store)
    for key, text in changes.items():
        change = CHANGEABLE.get(key)
        if change is None:
            changeable = ", ".join(sorted(CHANGEABLE))
            if key in fields:
                raise InvalidArgumentError(
                    f"the setting {key} cannot change while the broker runs; restart the "
                    f"broker with {flag_of(fields[key])} to change it (a running broker "
                    f"changes: {changeable})"
                )
            raise InvalidArgumentError(
                f"{shown(key)} is not a setting of this broker (getBrokerConfig lists them; "
                f"a running broker changes: {changeable})"
            )
        values[change.field] = change.parse(key, text)
    with _updating:
        try:
            dataclasses.replace(config, **values)  # the checks of a start, on a copy
        except InvalidArgumentError as exc:
            raise InvalidArgumentError(
                f"{', '.join(sorted(changes))}: {exc}; nothing was changed"
            ) from None
        for field, value in values.items():
            setattr(config, field, value)
    return values
