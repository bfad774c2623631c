"""The ``rocketlite`` argument parser."""

from __future__ import annotations

import argparse
from typing import NoReturn

from rmq_spark.cli.commands import (
    cmd_broker,
    cmd_consume,
    cmd_message,
    cmd_offsets,
    cmd_send,
    cmd_topic,
)
from rmq_spark.cli.security import cmd_acl, cmd_user
from rmq_spark.cli.store_inspect import add_parser as add_store_parser
from rmq_spark.units import duration_ms_flag

DEFAULT_ENDPOINTS = "127.0.0.1:10911"
DESCRIPTION = "The rocketlite command: run a broker, manage topics, send, consume, inspect offsets."


class CommandParser(argparse.ArgumentParser):
    """Usage errors as one line (the message names the flag; --help has the rest).
    Subcommand parsers are of this class too (``add_subparsers`` uses the parent's).
    ``subcommands`` maps each subcommand's name to its parser (set by :func:`build_parser`)."""

    subcommands: dict[str, argparse.ArgumentParser]

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def build_parser() -> CommandParser:
    """The ``rocketlite`` parser; ``parser.subcommands`` maps names to subparsers."""
    parser = CommandParser(prog="rocketlite", description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    from rmq_spark.broker.__main__ import add_arguments as add_broker_arguments

    broker = sub.add_parser("broker", help="run a broker in the foreground")
    add_broker_arguments(broker)
    broker.set_defaults(func=cmd_broker)

    def client_parser(name: str, help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text)
        p.add_argument(
            "--endpoints",
            default=DEFAULT_ENDPOINTS,
            help=f"comma-separated broker endpoints (default {DEFAULT_ENDPOINTS})",
        )
        p.add_argument(
            "--namesrv",
            metavar="HOST:PORT",
            default=None,
            help="a RocketMQ name server (an Apache RocketMQ cluster, or a rocketlite broker's "
            "remoting port) instead of --endpoints; for topic list/describe, send, consume, "
            "offsets and message --key",
        )
        p.add_argument("--json", action="store_true", help="JSON output (one object per line)")
        tls = p.add_argument_group("TLS")
        tls.add_argument("--tls", action="store_true", help="connect with TLS")
        tls.add_argument(
            "--tls-ca-file",
            metavar="FILE",
            help="PEM CA certificate(s) that signed the brokers' certificates (default: the "
            "system's trusted CAs)",
        )
        tls.add_argument(
            "--tls-cert-file", metavar="FILE", help="PEM client certificate (mutual TLS)"
        )
        tls.add_argument("--tls-key-file", metavar="FILE", help="PEM key of --tls-cert-file")
        return p

    topic = client_parser("topic", "create, update, list, describe or delete topics")
    topic.add_argument("action", choices=["create", "update", "list", "describe", "delete"])
    topic.add_argument("topic", nargs="?")
    topic.add_argument("--queues", type=int, default=None, help="queue count (create: 4)")
    topic.add_argument("--perm", type=int, choices=[2, 4, 6], default=None)
    topic.add_argument(
        "--message-type",
        type=str.upper,
        choices=["NORMAL", "FIFO", "DELAY", "TRANSACTION", "MIXED"],
        default=None,
        help="what RocketMQ 5 producers may send (create: NORMAL)",
    )
    topic.add_argument("--all", action="store_true", help="list: include %%RETRY%%/%%DLQ%%")
    topic.set_defaults(func=cmd_topic)

    send = client_parser("send", "send messages (no BODY: one message per stdin line)")
    send.add_argument("topic")
    send.add_argument("body", nargs="*")
    send.add_argument("--tag")
    send.add_argument("--key", action="append", default=[])
    send.add_argument("--property", action="append", default=[], metavar="NAME=VALUE")
    send.add_argument("--queue", type=int, default=None, help="explicit queue id")
    send.add_argument("--sharding-key", default=None)
    send.add_argument("--delay-level", type=int, default=0)
    send.set_defaults(func=cmd_send)

    consume = client_parser("consume", "print messages of a topic")
    consume.add_argument("topic")
    consume.add_argument(
        "--from",
        dest="start",
        default=None,
        help="earliest | latest | store timestamp in epoch ms (default: earliest, or the "
        "--group's committed offsets)",
    )
    by = consume.add_mutually_exclusive_group()
    by.add_argument("--tag", default="*", help="subscription, e.g. 'TagA || TagB'")
    by.add_argument(
        "--sql",
        default=None,
        metavar="SELECTOR",
        help="only messages RocketMQ's SQL92 selector picks by their properties, e.g. "
        "\"region = 'eu' AND amount > 100\" (filtered by the brokers)",
    )
    consume.add_argument("--max", type=int, default=None, help="stop after N messages")
    consume.add_argument("--group", default=None, help="commit positions for this group")
    consume.add_argument(
        "--idle-exit-ms",
        type=duration_ms_flag,
        default=None,
        metavar="DURATION",
        help="stop after this long without new messages: milliseconds, or with a unit (ms, s, "
        "m or min, h, d), e.g. 300 or 2s (default: follow)",
    )
    consume.set_defaults(func=cmd_consume)

    offsets = client_parser("offsets", "committed offset, max offset and lag per queue")
    offsets.add_argument("group")
    offsets.add_argument("--topic", default=None)
    offsets.set_defaults(func=cmd_offsets)

    message = client_parser(
        "message", "show a message by its offset message id, or the messages of a key"
    )
    message.add_argument("msg_id", nargs="?", help="an offset message id (offsetMsgId)")
    message.add_argument(
        "--key", default=None, help="find by key: one of KEYS, or a UNIQ_KEY (needs --topic)"
    )
    message.add_argument("--topic", default=None, help="the topic of --key")
    message.add_argument(
        "--max", type=int, default=64, help="--key: show at most N messages, the newest (64)"
    )
    message.add_argument(
        "--from", dest="begin_ms", type=int, default=None, metavar="MS",
        help="--key: stored at or after this time (epoch ms)",
    )  # fmt: skip
    message.add_argument(
        "--to", dest="end_ms", type=int, default=None, metavar="MS",
        help="--key: stored at or before this time (epoch ms)",
    )  # fmt: skip
    message.set_defaults(func=cmd_message)

    user = client_parser(
        "user", "create, delete or list the users of brokers run with --acl (super user)"
    )
    user.add_argument("action", choices=["create", "delete", "list"])
    user.add_argument("name", nargs="?")
    user.add_argument("--super", action="store_true", help="create: a super user")
    user.add_argument(
        "--secret-file",
        metavar="FILE",
        default=None,
        help="create: read the secret from FILE (default: prompt without echo on a "
        "terminal, else one line of stdin)",
    )
    user.set_defaults(func=cmd_user)

    acl = client_parser(
        "acl", "grant, revoke or list the ACL entries of users (brokers run with --acl)"
    )
    acl.add_argument("action", choices=["grant", "revoke", "list"])
    acl.add_argument("user", nargs="?")
    acl.add_argument(
        "resource", nargs="?", help="Topic:NAME, Topic:PREFIX*, Topic:*, Group:..., or *"
    )
    acl.add_argument(
        "--actions",
        default=None,
        help="grant: comma-separated, of Pub, Sub, Create, Update, Delete, Get, List, Any, All",
    )
    acl.add_argument("--deny", action="store_true", help="grant: deny instead of allow")
    acl.add_argument(
        "--source-ip",
        action="append",
        default=[],
        metavar="CIDR",
        help="grant: only from this network (repeatable; default anywhere)",
    )
    acl.set_defaults(func=cmd_acl)
    add_store_parser(sub)
    parser.subcommands = dict(sub.choices)
    return parser


def check_message_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """``message`` takes an offset message id, or --key with --topic: one of the two."""
    if args.key is None:
        if args.msg_id is None:
            parser.error("message needs an offset message id, or --key KEY --topic TOPIC")
        if args.topic is not None or args.begin_ms is not None or args.end_ms is not None:
            parser.error("message --topic, --from and --to go with --key")
        return
    if args.msg_id is not None:
        parser.error("message takes an offset message id or --key, not both")
    if not args.topic:
        parser.error("message --key needs --topic: keys are indexed per topic")
    if args.max < 1:
        parser.error(f"message --max {args.max} must be >= 1")
