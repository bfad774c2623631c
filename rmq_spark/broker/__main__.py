"""Run a broker: ``python -m rmq_spark.broker --store DIR [--port 10911] ...``.

Once it serves, the broker prints exactly one line to stdout, so scripts and tests started
with ``--port 0`` can read the bound port::

    rocketlite broker broker-a listening on 127.0.0.1:40123 store=/data/broker-a

Logs go to stderr. SIGTERM or SIGINT shuts it down cleanly (one arriving while it starts
stops it once its store is open); SIGUSR1 writes every thread's stack to the log. Bad flags
or settings (TLS files that cannot be read or do not match included) print one error line
and exit with 2; a broker that cannot start (port taken, store locked or unreadable, a
non-loopback ``--host`` without TLS and ``--acl`` or ``--insecure``) prints one error line
and exits with 1.
"""

from __future__ import annotations

import argparse
import faulthandler
import logging
import signal
import socket
import sys
from typing import NoReturn

from rmq_spark.broker.config import (
    DEFAULT_CLUSTER,
    DEFAULT_DELAY_LEVELS,
    DEFAULT_PORT,
    BrokerConfig,
    parse_name_servers,
)
from rmq_spark.broker.server import BrokerServer, serve
from rmq_spark.errors import InvalidArgumentError, RocketliteError
from rmq_spark.store import faults
from rmq_spark.store.mapped_file import raise_file_limit
from rmq_spark.units import UNITS_HELP, duration_ms_flag, size_flag

PROG = "python -m rmq_spark.broker"
LOG_FORMAT = "%(asctime)s.%(msecs)03d %(levelname)-7s %(name)s [%(threadName)s] %(message)s"


