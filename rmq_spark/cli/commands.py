"""The data commands over rocketlite's gRPC endpoints: broker, topic, send, consume,
offsets, message (with ``--namesrv`` some run over RocketMQ's remoting protocol instead:
:mod:`.namesrv`)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Protocol

from rmq_spark.cli.output import (
    emit,
    message_rows,
    print_json_lines,
    print_message,
    print_table,
    progress,
)
from rmq_spark.cli.settings import (
    chunks,
    client_config,
    parse_property,
    parse_timestamp,
    tls_settings,
)
from rmq_spark.clock import monotonic_ms
from rmq_spark.errors import NotFoundError

if TYPE_CHECKING:
    import argparse

    import pyarrow as pa

    from rmq_spark.client import Message, SendResult, TopicInfo
    from rmq_spark.structs import MessageQueue


class KeyQuery(Protocol):
    """``Admin.query_messages`` or ``RemotingClient.query_messages``: per broker that holds
    messages under a key, a batch of them and the broker's name."""

    def __call__(
        self,
        topic: str,
        key: str,
        *,
        max_count: int = ...,
        begin_ms: int | None = ...,
        end_ms: int | None = ...,
    ) -> list[tuple[pa.RecordBatch, str]]: ...


def cmd_broker(args: argparse.Namespace) -> int:
    from rmq_spark.broker.__main__ import run

    return run(args)


def cmd_topic(args: argparse.Namespace) -> int:
    from rmq_spark.client import Admin

    with Admin(args.endpoints, client_config(args)) as admin:
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
            emit(args, rows, columns)
        elif args.action == "describe":
            route = admin.describe_topic(args.topic)
            rows = [
                {
                    "topic": mq.topic,
                    "broker": mq.broker_name,
                    "queueId": mq.queue_id,
                    "perm": perm_text(perm),
                    "endpoint": route.brokers[mq.broker_name].endpoint,
                }
                for mq, perm in sorted(route.queues.items())
            ]
            emit(args, rows, ["topic", "broker", "queueId", "perm", "endpoint"])
    return 0


def _topic_row(t: TopicInfo) -> dict[str, Any]:
    return {
        "topic": t.topic,
        "broker": t.broker_name,
        "readQueues": t.read_queue_nums,
        "writeQueues": t.write_queue_nums,
        "perm": perm_text(t.perm),
        "messageType": t.message_type,
    }


def perm_text(perm: int) -> str:
    return {2: "write", 4: "read", 6: "read+write"}.get(int(perm), str(int(perm)))


def cmd_send(args: argparse.Namespace) -> int:
    from rmq_spark.client import Producer, ProducerConfig

    with Producer(args.endpoints, config=ProducerConfig(**tls_settings(args))) as producer:
        return send_messages(
            args,
            lambda messages: producer.send_batch(
                args.topic,
                messages,
                queue=args.queue,
                sharding_key=args.sharding_key,
                delay_level=args.delay_level,
            ),
        )


def send_messages(
    args: argparse.Namespace, send_batch: Callable[[list[Message]], list[SendResult]]
) -> int:
    """``send``'s loop, whichever producer ``send_batch`` is: the BODY words as one batch,
    or stdin's lines in batches of 256; a result table, JSON lines, or progress."""
    from rmq_spark.client import Message

    properties = dict(parse_property(p) for p in args.property)
    bodies: Iterable[bytes]
    from_stdin = not args.body
    if from_stdin:
        bodies = (line.rstrip("\n").encode() for line in sys.stdin)
    else:
        bodies = (b.encode() for b in args.body)
    sent = 0
    started = time.monotonic()
    rows = []
    for chunk in chunks(bodies, 256 if from_stdin else len(args.body)):
        messages = [
            Message(body, tags=args.tag, keys=args.key or None, properties=properties)
            for body in chunk
        ]
        results = send_batch(messages)
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
            progress(f"sent {sent:,} messages ({sent / (time.monotonic() - started):,.0f}/s)")
    if not from_stdin:
        emit(args, rows, ["msgId", "broker", "queueId", "queueOffset", "offsetMsgId"])
    elif not args.json:
        progress(None)
        print(f"sent {sent:,} messages to {args.topic}")
    return 0


