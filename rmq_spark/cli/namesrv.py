"""The commands that also run against a RocketMQ name server (``--namesrv``): topic list and
describe, send, consume, offsets and message --key, over RocketMQ's remoting protocol, so
the command reads and writes an Apache RocketMQ cluster as it does rocketlite's brokers."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any

from rmq_spark.cli.commands import perm_text, send_messages, show_key_matches
from rmq_spark.cli.output import emit, message_rows, print_message
from rmq_spark.cli.settings import client_config, parse_timestamp
from rmq_spark.clock import monotonic_ms
from rmq_spark.errors import InvalidArgumentError, RocketliteError
from rmq_spark.filter import SQL92, compile_selector
from rmq_spark.names import SYSTEM_PREFIXES
from rmq_spark.structs import MessageQueue, PullStatus
from rmq_spark.wire.remoting.codes import PERM_READ, PERM_WRITE

if TYPE_CHECKING:
    import argparse

    from rmq_spark.client.remoting import RemotingClient, Route

#: the pause between two rounds of pulls that found nothing (follow mode)
IDLE_PAUSE_S = 0.25


def _client(args: argparse.Namespace) -> RemotingClient:
    from rmq_spark.client.remoting import RemotingClient

    return RemotingClient(args.namesrv, client_config(args))


def ns_topic(args: argparse.Namespace) -> int:
    if args.action not in ("list", "describe"):
        raise RocketliteError(
            f"topic {args.action} is not available with --namesrv; use mqadmin updateTopic / "
            "deleteTopic there, or --endpoints for rocketlite brokers"
        )
    with _client(args) as client:
        if args.action == "describe":
            route = client.route(args.topic)
            rows = [
                {
                    "topic": mq.topic,
                    "broker": mq.broker_name,
                    "queueId": mq.queue_id,
                    "perm": _perm(mq, route),
                    "address": route.reached_at(mq.broker_name),
                }
                for mq in sorted(set(route.readable) | set(route.writable))
            ]
            emit(args, rows, ["topic", "broker", "queueId", "perm", "address"])
            return 0
        names = [t for t in client.topics() if args.all or not t.startswith(SYSTEM_PREFIXES)]
        rows = []
        for name in names:
            try:
                route = client.route(name)
            except RocketliteError:
                continue  # a system topic no broker serves a route for
            for broker in sorted(route.replicas):
                rows.append(
                    {
                        "topic": name,
                        "broker": broker,
                        "readQueues": sum(q.broker_name == broker for q in route.readable),
                        "writeQueues": sum(q.broker_name == broker for q in route.writable),
                    }
                )
        emit(args, rows, ["topic", "broker", "readQueues", "writeQueues"])
    return 0


def _perm(mq: MessageQueue, route: Route) -> str:
    return perm_text(
        (PERM_READ if mq in route.readable else 0) | (PERM_WRITE if mq in route.writable else 0)
    )


def ns_send(args: argparse.Namespace) -> int:
    from rmq_spark.client.remoting import RemotingProducer

    if args.delay_level:
        raise RocketliteError("--delay-level is not available with --namesrv yet")
    with RemotingProducer(args.namesrv, config=client_config(args)) as producer:
        queue = None
        if args.queue is not None:
            brokers = sorted(producer.client.route(args.topic).addresses)
            queue = MessageQueue(args.topic, brokers[0], args.queue)
        return send_messages(
            args,
            lambda messages: producer.send_batch(
                args.topic, messages, queue=queue, sharding_key=args.sharding_key
            ),
        )


def ns_consume(args: argparse.Namespace) -> int:
    start = args.start or ("earliest" if args.group is None else None)
    timestamp = None if start in (None, "earliest", "latest") else parse_timestamp(start)
    expression, expression_type = args.tag, "TAG"
    if args.sql is not None:
        # compiled here first: an Apache RocketMQ broker answers a pull carrying a malformed
        # selector with every message, unfiltered
        selector = compile_selector(args.sql)
        if selector.newer_forms:
            raise InvalidArgumentError(
                f"--sql uses {'/'.join(sorted(selector.newer_forms))}, which RocketMQ brokers "
                "before 5.1.3 read as another selector (one that picks nothing); filter with "
                "=, IN, BETWEEN ... through --namesrv, or read rocketlite over --endpoints"
            )
        expression, expression_type = selector.text, SQL92
    shown = 0
    with _client(args) as client:
        queues = client.route(args.topic).readable
        positions = {mq: _start(client, mq, start, timestamp, args.group) for mq in queues}
        idle_since = monotonic_ms()
        try:
            while args.max is None or shown < args.max:
                got = False
                for mq in queues:
                    if args.max is not None and shown >= args.max:
                        break
                    wanted = 32 if args.max is None else min(32, args.max - shown)
                    answer = client.pull(
                        mq, positions[mq], max_messages=wanted, group=args.group,
                        expression=expression, expression_type=expression_type,
                    )  # fmt: skip
                    if answer.status == PullStatus.FOUND:
                        for row in message_rows(answer.records(), mq.broker_name):
                            print_message(args, row)
                            shown += 1
                            got = True
                    if answer.status != PullStatus.NO_NEW_MSG:  # moved on, or past a filter
                        positions[mq] = answer.next_begin_offset
                if got:
                    idle_since = monotonic_ms()
                elif args.idle_exit_ms is not None and (
                    monotonic_ms() - idle_since >= args.idle_exit_ms
                ):
                    break
                else:
                    time.sleep(IDLE_PAUSE_S)
        except KeyboardInterrupt:
            pass
        if args.group:
            for mq, offset in positions.items():
                client.commit_offset(args.group, mq, offset)
    if not args.json:
        print(f"-- {shown} message(s)", file=sys.stderr)
    return 0


def _start(
    client: RemotingClient,
    mq: MessageQueue,
    start: str | None,
    timestamp: int | None,
    group: str | None,
) -> int:
    if timestamp is not None:
        return client.offset_at(mq, timestamp)
    if start == "latest":
        return client.max_offset(mq)
    if start is None and group is not None:
        committed = client.committed_offset(group, mq)
        if committed is not None:
            return committed
    return client.min_offset(mq)


def ns_offsets(args: argparse.Namespace) -> int:
    if not args.topic:
        raise RocketliteError("offsets with --namesrv needs --topic: the group's topic to read")
    with _client(args) as client:
        rows: list[dict[str, Any]] = []
        for mq in client.route(args.topic).readable:
            low, high = client.min_offset(mq), client.max_offset(mq)
            committed = client.committed_offset(args.group, mq)
            rows.append(
                {
                    "topic": mq.topic,
                    "broker": mq.broker_name,
                    "queueId": mq.queue_id,
                    "committed": committed,
                    "min": low,
                    "max": high,
                    "lag": max(0, high - max(low, committed if committed is not None else low)),
                }
            )
    emit(args, rows, ["topic", "broker", "queueId", "committed", "min", "max", "lag"])
    if not args.json:
        print(f"total lag: {sum(r['lag'] for r in rows):,}")
    return 0


def ns_message(args: argparse.Namespace) -> int:
    if args.key is None:
        raise RocketliteError(
            "message MSG_ID is not available with --namesrv; use mqadmin queryMsgById there, "
            "or message --key KEY --topic TOPIC"
        )
    with _client(args) as client:
        return show_key_matches(args, client.query_messages)


COMMANDS = {
    "topic": ns_topic,
    "send": ns_send,
    "consume": ns_consume,
    "offsets": ns_offsets,
    "message": ns_message,
}
