"""The README's picture of the web console (docs/images/console.png), of a broker with
real traffic: a broker process, producers sending to three topics at changing rates for a
few minutes (the chart's samples are 10 s apart), a consumer group that keeps up and one
that falls behind, members over rocketlite.v1 and the remoting protocol, then headless
Chromium signed in as a super user, a group opened and a message looked up.

    .venv/bin/python scripts/console_screenshot.py [--minutes 4] [--out docs/images/console.png]

Needs Debian's chromium and chromium-driver (see tests/support/browser.py).
"""

from __future__ import annotations

import argparse
import base64
import json
import math
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import grpc  # noqa: E402
from rocketmq import FilterExpression, SimpleConsumer  # noqa: E402

from rmq_spark.client import Admin, ClientConfig, Message, Producer, PullConsumer  # noqa: E402
from rmq_spark.client.consumer import ConsumerConfig  # noqa: E402
from rmq_spark.client.groups import HeartbeatInfo, Subscription  # noqa: E402
from rmq_spark.client.producer import ProducerConfig  # noqa: E402
from rmq_spark.wire.proto_gen.rocketlite.v1 import groups_pb2_grpc  # noqa: E402
from tests.support import browser  # noqa: E402
from tests.support.console_broker import http_base, start_console_broker  # noqa: E402
from tests.support.remoting_member import RemotingMember  # noqa: E402
from tests.support.rocketmq5_harness import config, running  # noqa: E402

TOPICS = {"orders": 4, "payments": 4, "audit": 2}


def produce(endpoint: str, stop: threading.Event) -> None:
    """Batches to each topic, the rate rising and falling over a few minutes."""
    started = time.monotonic()
    with Producer(endpoint, config=ProducerConfig()) as producer:
        n = 0
        while not stop.is_set():
            phase = (time.monotonic() - started) / 90.0
            size = int(30 + 25 * math.sin(phase * math.pi))
            batch = [
                Message(
                    json.dumps({"order": n + i, "amount": (n + i) % 97}).encode(),
                    tags=("created", "paid")[(n + i) % 2],
                    keys=f"order-{n + i}",
                )
                for i in range(size)
            ]
            producer.send_batch("orders", batch)
            producer.send_batch("payments", batch[: size // 2])
            if n % 10 == 0:
                producer.send("audit", f"checked up to order {n}".encode(), keys=f"audit-{n}")
            n += size
            stop.wait(0.2)


def consume(endpoint: str, group: str, topic: str, per_pull: int, stop: threading.Event) -> None:
    """Read ``topic`` for ``group``, ``per_pull`` messages a queue a second, committing."""
    config = ConsumerConfig()
    with PullConsumer(endpoint, group=group, config=config) as consumer:
        queues = consumer.queues(topic)
        consumer.assign(queues)
        consumer.seek_to_beginning(queues)
        while not stop.is_set():
            for mq in queues:
                consumer.pull(mq, max_messages=per_pull)
            consumer.commit()
            stop.wait(1.0)


def members(broker, stop: threading.Event) -> None:
    """Members of ``billing`` over the remoting protocol and rocketlite.v1 (beating every
    10 s) and RocketMQ 5 (a simple consumer that receives nothing)."""
    remoting = RemotingMember(broker.remoting_address, "billing", "billing-java-1", broker.name)
    info = HeartbeatInfo("billing-py-1", "billing", (Subscription("orders", "paid"),))
    simple = SimpleConsumer(config(broker.endpoint), "billing", {"orders": FilterExpression("*")})
    try:
        with running(simple), grpc.insecure_channel(broker.endpoint) as channel:
            stub = groups_pb2_grpc.GroupServiceStub(channel)
            while not stop.is_set():
                remoting.heartbeat("orders")
                stub.Heartbeat(info.to_pb(), timeout=10)
                stop.wait(10)
    finally:
        remoting.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=4.0)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "images" / "console.png")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # stop the broker on the way out
    reason = browser.missing()
    if reason:
        print(f"cannot take the screenshot: {reason}", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        broker = start_console_broker(Path(tmp), acl=False, name="broker-a")
        stop = threading.Event()
        try:
            with Admin(broker.endpoint, ClientConfig()) as admin:
                for topic, queues in TOPICS.items():
                    admin.create_topic(topic, queues=queues)
            workers = [
                threading.Thread(target=produce, args=(broker.endpoint, stop)),
                threading.Thread(
                    target=consume, args=(broker.endpoint, "ledger", "payments", 64, stop)
                ),
                threading.Thread(
                    target=consume, args=(broker.endpoint, "billing", "orders", 6, stop)
                ),
                threading.Thread(target=members, args=(broker, stop)),
            ]
            for worker in workers:
                worker.start()
            print(f"traffic for {args.minutes} minutes ...", file=sys.stderr)
            time.sleep(args.minutes * 60)
            shoot(http_base(broker), args.out, Path(tmp) / "profile")
        finally:
            stop.set()
            broker.clean_up()
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


def shoot(base: str, out: Path, profile: Path) -> None:
    from selenium.webdriver.support.ui import Select, WebDriverWait

    driver = browser.start_chromium(profile, width=1280, height=1000)
    try:
        driver.get(base + "/")
        wait = WebDriverWait(driver, 20)
        wait.until(lambda d: d.find_elements("css selector", 'tr[data-group="billing"]'))
        wait.until(lambda d: d.find_elements("css selector", "#chart svg"))
        driver.find_element("css selector", 'tr[data-group="billing"]').click()
        Select(driver.find_element("id", "lookup-by")).select_by_value("key")
        driver.find_element("id", "lookup-topic").send_keys("orders")
        driver.find_element("id", "lookup-key").send_keys("order-42")
        driver.find_element("css selector", "#lookup button[type=submit]").click()
        wait.until(lambda d: d.find_elements("css selector", "#lookup-result .message"))
        driver.execute_script("window.scrollTo(0, 0)")
        time.sleep(0.5)
        # the whole page, beyond the window (Chromium's DevTools call)
        size = driver.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]
        clip = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
        shot = driver.execute_cdp_cmd(
            "Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True, "clip": clip}
        )
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(base64.b64decode(shot["data"]))
    finally:
        driver.quit()


if __name__ == "__main__":
    sys.exit(main())
