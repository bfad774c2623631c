"""The ``rocketlite`` command: run a broker, manage topics, send, consume, inspect offsets.

Every subcommand except ``broker`` talks to brokers over gRPC through ``rmq_spark.client``,
or, with ``--namesrv``, to a RocketMQ name server over the remoting protocol (topic list and
describe, send, consume, offsets, message --key). Output is a readable table by default
and JSON with ``--json``; an error prints one line (``error: ...``) and exits non-zero.

The parser is in :mod:`.parser`; the commands in :mod:`.commands` (data over gRPC),
:mod:`.namesrv` (the same over remoting) and :mod:`.security` (users and ACL entries);
printing in :mod:`.output`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from rmq_spark.cli.output import body_text, print_json_lines, print_table
from rmq_spark.cli.parser import DEFAULT_ENDPOINTS, build_parser, check_message_args
from rmq_spark.errors import RocketliteError

__all__ = [
    "DEFAULT_ENDPOINTS",
    "body_text",
    "build_parser",
    "main",
    "print_json_lines",
    "print_table",
]


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
    if args.command == "message":
        check_message_args(parser, args)
    if getattr(args, "namesrv", None):
        from rmq_spark.cli.namesrv import COMMANDS

        if args.command not in COMMANDS:
            parser.error(f"{args.command} does not take --namesrv; use --endpoints")
        args.func = COMMANDS[args.command]
    try:
        return args.func(args)
    except RocketliteError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
