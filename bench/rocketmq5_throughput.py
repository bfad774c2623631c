"""The official RocketMQ 5 Python client against rocketlite, next to rocketlite's own client
on the same broker in the same run.

    python bench/rocketmq5_throughput.py [--quick] [--rounds N] [--round-seconds S]

Cases, timed in interleaved rounds (A B, B A, ...), 100-byte bodies, one broker process:

* send, one message per call: the official ``Producer.send`` (apache.rocketmq.v2
  SendMessage) against rocketlite's ``Producer.send`` (rocketlite.v1 SendMessages);
* consume: the official ``SimpleConsumer.receive(32)`` + one ``ack`` per message (pop:
  every message is made invisible, then acknowledged, each step journaled; the Python
  client acks one message per call, and its ``ack_async`` returns no future to wait on),
  the same protocol with the 32 acks in one ``AckMessage`` (raw v2 stubs, as a client that
  batches acks would send them), against rocketlite's ``PullConsumer.pull(32)`` + one
  offset commit per batch.

It prints each case's median and spread over the rounds and the ratio to its baseline
(median of the per-round ratios). Both clients are pure-Python gRPC clients, so on a small
machine the figures include the client's own CPU next to the broker's.
"""

from __future__ import annotations

import argparse
import itertools
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import grpc
from _common import (
    Table,
    Timing,
    add_timing_args,
    broker_process,
    fmt_int,
    fmt_ratio,
    looped,
    measure_rates,
    paired_ratio,
    timing_from_args,
)
from rocketmq import (
    ClientConfiguration,
    Credentials,
    FilterExpression,
    Message,
    Producer,
    SimpleConsumer,
)
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol import service_pb2_grpc

from rmq_spark.client import Admin, PullConsumer
from rmq_spark.client import Producer as RocketliteProducer
from rmq_spark.structs import MessageQueue

DEFAULT = Timing(warmup_s=1.0, round_s=3.0, rounds=5)
QUICK = Timing(warmup_s=0.2, round_s=0.5, rounds=2)
BODY = b"x" * 100
QUEUES = 4


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_timing_args(parser, default=DEFAULT, quick=QUICK)
    timing = timing_from_args(parser.parse_args(argv), default=DEFAULT, quick=QUICK)
    work = Path(tempfile.mkdtemp(prefix="bench-v5-"))
    broker = broker_process(work / "store", work / "broker.log").start()
    try:
        return run(broker.endpoint, timing)
    finally:
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)


def run(endpoint: str, timing: Timing) -> int:
    with Admin(endpoint) as admin:
        admin.create_topic("bench-v5-send", queues=QUEUES)
        admin.create_topic("bench-v5-pop", queues=QUEUES)
        admin.create_topic("bench-v5-pull", queues=QUEUES)
    conf = ClientConfiguration(endpoint, Credentials(), request_timeout=10)
    official = Producer(conf, ("bench-v5-send", "bench-v5-pop"))
    official.startup()
    ours = RocketliteProducer(endpoint)
    try:
        send = send_cases(official, ours)
        send_results = measure_rates(send, timing)
        fill(ours, timing, send_results)
        consume = consume_cases(conf, endpoint)
        try:
            consume_results = measure_rates([c for c, _ in consume], timing)
        finally:
            for _, close in consume:
                close()
    finally:
        official.shutdown()
        ours.close()
    print(f"rocketlite broker, RocketMQ 5 client vs rocketlite client ({timing.describe()})")
    table = Table(
        [("case", "<"), ("msgs/s median", ">"), ("spread", ">"), ("vs rocketlite client", ">")]
    )
    rows = [
        ("send: official Producer.send", send_results[0], send_results[1]),
        ("send: rocketlite Producer.send", send_results[1], None),
        ("consume: official receive(32) + ack", consume_results[0], consume_results[2]),
        ("consume: v2 receive(32) + one 32-entry ack", consume_results[1], consume_results[2]),
        ("consume: rocketlite pull(32) + commit", consume_results[2], None),
    ]
    for name, result, baseline in rows:
        ratio = fmt_ratio(paired_ratio(result, baseline)) if baseline is not None else "1.00x"
        table.add(name, fmt_int(result.median), f"{result.spread:.0%}", ratio)
    table.print()
    return 0


def send_cases(official: Producer, ours: RocketliteProducer):
    def official_send() -> int:
        message = Message()
        message.topic = "bench-v5-send"
        message.body = BODY
        official.send(message)
        return 1

    def our_send() -> int:
        ours.send("bench-v5-send", BODY)
        return 1

    return [looped(official_send), looped(our_send)]


def fill(producer: RocketliteProducer, timing: Timing, sends) -> None:
    """Enough messages in both consume topics for every round of the faster consumer."""
    rounds = timing.rounds + 1
    need = int(max(r.best for r in sends) * 30 * timing.round_s * rounds) + 10_000
    need = min(need, 2_000_000)
    batch = [BODY] * 1000
    for topic in ("bench-v5-pop", "bench-v5-pull"):
        for i in range(0, need, 1000):
            producer.send_batch(topic, batch, queue=(i // 1000) % QUEUES)


def consume_cases(conf: ClientConfiguration, endpoint: str):
    simple = SimpleConsumer(
        conf, "bench-v5-pop", {"bench-v5-pop": FilterExpression()}, await_duration=5
    )
    simple.startup()

    def official_receive() -> int:
        messages = simple.receive(32, 60)
        for message in messages:
            simple.ack(message)
        return len(messages)

    channel = grpc.insecure_channel(endpoint)
    stub = service_pb2_grpc.MessagingServiceStub(channel)
    metadata = (("x-mq-client-id", "bench-v5-batch-acker"),)
    group = pb.Resource(name="bench-v5-pop")
    topic = pb.Resource(name="bench-v5-pop")
    receive = spb.ReceiveMessageRequest(
        group=group,
        message_queue=pb.MessageQueue(topic=topic, id=-1),
        filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
        batch_size=32,
    )
    receive.invisible_duration.FromSeconds(60)
    receive.long_polling_timeout.FromSeconds(5)

    def batch_acks() -> int:
        frames = stub.ReceiveMessage(receive, metadata=metadata, timeout=30)
        entries = [
            spb.AckMessageEntry(
                message_id=f.message.system_properties.message_id,
                receipt_handle=f.message.system_properties.receipt_handle,
            )
            for f in frames
            if f.HasField("message")
        ]
        if entries:
            ack = spb.AckMessageRequest(group=group, topic=topic, entries=entries)
            stub.AckMessage(ack, metadata=metadata, timeout=30)
        return len(entries)

    puller = PullConsumer(endpoint, group="bench-v5-pull")
    queues = [
        MessageQueue("bench-v5-pull", q.broker_name, q.queue_id)
        for q in puller.queues("bench-v5-pull")
    ]
    puller.assign(queues)
    puller.seek_to_beginning()
    rotation = itertools.cycle(queues)

    def our_pull() -> int:
        queue = next(rotation)
        result = puller.pull(queue, max_messages=32)
        puller.commit()
        return result.message_count

    return [
        (looped(official_receive), simple.shutdown),
        (looped(batch_acks), channel.close),
        (looped(our_pull), puller.close),
    ]


if __name__ == "__main__":
    sys.exit(main())
