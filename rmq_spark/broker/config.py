"""Broker configuration: parsed once (from CLI flags or code), validated, units in names."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from rmq_spark import tls
from rmq_spark.errors import InvalidArgumentError, check_whole_numbers
from rmq_spark.names import validate_topic
from rmq_spark.store import geometry
from rmq_spark.store.config import StoreConfig
from rmq_spark.units import MiB, parse_duration_ms

DEFAULT_PORT = 10911
#: RocketMQ's default cluster name (BrokerConfig.brokerClusterName)
DEFAULT_CLUSTER = "DefaultCluster"
DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"


def parse_delay_levels(text: str) -> list[int]:
    """``"1s 5s 1m"`` -> ``[1000, 5000, 60000]`` (level 1 is the first entry); each entry
    is a duration with a unit (:func:`rmq_spark.units.parse_duration_ms`).

    >>> parse_delay_levels("500ms 2s 1m 2min")
    [500, 2000, 60000, 120000]
    """
    levels = [
        parse_duration_ms(item, what=f"delay level {level}", minimum=1)
        for level, item in enumerate(text.split(), start=1)
    ]
    if not levels:
        raise InvalidArgumentError("delay levels must list at least one duration")
    return levels


def check_name_server(address: object) -> str:
    """``host:port`` of a name server, checked; InvalidArgumentError names a bad one.

    >>> check_name_server(" 10.0.0.5:9876 ")
    '10.0.0.5:9876'
    """
    text = address.strip() if isinstance(address, str) else ""
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) <= 65535 or " " in text:
        raise InvalidArgumentError(
            f"--namesrv-addr: {address!r} is not a name server address; give HOST:PORT "
            "(several separated by ';'), e.g. 127.0.0.1:9876"
        )
    return text


def parse_name_servers(text: str) -> tuple[str, ...]:
    """``"h1:9876;h2:9876"`` (RocketMQ's namesrvAddr) as checked addresses.

    >>> parse_name_servers("127.0.0.1:9876; 127.0.0.1:9877")
    ('127.0.0.1:9876', '127.0.0.1:9877')
    """
    parts = [part for part in text.split(";") if part.strip()]
    if not parts:
        raise InvalidArgumentError(
            f"--namesrv-addr {text!r} names no name server; give HOST:PORT[;HOST:PORT]"
        )
    return tuple(check_name_server(part) for part in parts)


@dataclass
class BrokerConfig:
    """Everything a broker needs; ``store`` settings are passed through to StoreConfig."""

    store_dir: str | Path
    name: str = "broker-a"
    #: RocketMQ's cluster name and broker id (0 = master) this broker registers under, in
    #: its own name-server role and with ``namesrv_addrs``
    cluster: str = DEFAULT_CLUSTER
    broker_id: int = 0
    #: name servers to register with (``host:port`` each; RocketMQ's namesrvAddr split on
    #: ``;``): Apache RocketMQ's, or other rocketlite brokers' remoting ports. Needs the
    #: remoting port, whose address the routes name
    namesrv_addrs: tuple[str, ...] = ()
    #: how often the broker registers again (RocketMQ's registerNameServerPeriod)
    register_interval_ms: int = 30_000
    host: str = "127.0.0.1"
    #: 0 picks a free port (tests); the bound port is returned by create_server
    port: int = DEFAULT_PORT
    #: the address clients are told to use (routes); default host:bound-port
    advertised_endpoint: str | None = None
    #: port for RocketMQ's remoting protocol (name server and broker roles): None = off,
    #: 0 = any free port (the bound one is BrokerServer.remoting_port)
    remoting_port: int | None = None
    #: port for HTTP (metrics, health checks, the web console): None = off, 0 = any free
    #: port (the bound one is BrokerServer.http_port)
    http_port: int | None = None
    #: the Unix socket of short-circuit reads (readers on this host read the store files,
    #: rmq_spark.broker.v1.short_circuit): "" = <temp dir>/rocketlite-<port>.sock, None = off
    short_circuit_socket: str | None = ""
    flush_mode: str = "ASYNC"
    #: broker-wide permission: 6 read+write, 4 read-only (writes answer PERMISSION_DENIED)
    broker_perm: int = 6
    auto_create_topics: bool = False
    #: serve SQL92 subscriptions (RocketMQ's enablePropertyFilter, on by default here)
    property_filter: bool = True
    default_topic_queues: int = 4
    max_message_bytes: int = 4 * MiB
    max_request_bytes: int = 64 * MiB
    max_response_bytes: int = 64 * MiB
    max_pull_messages: int = 65_536
    max_pull_bytes: int = 32 * MiB
    max_suspend_timeout_ms: int = 30_000
    #: messages in one send request (each costs the broker about 1 KiB while it is stored)
    max_batch_messages: int = 65_536
    #: items in any other list of a request (queues to lock, offsets to commit, ...)
    max_request_items: int = 65_536
    #: bytes of send requests being stored at once; more wait on the event loop
    max_inflight_send_bytes: int = 256 * MiB
    #: characters of a subscription (tag) expression
    max_subscription_chars: int = 16_384
    #: different SQL92 selectors one heartbeat (or a RocketMQ 5 client's settings) may
    #: bring: each is compiled, a long one in milliseconds of a worker's time
    max_heartbeat_selectors: int = 32
    #: consumer groups with live members, and %RETRY% topics heartbeats may create
    max_consumer_groups: int = 10_000
    consumer_session_timeout_ms: int = 120_000
    queue_lock_lease_ms: int = 60_000
    max_reconsume_times: int = 16
    delay_levels: str = DEFAULT_DELAY_LEVELS
    #: threads that run store work; waiting calls (held pulls, watch streams) use none
    worker_threads: int = 16
    #: a pending transaction is first checked once this old, then every interval; after
    #: max checks it is discarded (RocketMQ's transactionTimeOut, transactionCheckInterval,
    #: transactionCheckMax)
    transaction_check_after_ms: int = 6_000
    transaction_check_interval_ms: int = 30_000
    transaction_max_checks: int = 15
    #: a Spark sink's staged transaction not ended by its writer after this long is rolled
    #: back (its query is taken to be gone for good)
    sink_transaction_timeout_ms: int = 86_400_000
    store_options: dict = field(default_factory=dict)
    #: PEM certificate (chain) and private key: with both, the port serves TLS only
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    #: PEM CA certificate(s): clients must present a certificate signed by one (mutual TLS)
    tls_client_ca_file: str | None = None
    #: ACL file (users, secrets, policies; see docs/security.md): when set, every call must
    #: be signed and is authorized against it; the file is reloaded when it changes
    acl_file: str | None = None
    #: listen on a non-loopback address without TLS and access control (warns on every start)
    insecure: bool = False

    def __post_init__(self) -> None:
        if self.broker_perm not in (2, 4, 6):
            raise InvalidArgumentError(f"broker_perm {self.broker_perm!r} must be 2, 4 or 6")
        if not isinstance(self.port, int) or not 0 <= self.port <= 65535:
            raise InvalidArgumentError(f"port {self.port!r} must be 0..65535 (0 = any free)")
        if self.remoting_port is not None and (
            not isinstance(self.remoting_port, int) or not 0 <= self.remoting_port <= 65535
        ):
            raise InvalidArgumentError(
                f"remoting port {self.remoting_port!r} must be 0..65535 (0 = any free) or "
                "None (off)"
            )
        if self.http_port is not None and (
            not isinstance(self.http_port, int) or not 0 <= self.http_port <= 65535
        ):
            raise InvalidArgumentError(
                f"HTTP port {self.http_port!r} must be 0..65535 (0 = any free) or None (off)"
            )
        self._check_cluster_identity()
        check_whole_numbers(
            self,
            (
                "register_interval_ms",
                "default_topic_queues",
                "max_message_bytes",
                "max_pull_messages",
                "max_pull_bytes",
                "max_suspend_timeout_ms",
                "max_batch_messages",
                "max_request_items",
                "max_inflight_send_bytes",
                "max_subscription_chars",
                "max_heartbeat_selectors",
                "max_consumer_groups",
                "consumer_session_timeout_ms",
                "queue_lock_lease_ms",
                "max_reconsume_times",
                "worker_threads",
                "transaction_check_after_ms",
                "transaction_check_interval_ms",
                "transaction_max_checks",
                "sink_transaction_timeout_ms",
            ),
            1,
        )
        if self.max_pull_bytes + 2 * self.max_message_bytes > self.max_response_bytes:
            raise InvalidArgumentError(
                f"max_response_bytes={self.max_response_bytes} cannot carry a pull of "
                f"max_pull_bytes={self.max_pull_bytes} plus one message of "
                f"max_message_bytes={self.max_message_bytes}; raise it or lower those"
            )
        if self.max_inflight_send_bytes < self.max_request_bytes:
            raise InvalidArgumentError(
                f"max_inflight_send_bytes={self.max_inflight_send_bytes} is below "
                f"max_request_bytes={self.max_request_bytes}: one full send could never be "
                "admitted; raise it or lower max_request_bytes"
            )
        self.delay_levels_ms = parse_delay_levels(self.delay_levels)
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            given, missing = (
                ("--tls-cert", "--tls-key")
                if self.tls_key_file is None
                else ("--tls-key", "--tls-cert")
            )
            raise InvalidArgumentError(
                f"{given} needs {missing}: TLS takes a certificate and its private key"
            )
        if self.tls_client_ca_file is not None and self.tls_cert_file is None:
            raise InvalidArgumentError(
                "--tls-client-ca needs --tls-cert and --tls-key: client certificates are "
                "checked during the TLS handshake, which needs the broker's own certificate"
            )

    def _check_cluster_identity(self) -> None:
        try:
            validate_topic(self.cluster)  # RocketMQ's brokers register it as a topic too
        except InvalidArgumentError as exc:
            raise InvalidArgumentError(f"--cluster {self.cluster!r}: {exc}") from None
        if (
            isinstance(self.broker_id, bool)
            or not isinstance(self.broker_id, int)
            or not 0 <= self.broker_id < 1 << 63
        ):
            raise InvalidArgumentError(
                f"--broker-id {self.broker_id!r} must be a whole number >= 0 (0 = master)"
            )
        self.namesrv_addrs = tuple(check_name_server(a) for a in self.namesrv_addrs)
        if self.namesrv_addrs and self.remoting_port is None:
            raise InvalidArgumentError(
                f"--namesrv-addr {';'.join(self.namesrv_addrs)} needs the remoting port: the "
                "routes name it as this broker's address (give --remoting-port PORT, or 0 "
                "for any free port)"
            )

    @property
    def tls(self) -> bool:
        return self.tls_cert_file is not None

    def tls_material(self) -> tuple[bytes, bytes, bytes | None] | None:
        """``(certificate chain, private key, client CA or None)`` as PEM, checked; None
        without TLS. InvalidArgumentError names the flag and the file of a problem."""
        if self.tls_cert_file is None or self.tls_key_file is None:
            return None
        cert, key = tls.check_key_pair(
            tls.Setting("--tls-cert", str(self.tls_cert_file)),
            tls.Setting("--tls-key", str(self.tls_key_file)),
        )
        client_ca = None
        if self.tls_client_ca_file is not None:
            client_ca = tls.check_ca(tls.Setting("--tls-client-ca", str(self.tls_client_ca_file)))
        return cert, key, client_ca

    def check_files(self) -> None:
        """Read the TLS files and look for the ACL file now, before anything is bound."""
        self.tls_material()
        if self.acl_file is not None and not Path(self.acl_file).is_file():
            raise InvalidArgumentError(f"--acl {self.acl_file}: no such file")

    @property
    def exposed(self) -> bool:
        """True when the broker listens on an address other machines may reach."""
        return not tls.is_loopback(self.host)

    def missing_protection(self) -> list[str]:
        """What a broker on a non-loopback address lacks: "TLS", "access control"."""
        missing = []
        if not self.tls:
            missing.append("TLS")
        if self.acl_file is None:
            missing.append("access control")
        return missing

    def check_exposure(self) -> None:
        """Refuse a non-loopback address without TLS and access control, unless
        ``insecure`` was asked for."""
        missing = self.missing_protection()
        if not self.exposed or not missing or self.insecure:
            return
        raise InvalidArgumentError(
            f"refusing to listen on {self.host}: an address other machines can reach needs "
            f"TLS (--tls-cert, --tls-key) and access control (--acl FILE), and this broker "
            f"has no {' and no '.join(missing)}; add them, or pass --insecure to serve "
            f"{self.host} unprotected (or listen on 127.0.0.1)"
        )

    def store_config(self) -> StoreConfig:
        """The store's settings; file sizes not given are the existing store's own."""
        where = StoreConfig(self.store_dir)
        options = {
            **geometry.existing_sizes(
                where.config_dir, where.commitlog_dir, where.consumequeue_dir
            ),
            **self.store_options,
        }
        return StoreConfig(
            self.store_dir,
            broker_name=self.name,
            store_host=f"{self.host}:{self.port}",
            flush_mode=self.flush_mode,  # type: ignore[arg-type]
            max_message_bytes=self.max_message_bytes,
            schedule_delays_ms=tuple(self.delay_levels_ms),
            **options,
        )
