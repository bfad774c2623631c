"""The ``rocketlite`` command: run a broker, manage topics, send, consume, inspect offsets.

Every subcommand except ``broker`` talks to brokers over gRPC through ``rmq_spark.client``.
Output is a readable table by default and JSON with ``--json``; an error prints one line
(``error: ...``) and exits non-zero.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from rmq_spark.errors import RocketliteError

if TYPE_CHECKING:
    from rmq_spark.structs import MessageQueue

DEFAULT_ENDPOINTS = "127.0.0.1:10911"


# -- output ------------------------------------------------------------------------------


def print_table(rows: Sequence[dict], columns: Sequence[str], out=None) -> None:
    """Print ``rows`` as an aligned table with ``columns`` as headers."""
    out = out or sys.stdout
    cells = [[_cell(row.get(c)) for c in columns] for row in rows]
    widths = [max([len(c), *(len(r[i]) for r in cells)]) for i, c in enumerate(columns)]
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip(), file=out)
    for r in cells:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip(), file=out)


def _cell(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.1f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return str(value)


def print_json_lines(rows: Iterable[dict], out=None) -> None:
    out = out or sys.stdout
    for row in rows:
        out.write(json.dumps(row, ensure_ascii=False, default=_json_default) + "\n")
    out.flush()


def _json_default(value):
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode()
    raise TypeError(f"cannot serialise {type(value).__name__}")


def body_text(body: bytes) -> str:
    """A body as text when it is UTF-8, else as base64 marked so."""
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(body).decode()


# -- subcommands --------------------------------------------------------------------------


def cmd_broker(args) -> int:
    from rmq_spark.broker.__main__ import run

    return run(args)


def tls_settings(args) -> dict:
    """The ClientConfig TLS fields from ``--tls``, ``--tls-ca-file``, ``--tls-cert-file`` and
    ``--tls-key-file`` (checked: a file flag needs ``--tls``, cert and key go together)."""
    given = [
        flag
        for flag, value in (
            ("--tls-ca-file", args.tls_ca_file),
            ("--tls-cert-file", args.tls_cert_file),
            ("--tls-key-file", args.tls_key_file),
        )
        if value is not None
    ]
    if given and not args.tls:
        raise RocketliteError(f"{given[0]} needs --tls")
    if (args.tls_cert_file is None) != (args.tls_key_file is None):
        raise RocketliteError("--tls-cert-file and --tls-key-file go together")
    return {
        "tls": args.tls,
        "tls_ca_file": args.tls_ca_file,
        "tls_cert_file": args.tls_cert_file,
        "tls_key_file": args.tls_key_file,
    }


def _client_config(args):
    from rmq_spark.client import ClientConfig

    return ClientConfig(**tls_settings(args))


def cmd_topic(args) -> int:
    from rmq_spark.client import Admin

    with Admin(args.endpoints, _client_config(args)) as admin:
        if args.action == "create":
            admin.create_topic(
                args.topic,
                queues=args.queues,
                perm=args.perm,
                message_type=args.message_type or "NORMAL",
            )
            print(f"created topic {args.topic} with {args.queues} queues on every broker")
        elif args.action == "update":
            admin.update_topic(
                args.topic, queues=args.queues, perm=args.perm, message_type=args.message_type
            )
            print(f"updated topic {args.topic}")
        elif args.action == "delete":
            admin.delete_topic(args.topic)
            print(f"deleted topic {args.topic}")
        elif args.action == "list":
            topics = admin.list_topics(include_system=args.all)
            rows = [_topic_row(info) for infos in topics.values() for info in infos]
            columns = ["topic", "broker", "readQueues", "writeQueues", "perm", "messageType"]
            _emit(args, rows, columns)
        elif args.action == "describe":
            route = admin.describe_topic(args.topic)
            rows = [
                {
                    "topic": mq.topic,
                    "broker": mq.broker_name,
                    "queueId": mq.queue_id,
                    "perm": _perm_text(perm),
                    "endpoint": route.brokers[mq.broker_name].endpoint,
                }
                for mq, perm in sorted(route.queues.items())
            ]
            _emit(args, rows, ["topic", "broker", "queueId", "perm", "endpoint"])
    return 0


def _topic_row(t) -> dict:
    return {
        "topic": t.topic,
        "broker": t.broker_name,
        "readQueues": t.read_queue_nums,
        "writeQueues": t.write_queue_nums,
        "perm": _perm_text(t.perm),
        "messageType": t.message_type,
    }


def _perm_text(perm) -> str:
    return {2: "write", 4: "read", 6: "read+write"}.get(int(perm), str(int(perm)))


def _emit(args, rows: list[dict], columns: list[str]) -> None:
    if args.json:
        print_json_lines(rows)
    else:
        print_table(rows, columns)


def cmd_send(args) -> int:
    from rmq_spark.client import Message, Producer, ProducerConfig

    properties = dict(_parse_property(p) for p in args.property)
    bodies: Iterable[bytes]
    from_stdin = not args.body
    if from_stdin:
        bodies = (line.rstrip("\n").encode() for line in sys.stdin)
    else:
        bodies = (b.encode() for b in args.body)
    sent = 0
    started = time.monotonic()
    rows = []
    with Producer(args.endpoints, config=ProducerConfig(**tls_settings(args))) as producer:
        for chunk in _chunks(bodies, 256 if from_stdin else len(args.body)):
            messages = [
                Message(body, tags=args.tag, keys=args.key or None, properties=properties)
                for body in chunk
            ]
            results = producer.send_batch(
                args.topic,
                messages,
                queue=args.queue,
                sharding_key=args.sharding_key,
                delay_level=args.delay_level,
            )
            sent += len(results)
            chunk_rows = [
                {
                    "msgId": r.msg_id,
                    "offsetMsgId": r.offset_msg_id,
                    "broker": r.message_queue.broker_name,
                    "queueId": r.message_queue.queue_id,
                    "queueOffset": r.queue_offset,
                }
                for r in results
            ]
            if not from_stdin:
                rows.extend(chunk_rows)
            elif args.json:  # stream: stdin may be endless
                print_json_lines(chunk_rows)
            else:
                _progress(f"sent {sent:,} messages ({sent / (time.monotonic() - started):,.0f}/s)")
    if not from_stdin:
        _emit(args, rows, ["msgId", "broker", "queueId", "queueOffset", "offsetMsgId"])
    elif not args.json:
        _progress(None)
        print(f"sent {sent:,} messages to {args.topic}")
    return 0


def _chunks(items: Iterable, size: int):
    chunk = []
    for item in items:
        chunk.append(item)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _progress(text: str | None) -> None:
    if not sys.stderr.isatty():
        return
    sys.stderr.write("\r\033[K" + (text or ""))
    sys.stderr.flush()


def _parse_property(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise RocketliteError(f"--property {text!r} is not NAME=VALUE")
    return name, value


def cmd_consume(args) -> int:
    from rmq_spark.client import ConsumerConfig, PullConsumer

    # Check --from before connecting, so a typo is reported as such.
    start = args.start
    if start is None and args.group is None:
        start = "earliest"
    timestamp = None if start in (None, "earliest", "latest") else _parse_timestamp(start)
    shown = 0
    interrupted = False
    # Without --from, a group resumes at its committed offsets (queues it never committed
    # start at the beginning), like a RocketMQ consumer with CONSUME_FROM_FIRST_OFFSET.
    config = ConsumerConfig(consume_from="FIRST_OFFSET", **tls_settings(args))
    with PullConsumer(
        args.endpoints, group=args.group, subscription=args.tag, config=config
    ) as consumer:
        queues = consumer.queues(args.topic)
        consumer.assign(queues)
        if timestamp is not None:
            consumer.seek_to_timestamp(queues, timestamp)
        elif start == "earliest":
            consumer.seek_to_beginning(queues)
        elif start == "latest":
            consumer.seek_to_end(queues)
        # Pulled but not printed yet, per queue: put back before committing (--max, Ctrl-C),
        # so the group's next read starts at the first message nobody saw.
        unprinted: list[tuple[MessageQueue, list[dict], int]] = []
        before_poll: dict[MessageQueue, int] = {}
        try:
            idle_since = time.monotonic()
            while args.max is None or shown < args.max:
                before_poll = {mq: consumer.position(mq) for mq in queues}
                results = consumer.poll(timeout_ms=500)
                unprinted = [
                    (r.message_queue, _message_rows(r.batch, r.message_queue.broker_name), 0)
                    for r in results
                ]
                before_poll = {}
                got = False
                while unprinted and (args.max is None or shown < args.max):
                    mq, rows, done = unprinted[0]
                    if done == len(rows):
                        unprinted.pop(0)
                        continue
                    _print_message(args, rows[done])
                    unprinted[0] = (mq, rows, done + 1)
                    shown += 1
                    got = True
                if got:
                    idle_since = time.monotonic()
                elif args.idle_exit_ms is not None and (
                    (time.monotonic() - idle_since) * 1000 >= args.idle_exit_ms
                ):
                    break
        except KeyboardInterrupt:
            interrupted = True
        for mq, offset in before_poll.items():  # interrupted inside poll: nothing printed
            consumer.seek(mq, offset)
        for mq, rows, done in unprinted:
            if done < len(rows):
                consumer.seek(mq, rows[done]["queueOffset"])
        if args.group:
            consumer.commit()
    if not args.json:
        print(f"-- {shown} message(s)", file=sys.stderr)
    return 130 if interrupted else 0


def _parse_timestamp(text: str) -> int:
    if not text.isdigit():
        raise RocketliteError(
            f"--from {text!r} is not earliest, latest or a store timestamp in epoch ms"
        )
    return int(text)


def _message_rows(batch, broker_name: str) -> list[dict]:
    data = batch.to_pydict()
    rows = []
    for i in range(batch.num_rows):
        rows.append(
            {
                "topic": data["topic"][i],
                "brokerName": broker_name,
                "queueId": data["queueId"][i],
                "queueOffset": data["queueOffset"][i],
                "msgId": data["msgId"][i],
                "tags": data["tags"][i],
                "keys": data["keys"][i],
                "storeTimestamp": data["storeTimestamp"][i],
                "reconsumeTimes": data["reconsumeTimes"][i],
                "properties": dict(data["properties"][i] or []),
                "body": body_text(data["body"][i]),
            }
        )
    return rows


def _print_message(args, row: dict) -> None:
    if args.json:
        print_json_lines([row])
    else:
        tags = f" [{row['tags']}]" if row["tags"] else ""
        print(f"{row['brokerName']}/{row['queueId']}@{row['queueOffset']}{tags} {row['body']}")
        sys.stdout.flush()


def cmd_offsets(args) -> int:
    from rmq_spark.client import Admin

    with Admin(args.endpoints, _client_config(args)) as admin:
        progress = admin.consumer_progress(args.group, topic=args.topic)
    rows = [
        {
            "topic": p.message_queue.topic,
            "broker": p.message_queue.broker_name,
            "queueId": p.message_queue.queue_id,
            "committed": p.committed_offset,
            "min": p.broker_min_offset,
            "max": p.broker_max_offset,
            "lag": p.lag,
        }
        for p in progress
    ]
    if args.json:
        print_json_lines(rows)
    else:
        print_table(rows, ["topic", "broker", "queueId", "committed", "min", "max", "lag"])
        print(f"total lag: {sum(r['lag'] for r in rows):,}")
    return 0


def cmd_message(args) -> int:
    from rmq_spark.client import Admin

    with Admin(args.endpoints, _client_config(args)) as admin:
        batch, broker_name = admin.view_message(args.msg_id)
    row = _message_rows(batch, broker_name)[0]
    if args.json:
        print_json_lines([row])
    else:
        for key, value in row.items():
            print(f"{key:>15}: {value}")
    return 0


def _read_secret(args) -> str:
    """The new user's secret: ``--secret-file``, else a prompt without echo on a terminal,
    else one line of stdin. Never printed."""
    if args.secret_file:
        try:
            with open(args.secret_file, encoding="utf-8") as f:
                secret = f.read().strip()
        except OSError as exc:
            raise RocketliteError(f"--secret-file {args.secret_file}: {exc.strerror}") from None
    elif sys.stdin.isatty():
        import getpass

        secret = getpass.getpass(f"secret for {args.name}: ")
        if getpass.getpass("again: ") != secret:
            raise RocketliteError("the two secrets differ")
    else:
        secret = sys.stdin.readline().rstrip("\r\n")
    if not secret:
        raise RocketliteError("the secret is empty")
    return secret


def cmd_user(args) -> int:
    from rmq_spark.client import Admin

    with Admin(args.endpoints, _client_config(args)) as admin:
        if args.action == "create":
            if not args.name:
                raise RocketliteError("user create needs a NAME")
            brokers = admin.create_user(args.name, _read_secret(args), super_user=args.super)
            kind = "super user" if args.super else "user"
            print(f"created {kind} {args.name} on {', '.join(brokers)}")
        elif args.action == "delete":
            if not args.name:
                raise RocketliteError("user delete needs a NAME")
            brokers = admin.delete_user(args.name)
            print(f"deleted user {args.name} on {', '.join(brokers)}")
        else:
            rows = [
                {
                    "user": u.username,
                    "broker": u.broker_name,
                    "type": u.user_type,
                    "status": "enabled" if u.enabled else "disabled",
                    "secretSource": u.secret_source,
                }
                for u in admin.list_users()
            ]
            _emit(args, rows, ["user", "broker", "type", "status", "secretSource"])
    return 0


def cmd_acl(args) -> int:
    from rmq_spark.client import Admin

    with Admin(args.endpoints, _client_config(args)) as admin:
        if args.action in ("grant", "revoke") and not (args.user and args.resource):
            raise RocketliteError(f"acl {args.action} needs USER and RESOURCE")
        if args.action == "grant":
            if not args.actions:
                raise RocketliteError("acl grant needs --actions, e.g. --actions Pub,Sub")
            actions = [a for a in args.actions.split(",") if a.strip()]
            brokers = admin.grant(
                args.user, args.resource, actions, deny=args.deny, source_ips=args.source_ip
            )
            verb = "denied" if args.deny else "granted"
            print(
                f"{verb} {','.join(actions)} on {args.resource} to {args.user} "
                f"on {', '.join(brokers)}"
            )
        elif args.action == "revoke":
            brokers = admin.revoke(args.user, args.resource)
            print(f"revoked {args.resource} from {args.user} on {', '.join(brokers)}")
        else:
            rows = [
                {
                    "user": e.username,
                    "broker": e.broker_name,
                    "resource": e.resource,
                    "actions": ",".join(e.actions) if not args.json else list(e.actions),
                    "decision": e.decision,
                    "sourceIps": (",".join(e.source_ips) or None)
                    if not args.json
                    else list(e.source_ips),
                }
                for e in admin.list_acls(args.user)
            ]
            _emit(args, rows, ["user", "broker", "resource", "actions", "decision", "sourceIps"])
    return 0


# -- parser -------------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line (the message names the flag; --help has the rest).
    Subcommand parsers are of this class too (``add_subparsers`` uses the parent's)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The ``rocketlite`` parser; ``parser.subcommands`` maps names to subparsers."""
    parser = _Parser(prog="rocketlite", description=__doc__.splitlines()[0])
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
    consume.add_argument("--tag", default="*", help="subscription, e.g. 'TagA || TagB'")
    consume.add_argument("--max", type=int, default=None, help="stop after N messages")
    consume.add_argument("--group", default=None, help="commit positions for this group")
    consume.add_argument(
        "--idle-exit-ms",
        type=int,
        default=None,
        help="stop after this long without new messages (default: follow)",
    )
    consume.set_defaults(func=cmd_consume)

    offsets = client_parser("offsets", "committed offset, max offset and lag per queue")
    offsets.add_argument("group")
    offsets.add_argument("--topic", default=None)
    offsets.set_defaults(func=cmd_offsets)

    message = client_parser("message", "show one message by its offset message id")
    message.add_argument("msg_id")
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
    parser.subcommands = sub.choices  # type: ignore[attr-defined]
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    # gRPC's own log lines (e.g. one per failed TLS handshake) would follow our one-line
    # errors on stderr; keep its errors only, unless the user asked for more.
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["send"]:
        # BODY words may come after options (send T --tag A hello world): parse intermixed.
        args = parser.subcommands["send"].parse_intermixed_args(argv[1:])
        args.command = "send"
    else:
        args = parser.parse_args(argv)
    if args.command == "topic" and args.action != "list" and not args.topic:
        parser.error(f"topic {args.action} needs a TOPIC name")
    if args.command == "topic" and args.action == "create" and args.queues is None:
        args.queues = 4
    try:
        return args.func(args)
    except RocketliteError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
