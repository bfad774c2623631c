"""A push-consumer group member process for the push scale tests (``test_push_scale.py``).

Run as ``python -m tests.support.push_member --endpoint E --group G --topic T --out FILE
[--lease-ms 3000] [--persist-ms 500] [--work-ms 0]``. It starts a :class:`PushConsumer`
(CLUSTERING, ``avg``, from the first offset) with logging at INFO on stderr and a listener
that appends one line per delivered message to FILE::

    <msg_id> <queue_id> <queue_offset>

Each listener call writes its lines with one ``os.write`` on an ``O_APPEND`` descriptor
before it returns CONSUME_SUCCESS, so a line is on disk before its offset can be committed
and a SIGKILL loses at most the write in progress (whose messages were then not committed
either). Messages read from the group's retry topic are not written (the listener always
succeeds, so there are none).

On stdout: ``ready <client_id>`` once started. SIGTERM (or SIGINT) shuts the consumer down
cleanly (drain, commit, release) and exits 0; SIGKILL just kills it.
"""

from __future__ import annotations

import argparse
import logging
import os
import select
import signal
import sys
import time

from rmq_spark.client.push import ConsumeStatus, PushConsumer, PushConsumerConfig


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--out", required=True, help="file the delivered messages go to")
    parser.add_argument("--lease-ms", type=int, default=3000)
    parser.add_argument("--persist-ms", type=int, default=500)
    parser.add_argument("--work-ms", type=int, default=0, help="sleep per listener call")
    parser.add_argument("--long-poll-ms", type=int, default=1000)
    parser.add_argument("--drain-timeout-ms", type=int, default=10_000)
    args = parser.parse_args(argv)

    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s.%(msecs)03d %(levelname)s %(name)s [%(threadName)s] %(message)s",
        datefmt="%H:%M:%S",
    )
    log = logging.getLogger("push_member")

    fd = os.open(args.out, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    work_s = args.work_ms / 1000

    def listener(messages, _context):
        if work_s:
            time.sleep(work_s)
        lines = "".join(
            f"{m.msg_id} {m.message_queue.queue_id} {m.queue_offset}\n"
            for m in messages
            if not m.is_retry
        )
        if lines:
            os.write(fd, lines.encode())
        return ConsumeStatus.CONSUME_SUCCESS

    config = PushConsumerConfig(
        consume_from="FIRST_OFFSET",
        queue_lease_ms=args.lease_ms,
        long_poll_ms=args.long_poll_ms,
        persist_interval_ms=args.persist_ms,
        drain_timeout_ms=args.drain_timeout_ms,
    )
    consumer = PushConsumer(args.group, args.endpoint, strategy="avg", config=config)
    consumer.subscribe(args.topic)
    consumer.register_listener(listener)

    # The handler only notes the signal: it runs between two bytecodes of the main thread,
    # and setting an Event there could wait on the Event's lock the main thread holds. The
    # main thread waits on the wake-up pipe instead, where each signal writes a byte.
    signals: list[int] = []
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGTERM, lambda signum, _frame: signals.append(signum))
    signal.signal(signal.SIGINT, lambda signum, _frame: signals.append(signum))

    consumer.start()
    sys.stdout.write(f"ready {consumer.client_id}\n")
    sys.stdout.flush()
    while not signals:  # the handler has run once select returns for its byte
        select.select([wake_read], [], [])
        os.read(wake_read, 512)
    log.info("signal %d: shutting down", signals[0])
    started = time.monotonic()
    consumer.shutdown()
    log.info(
        "push_member %s shut down in %.2f s; stats %s",
        consumer.client_id,
        time.monotonic() - started,
        consumer.stats(),
    )
    os.close(fd)
    # A second SIGTERM now has nothing left to stop; let the exit code stay 0.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    return 0


if __name__ == "__main__":
    sys.exit(main())
