"""An official RocketMQ 5 push consumer (``rocketmq-python-client``) in a process of its own,
for the failover tests (``test_rocketmq5_failover.py``).

Run as ``python -m tests.support.rocketmq5_member --endpoint E --group G --topic T --out FILE
[--threads N]``. Its listener appends one line per message it is handed to FILE::

    <message group or -> <body>

with one ``os.write`` on an ``O_APPEND`` descriptor, and then blocks: every message it
received stays in flight (auto-renewed) for as long as the process lives.

On stdout: ``ready <client_id>`` once started. SIGTERM shuts the consumer down cleanly
(the listener stops blocking and every message it was handed or will be handed is acked,
then ``shutdown()`` tells the broker the client is leaving) and exits 0; SIGKILL just kills
it.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading

from rocketmq import (
    ClientConfiguration,
    ConsumeResult,
    Credentials,
    FilterExpression,
    MessageListener,
    PushConsumer,
)


class Blocking(MessageListener):
    def __init__(self, fd: int, release: threading.Event) -> None:
        self.fd = fd
        self.release = release

    def consume(self, message):
        group = message.message_group or "-"
        os.write(self.fd, f"{group} {message.body.decode()}\n".encode())
        self.release.wait()
        return ConsumeResult.SUCCESS


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--out", required=True, help="file the handed messages go to")
    parser.add_argument("--threads", type=int, default=20, help="consumption threads")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)

    fd = os.open(args.out, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    release = threading.Event()
    stop = threading.Event()
    consumer = PushConsumer(
        ClientConfiguration(args.endpoint, Credentials(), request_timeout=5),
        args.group,
        Blocking(fd, release),
        {args.topic: FilterExpression()},
        consumption_thread_count=args.threads,
    )

    def on_term(_signum, _frame) -> None:
        # a thread of its own: the handler runs inside the main thread's stop.wait()
        threading.Thread(target=lambda: (release.set(), stop.set()), daemon=True).start()

    signal.signal(signal.SIGTERM, on_term)
    consumer.startup()
    print(f"ready {consumer.client_id}", flush=True)
    stop.wait()
    consumer.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
