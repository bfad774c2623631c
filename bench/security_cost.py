"""What TLS and signed requests cost: the same sends and pulls against three brokers in
one run (plaintext, TLS, TLS with access control), rocketlite's own client.

    python bench/security_cost.py [--quick] [--rounds N] [--round-seconds S]

Cases, each timed in interleaved rounds (A B C, C B A, ...), 100-byte bodies:

* send: ``Producer.send``, one message per call (one signed call per message under ACL);
* pull: ``PullConsumer.pull(256)``, Arrow decode included, no commit.

It prints each case's median and spread and the ratio to the plaintext broker (median of
the per-round ratios). The test certificate authority is made on the fly with
``cryptography`` (a development dependency) and thrown away afterwards.
"""

from __future__ import annotations

import argparse
import itertools
import json
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _common import (
    ServerProcess,
    Table,
    Timing,
    add_timing_args,
    fmt_int,
    fmt_ratio,
    looped,
    measure_rates,
    paired_ratio,
    timing_from_args,
)

from rmq_spark.client import Admin, ClientConfig, Producer, ProducerConfig, PullConsumer
from rmq_spark.client.consumer import ConsumerConfig
from tests.support.tls_ca import make_pki

DEFAULT = Timing(warmup_s=1.0, round_s=2.0, rounds=5)
QUICK = Timing(warmup_s=0.1, round_s=0.2, rounds=2)
BODY = b"x" * 100
TOPIC = "bench-security"
PREFILL = 300_000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_timing_args(parser, default=DEFAULT, quick=QUICK)
    timing = timing_from_args(parser.parse_args(argv), default=DEFAULT, quick=QUICK)
    work = Path(tempfile.mkdtemp(prefix="bench-security-"))
    pki = make_pki(work / "pki")
    acl = work / "acl.json"
    acl.write_text(
        json.dumps({"users": [{"username": "bench", "password": "s", "userType": "Super"}]})
    )
    tls = ["--tls-cert", str(pki.server), "--tls-key", str(pki.server_key)]
    setups = {
        "plaintext": ([], {}),
        "TLS": (tls, {"tls": True, "tls_ca_file": str(pki.ca)}),
        "TLS + ACL": (
            [*tls, "--acl", str(acl)],
            {"tls": True, "tls_ca_file": str(pki.ca), "access_key": "bench", "secret_key": "s"},
        ),
    }
    brokers = []
    try:
        for i, (name, (flags, _)) in enumerate(setups.items()):
            argv = [sys.executable, "-m", "rmq_spark.broker", "--store", str(work / f"s{i}")]
            argv += ["--port", "0", "--log-level", "WARNING", "--name", f"b{i}", *flags]
            brokers.append(ServerProcess(name, argv, work / f"b{i}.log").start())
        return run(brokers, [config for _, config in setups.values()], list(setups), timing)
    finally:
        for broker in brokers:
            broker.stop()
        shutil.rmtree(work, ignore_errors=True)


def run(brokers, configs, names, timing: Timing) -> int:
    producers, pullers = [], []
    try:
        for broker, config in zip(brokers, configs, strict=True):
            with Admin(broker.endpoint, ClientConfig(**config)) as admin:
                admin.create_topic(TOPIC, queues=1)
            producer = Producer(broker.endpoint, config=ProducerConfig(**config))
            for _ in range(PREFILL // 1000):
                producer.send_batch(TOPIC, [BODY] * 1000, queue=0)
            producers.append(producer)
            puller = PullConsumer(broker.endpoint, config=ConsumerConfig(**config))
            queue = puller.queues(TOPIC)[0]
            puller.assign([queue])
            pullers.append((puller, queue))
        sends = [looped(sender(p)) for p in producers]
        pulls = [looped(reader(p, q)) for p, q in pullers]
        results = measure_rates([*sends, *pulls], timing)
    finally:
        for producer in producers:
            producer.close()
        for puller, _ in pullers:
            puller.close()
    count = len(brokers)
    print(f"cost of TLS and signed requests, rocketlite client ({timing.describe()})")
    table = Table([("case", "<"), ("msgs/s median", ">"), ("spread", ">"), ("vs plaintext", ">")])
    for kind, offset in (("send, 1 message per call", 0), ("pull(256), Arrow", count)):
        for i, name in enumerate(names):
            result = results[offset + i]
            ratio = paired_ratio(result, results[offset])
            table.add(f"{kind}: {name}", fmt_int(result.median), f"{result.spread:.0%}",
                      fmt_ratio(ratio))  # fmt: skip
    table.print()
    return 0


def sender(producer: Producer):
    def send() -> int:
        producer.send(TOPIC, BODY, queue=0)
        return 1

    return send


def reader(puller: PullConsumer, queue):
    offsets = itertools.cycle(range(0, PREFILL - 256, 256))

    def pull() -> int:
        puller.seek(queue, next(offsets))
        return puller.pull(queue, max_messages=256).message_count

    return pull


if __name__ == "__main__":
    sys.exit(main())
