"""A broker process that schedules timer messages, for the timer's crash tests.

Run as ``python -m tests.support.timer_broker STORE_DIR TOPIC BODY@MS...``: it starts a
broker on the store (port 0, the test store settings), creates ``TOPIC`` (one queue) if
needed, schedules each ``BODY`` for delivery ``MS`` milliseconds from now (one message per
argument; a comma-separated ``A,B@MS`` is one batch), prints ``SCHEDULED <endpoint> <now>``
(``now``: the epoch ms the times count from) and runs until it is killed.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from rmq_spark.codec.properties import UNIQ_KEY, encode_properties
from tests.support.broker_harness import start_in_process_broker


def main(store_dir: str, topic: str, *specs: str) -> None:
    local = start_in_process_broker(Path(store_dir))
    broker = local.broker
    if broker.store.topics.find(topic) is None:
        broker.store.topics.create(topic, 1)
    now = time.time_ns() // 1_000_000
    for spec in specs:
        bodies, ms = spec.rsplit("@", 1)
        names = bodies.split(",")
        broker.timers.schedule(
            topic,
            0,
            [name.encode() for name in names],
            [encode_properties({UNIQ_KEY: f"ID-{name}"}) for name in names],
            [None] * len(names),
            now + int(ms),
        )
    print(f"SCHEDULED {local.endpoint} {now}", flush=True)
    while True:
        time.sleep(60)


if __name__ == "__main__":
    main(*sys.argv[1:])