#: flags that go to the store (StoreConfig field names); unset ones keep the store defaults
_STORE_FLAGS = (
    "commitlog_segment_bytes",
    "consumequeue_entries_per_file",
    "flush_interval_ms",
    "sync_flush_timeout_ms",
    "checkpoint_interval_ms",
    "file_reserved_ms",
    "cleanup_interval_ms",
    "disk_max_used_ratio",
    "offsets_persist_interval_ms",
    "force_empty_offsets",
    "message_index",
    "index_hash_slots",
    "index_max_entries",
    "max_open_descriptors",
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The broker's flags; each maps to one BrokerConfig (or StoreConfig) field."""
    parser.epilog = UNITS_HELP
    net = parser.add_argument_group("network")
    net.add_argument("--store", required=True, metavar="DIR", help="store directory")
    net.add_argument("--host", default="127.0.0.1", help="IP address to listen on")
    net.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help="port to listen on; 0 picks a free one"
    )
    net.add_argument(
        "--remoting-port",
        type=_remoting_port,
        default=None,
        metavar="PORT|off",
        help="port for RocketMQ's remoting protocol, where Apache RocketMQ's clients and "
        "mqadmin connect as to a name server (namesrvAddr=host:PORT); 0 picks a free one; "
        f"default {REMOTING_DEFAULT_PORT} when it is free, else off",
    )
    net.add_argument(
        "--http-port",
        type=_port,
        default=None,
        metavar="PORT",
        help="port for HTTP: Prometheus metrics at /metrics, health checks at /healthz and "
        "/readyz, the web console at /; with the same TLS and ACL as the other ports; 0 picks "
        "a free one; default off",
    )
    net.add_argument(
        "--short-circuit-socket",
        default="",
        metavar="PATH|off",
        help="Unix socket where readers on this host (Spark executors) get the store's files "
        "to read queue ranges themselves, after the same access checks as a pull; default "
        "<temp dir>/rocketlite-<port>.sock; off turns short-circuit reads off",
    )
    net.add_argument("--name", default="broker-a", help="broker name (unique per cluster)")
    net.add_argument(
        "--advertised-endpoint",
        metavar="HOST:PORT",
        help="address clients are told to use (default: host:bound port)",
    )
    net.add_argument(
        "--worker-threads",
        type=int,
        default=16,
        metavar="N",
        help="threads that run store work (held pulls and watch streams take none)",
    )

    cluster = parser.add_argument_group("cluster (RocketMQ's name servers)")
    cluster.add_argument(
        "--cluster",
        default=DEFAULT_CLUSTER,
        metavar="NAME",
        help="RocketMQ cluster name this broker registers under (default %(default)s)",
    )
    cluster.add_argument(
        "--broker-id",
        type=int,
        default=0,
        metavar="N",
        help="RocketMQ broker id: 0 registers as the master of --name, others as a slave",
    )
    cluster.add_argument(
        "--namesrv-addr",
        type=_name_servers,
        default=(),
        metavar="HOST:PORT[;HOST:PORT]",
        help="register with these name servers (Apache RocketMQ's, or rocketlite brokers' "
        "remoting ports) at start, every 30 s and when topics change, and unregister on a "
        "clean stop; needs the remoting port",
    )

    security = parser.add_argument_group(
        "security (a non-loopback --host needs TLS and --acl, or --insecure)"
    )
    security.add_argument(
        "--tls-cert",
        metavar="FILE",
        help="PEM certificate (chain) of the broker; with --tls-key the port serves TLS only",
    )
    security.add_argument("--tls-key", metavar="FILE", help="PEM private key of --tls-cert")
    security.add_argument(
        "--tls-client-ca",
        metavar="FILE",
        help="PEM CA certificate(s): require client certificates signed by one (mutual TLS)",
    )
    security.add_argument(
        "--acl",
        metavar="FILE",
        help="ACL file (JSON): require signed requests and authorize them (docs/security.md)",
    )
    security.add_argument(
        "--insecure",
        action="store_true",
        help="allow a non-loopback --host without TLS and access control (logs a warning)",
    )

    broker = parser.add_argument_group("broker")
    broker.add_argument(
        "--flush",
        type=str.upper,
        choices=("ASYNC", "SYNC"),
        default="ASYNC",
        help="ASYNC: ack once in the page cache; SYNC: ack once fsynced",
    )
    broker.add_argument(
        "--broker-perm",
        type=int,
        choices=(2, 4, 6),
        default=6,
        help="6 read+write, 4 read-only, 2 write-only",
    )
    broker.add_argument(
        "--auto-create-topics", action="store_true", help="create unknown topics on first send"
    )
    broker.add_argument("--default-topic-queues", type=int, default=4, metavar="N")
    broker.add_argument(
        "--no-property-filter",
        dest="property_filter",
        action="store_false",
        help="refuse SQL92 subscriptions (RocketMQ's enablePropertyFilter=false); tag "
        "filters still work",
    )
    broker.add_argument(
        "--delay-levels",
        default=DEFAULT_DELAY_LEVELS,
        metavar="LEVELS",
        help='durations of delay levels 1, 2, ... (default "%(default)s")',
    )
    broker.add_argument("--max-reconsume-times", type=int, default=16, metavar="N")
    broker.add_argument(
        "--session-timeout-ms", type=duration_ms_flag, default=120_000, metavar="DURATION"
    )
    broker.add_argument(
        "--lock-lease-ms", type=duration_ms_flag, default=60_000, metavar="DURATION"
    )
    broker.add_argument(
        "--transaction-check-after-ms",
        type=duration_ms_flag,
        default=6_000,
        metavar="DURATION",
        help="ask a producer about a pending transaction once it is this old",
    )
    broker.add_argument(
        "--sink-transaction-timeout-ms",
        type=duration_ms_flag,
        default=86_400_000,
        metavar="DURATION",
        help="roll back a Spark sink's staged rows not committed after this long (default 1 day)",
    )
    broker.add_argument(
        "--transaction-check-interval-ms",
        type=duration_ms_flag,
        default=30_000,
        metavar="DURATION",
        help="time between two checks of one pending transaction",
    )
    broker.add_argument(
        "--transaction-max-checks",
        type=int,
        default=15,
        metavar="N",
        help="checks before a pending transaction is discarded",
    )

    limits = parser.add_argument_group("limits")
    limits.add_argument("--max-message-bytes", type=size_flag, default=4 << 20, metavar="SIZE")
    limits.add_argument("--max-request-bytes", type=size_flag, default=64 << 20, metavar="SIZE")
    limits.add_argument("--max-response-bytes", type=size_flag, default=64 << 20, metavar="SIZE")
    limits.add_argument("--max-pull-messages", type=int, default=65_536, metavar="N")
    limits.add_argument("--max-pull-bytes", type=size_flag, default=32 << 20, metavar="SIZE")
    limits.add_argument(
        "--max-suspend-timeout-ms", type=duration_ms_flag, default=30_000, metavar="DURATION"
    )
    limits.add_argument(
        "--max-batch-messages", type=int, default=65_536, metavar="N", help="messages per send"
    )
    limits.add_argument(
        "--max-request-items",
        type=int,
        default=65_536,
        metavar="N",
        help="items in any other list of one request (queues, offsets, subscriptions)",
    )
    limits.add_argument(
        "--max-inflight-send-bytes",
        type=size_flag,
        default=256 << 20,
        metavar="SIZE",
        help="send requests being stored at once, in bytes; more wait their turn",
    )
    limits.add_argument(
        "--max-subscription-chars",
        type=int,
        default=16_384,
        metavar="N",
        help="length of one subscription (tag) expression",
    )
    limits.add_argument(
        "--max-heartbeat-selectors",
        type=int,
        default=32,
        metavar="N",
        help="different SQL92 selectors one heartbeat may bring (each is compiled)",
    )
    limits.add_argument(
        "--max-consumer-groups",
        type=int,
        default=10_000,
        metavar="N",
        help="groups with live members, and %%RETRY%% topics that heartbeats may create",
    )

    store = parser.add_argument_group("store (defaults: the store's)")
    store.add_argument(
        "--commitlog-segment-bytes",
        type=size_flag,
        metavar="SIZE",
        help="size of a commit-log segment; default: an existing store's own, else 1GiB",
    )
    store.add_argument(
        "--consumequeue-entries-per-file",
        type=int,
        metavar="N",
        help="entries per consume-queue file; default: an existing store's own, else 300000",
    )
    store.add_argument("--flush-interval-ms", type=duration_ms_flag, metavar="DURATION")
    store.add_argument("--sync-flush-timeout-ms", type=duration_ms_flag, metavar="DURATION")
    store.add_argument("--checkpoint-interval-ms", type=duration_ms_flag, metavar="DURATION")
    store.add_argument("--file-reserved-ms", type=duration_ms_flag, metavar="DURATION")
    store.add_argument(
        "--cleanup-interval-ms",
        type=duration_ms_flag,
        metavar="DURATION",
        help="how often housekeeping checks the free space and deletes expired segments",
    )
    store.add_argument("--disk-max-used-ratio", type=float, metavar="RATIO")
    store.add_argument("--offsets-persist-interval-ms", type=duration_ms_flag, metavar="DURATION")
    store.add_argument(
        "--force-empty-offsets",
        action="store_true",
        default=None,
        help="start with no consumer offsets when both offset files are unreadable",
    )
    store.add_argument(
        "--no-message-index",
        dest="message_index",
        action="store_false",
        default=None,
        help="keep no index/ of messages by key (RocketMQ's messageIndexEnable=false)",
    )
    store.add_argument(
        "--index-hash-slots",
        type=int,
        metavar="N",
        help="hash slots per index file, RocketMQ's maxHashSlotNum (default 5000000); a "
        "store's index is read with the sizes it was made with",
    )
    store.add_argument(
        "--index-max-entries",
        type=int,
        metavar="N",
        help="keys per index file, RocketMQ's maxIndexNum (default 20000000)",
    )
    store.add_argument(
        "--max-open-descriptors",
        type=_positive_int,
        metavar="N",
        help="descriptors the store's files hold at once at most, the least recently used "
        "closed to make room (default: the process's file limit, raised to its hard limit "
        "at start, less 256 for connections)",
    )

    parser.add_argument(
        "--log-level",
        type=str.upper,
        choices=("DEBUG", "INFO", "WARNING", "ERROR"),
        default="INFO",
    )