def cmd_consume(args: argparse.Namespace) -> int:
    from rmq_spark.client import ConsumerConfig, PullConsumer

    # Check --from before connecting, so a typo is reported as such.
    start = args.start
    if start is None and args.group is None:
        start = "earliest"
    timestamp = None if start in (None, "earliest", "latest") else parse_timestamp(start)
    shown = 0
    interrupted = False
    # Without --from, a group resumes at its committed offsets (queues it never committed
    # start at the beginning), like a RocketMQ consumer with CONSUME_FROM_FIRST_OFFSET.
    config = ConsumerConfig(consume_from="FIRST_OFFSET", **tls_settings(args))
    with PullConsumer(
        args.endpoints, group=args.group, subscription=args.tag, config=config, sql=args.sql
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
            idle_since = monotonic_ms()
            while args.max is None or shown < args.max:
                before_poll = {mq: consumer.position(mq) for mq in queues}
                results = consumer.poll(timeout_ms=500)
                unprinted = [
                    (r.message_queue, message_rows(r.batch, r.message_queue.broker_name), 0)
                    for r in results
                ]
                before_poll = {}
                got = False
                while unprinted and (args.max is None or shown < args.max):
                    mq, rows, done = unprinted[0]
                    if done == len(rows):
                        unprinted.pop(0)
                        continue
                    print_message(args, rows[done])
                    unprinted[0] = (mq, rows, done + 1)
                    shown += 1
                    got = True
                if got:
                    idle_since = monotonic_ms()
                elif args.idle_exit_ms is not None and (
                    monotonic_ms() - idle_since >= args.idle_exit_ms
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


def cmd_offsets(args: argparse.Namespace) -> int:
    from rmq_spark.client import Admin

    with Admin(args.endpoints, client_config(args)) as admin:
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
        print(f"total lag: {sum(p.lag for p in progress):,}")
    return 0


def cmd_message(args: argparse.Namespace) -> int:
    from rmq_spark.client import Admin

    with Admin(args.endpoints, client_config(args)) as admin:
        if args.key is None:
            batch, broker_name = admin.view_message(args.msg_id)
            print_message_blocks(args, message_rows(batch, broker_name))
            return 0
        return show_key_matches(args, admin.query_messages)


def show_key_matches(args: argparse.Namespace, query_messages: KeyQuery) -> int:
    """Ask ``query_messages`` (``Admin``'s or ``RemotingClient``'s: per broker, a batch and
    its name) for the messages of ``message --key`` and print the newest ``--max`` of them;
    none found is an error."""
    found = query_messages(
        args.topic,
        args.key,
        max_count=args.max + 1,  # one more than shown: tells whether more match
        begin_ms=args.begin_ms,
        end_ms=args.end_ms,
    )
    rows = [row for batch, broker in found for row in message_rows(batch, broker)]
    if not rows:
        window = ""
        if args.begin_ms is not None or args.end_ms is not None:
            window = f" stored from {args.begin_ms or 0} to {args.end_ms or 'now'}"
        raise NotFoundError(
            f"no message of topic {args.topic!r} has key {args.key!r}{window} (a key is "
            "one of a message's KEYS, or its UNIQ_KEY; a message sent a moment ago may not "
            "be indexed yet)"
        )
    rows.sort(key=lambda row: row["storeTimestamp"], reverse=True)
    print_message_blocks(args, rows[: args.max])
    if not args.json:
        more = f"; more match: raise --max (now {args.max})" if len(rows) > args.max else ""
        print(f"-- {min(len(rows), args.max)} message(s){more}", file=sys.stderr)
    return 0


def print_message_blocks(args: argparse.Namespace, rows: list[dict[str, Any]]) -> None:
    """Messages as JSON lines, or one block of ``name: value`` lines each."""
    if args.json:
        print_json_lines(rows)
        return
    for i, row in enumerate(rows):
        if i:
            print()
        for key, value in row.items():
            print(f"{key:>15}: {value}")
