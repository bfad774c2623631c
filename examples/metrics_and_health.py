"""Watching a broker: its HTTP port's health checks, Prometheus metrics and web console.

Starts a broker in-process with ``--http-port`` on a free loopback port, asks ``/readyz``
as a load balancer would, sends 300 orders and lets a consumer group take 200 of them and
commit 150, then scrapes ``/metrics`` as Prometheus does (parsed with prometheus-client's
own parser) and prints what an operator would graph: messages in and out, the group's lag
per queue in messages and in time, what it holds in flight. Run it as it is:

    python examples/metrics_and_health.py

With ``--serve SECONDS`` it then keeps the broker up that long: open the console address it
prints in a browser, or point Prometheus at the metrics address.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from rmq_spark.broker import BrokerConfig, create_server
from rmq_spark.client import Admin, Producer, PullConsumer
from rmq_spark.structs import MessageQueue


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as refused:  # 503 while not ready: a status, not a crash
        return refused.code, refused.read().decode()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--serve", type=float, default=0, metavar="SECONDS")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as store:
        server, _ = create_server(BrokerConfig(store, port=0, http_port=0))
        with server:
            http = f"http://127.0.0.1:{server.http_port}"
            print(f"broker {server.broker.name}: gRPC {server.endpoint}, HTTP {http}")
            status, reason = get(f"{http}/readyz")
            print(f"/readyz: {status} {reason.strip()}")
            traffic(server.endpoint, server.broker.name)
            show_metrics(http)
            print(f"console: {http}/   metrics: {http}/metrics")
            if args.serve > 0:
                print(f"serving for {args.serve:g} s (Ctrl-C to stop)")
                time.sleep(args.serve)


def traffic(endpoint: str, broker_name: str) -> None:
    """300 orders over 2 queues; group 'billing' takes 100 of each queue, commits 75."""
    with Admin(endpoint) as admin:
        admin.create_topic("orders", queues=2)
    with Producer(endpoint) as producer:
        for i in range(300):
            producer.send("orders", f"order-{i}".encode(), queue=i % 2)
    with PullConsumer(endpoint, group="billing") as consumer:
        queues = [MessageQueue("orders", broker_name, q) for q in range(2)]
        consumer.assign(queues)
        for mq in queues:
            consumer.seek(mq, 0)
            consumer.pull(mq, max_messages=100)
        consumer.commit({mq: 75 for mq in queues})


def show_metrics(http: str) -> None:
    _, text = get(f"{http}/metrics")
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }

    def one(name: str, **labels: str) -> float:
        return samples.get((name, tuple(sorted(labels.items()))), 0.0)

    print(f"messages in (orders): {one('rocketmq_messages_in_total', topic='orders'):.0f}")
    out = one("rocketmq_messages_out_total", topic="orders", consumer_group="billing")
    print(f"messages out to billing: {out:.0f}")
    for queue in ("0", "1"):
        labels = {"topic": "orders", "consumer_group": "billing", "queue_id": queue}
        print(
            f"billing on queue {queue}: lag {one('rocketmq_consumer_lag_messages', **labels):.0f}"
            f" messages ({one('rocketmq_consumer_lag_latency', **labels):.0f} ms), in flight"
            f" {one('rocketmq_consumer_inflight_messages', **labels):.0f}, ready"
            f" {one('rocketmq_consumer_ready_messages', **labels):.0f}"
        )


if __name__ == "__main__":
    main()