REMOTING_DEFAULT_PORT = 9876
_REMOTING_OFF = -1


def _remoting_port(text: str) -> int:
    if text.lower() == "off":
        return _REMOTING_OFF
    if not text.isdigit() or int(text) > 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port (0..65535) or 'off'")
    return int(text)


def _positive_int(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of 1 or more")
    return int(text)


def _port(text: str) -> int:
    if not text.isdigit() or int(text) > 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port (0..65535)")
    return int(text)


def _name_servers(text: str) -> tuple[str, ...]:
    try:
        return parse_name_servers(text)
    except InvalidArgumentError as exc:
        raise argparse.ArgumentTypeError(
            str(exc).removeprefix("--namesrv-addr").lstrip(": ")
        ) from None


def _default_remoting_port(args: argparse.Namespace) -> int | None:
    """The flag's port; without the flag RocketMQ's 9876 when no one listens there."""
    if args.remoting_port == _REMOTING_OFF:
        return None
    if args.remoting_port is not None:
        return args.remoting_port
    probe = socket.socket(socket.AF_INET6 if ":" in args.host else socket.AF_INET)
    try:
        probe.bind((args.host, REMOTING_DEFAULT_PORT))
    except OSError:
        logging.getLogger("rmq_spark.broker").info(
            "port %d is taken: the remoting protocol is off (choose a port with --remoting-port)",
            REMOTING_DEFAULT_PORT,
        )
        return None
    finally:
        probe.close()
    return REMOTING_DEFAULT_PORT


def config_from_args(args: argparse.Namespace) -> BrokerConfig:
    """A validated BrokerConfig (store settings included); InvalidArgumentError if bad."""
    config = BrokerConfig(
        store_dir=args.store,
        name=args.name,
        cluster=args.cluster,
        broker_id=args.broker_id,
        namesrv_addrs=args.namesrv_addr,
        host=args.host,
        port=args.port,
        remoting_port=_default_remoting_port(args),
        http_port=args.http_port,
        short_circuit_socket=None
        if args.short_circuit_socket.lower() == "off"
        else args.short_circuit_socket,
        advertised_endpoint=args.advertised_endpoint,
        flush_mode=args.flush,
        broker_perm=args.broker_perm,
        auto_create_topics=args.auto_create_topics,
        property_filter=args.property_filter,
        default_topic_queues=args.default_topic_queues,
        max_message_bytes=args.max_message_bytes,
        max_request_bytes=args.max_request_bytes,
        max_response_bytes=args.max_response_bytes,
        max_pull_messages=args.max_pull_messages,
        max_pull_bytes=args.max_pull_bytes,
        max_suspend_timeout_ms=args.max_suspend_timeout_ms,
        max_batch_messages=args.max_batch_messages,
        max_request_items=args.max_request_items,
        max_inflight_send_bytes=args.max_inflight_send_bytes,
        max_subscription_chars=args.max_subscription_chars,
        max_heartbeat_selectors=args.max_heartbeat_selectors,
        max_consumer_groups=args.max_consumer_groups,
        consumer_session_timeout_ms=args.session_timeout_ms,
        queue_lock_lease_ms=args.lock_lease_ms,
        max_reconsume_times=args.max_reconsume_times,
        delay_levels=args.delay_levels,
        worker_threads=args.worker_threads,
        transaction_check_after_ms=args.transaction_check_after_ms,
        transaction_check_interval_ms=args.transaction_check_interval_ms,
        transaction_max_checks=args.transaction_max_checks,
        sink_transaction_timeout_ms=args.sink_transaction_timeout_ms,
        store_options={
            name: getattr(args, name) for name in _STORE_FLAGS if getattr(args, name) is not None
        },
        tls_cert_file=args.tls_cert,
        tls_key_file=args.tls_key,
        tls_client_ca_file=args.tls_client_ca,
        acl_file=args.acl,
        insecure=args.insecure,
    )
    config.store_config()  # the store's own checks, now rather than after binding the port
    config.check_files()  # TLS files readable and matching, the ACL file there
    return config


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # One line, no usage dump: the message names the flag; --help has the rest.
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _announce(server: BrokerServer) -> None:
    config = server.broker.config
    remoting = "" if server.remoting_port is None else f"remoting={server.remoting_address} "
    http = "" if server.http_port is None else f"http={config.host}:{server.http_port} "
    print(
        f"rocketlite broker {config.name} listening on {config.host}:{server.port} "
        f"{remoting}{http}store={config.store_dir}",
        flush=True,
    )


def run(args: argparse.Namespace) -> int:
    """Run a broker from parsed flags (shared with ``rocketlite broker``); an exit code."""
    logging.basicConfig(
        level=args.log_level, format=LOG_FORMAT, datefmt="%Y-%m-%d %H:%M:%S", stream=sys.stderr
    )
    _dump_stacks_on_sigusr1()
    raise_file_limit()
    try:
        config = config_from_args(args)
        faults.install_from_environment()  # test-only fault injection, off unless set
    except InvalidArgumentError as exc:
        print(f"{PROG}: error: {exc} (see --help)", file=sys.stderr, flush=True)
        return 2
    try:
        serve(config, on_started=_announce)
    except (RocketliteError, OSError) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr, flush=True)
        return 1
    return 0


def _dump_stacks_on_sigusr1() -> None:
    """SIGUSR1 writes every thread's Python stack to the log (stderr): a hung broker tells
    where it waits without a debugger. Skipped where stderr is no file (the broker run
    inside another program that captures it) or the platform has no SIGUSR1."""
    try:
        faulthandler.register(signal.SIGUSR1, file=sys.stderr.fileno(), all_threads=True)
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is both
        pass


def main(argv: list[str] | None = None) -> int:
    parser = _Parser(prog=PROG, description="Run a rocketlite broker in the foreground.")
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
