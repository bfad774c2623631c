"""A writer process for the crash tests: appends deterministic messages until it is killed.

Run as ``python -m tests.support.crash_writer STORE_DIR [options]``. It opens (and so
recovers) the store in SYNC flush mode, creates the test topics if needed and appends
batches to random queues, continuing at each queue's current max offset. The content of
every message is a pure function of (topic, queue id, queue offset), see
:func:`expected_message`, so a test can check every record it finds, acknowledged or not.

Protocol on stdout, one line each, flushed:

* ``OPENING`` just before the store is opened (recovery runs inside the open);
* ``READY <pid>`` once it is open and the topics exist;
* ``ACK <topic> <queue id> <first queue offset> <count> <digest> <first phys> <last phys>``
  after each append has returned, i.e. after the batch was fsynced. ``digest`` is
  :func:`batch_digest` of the batch's messages; the physical offsets are where the first and
  the last record of the batch start in the commit log;
* ``DONE`` after ``--batches`` batches when that option is given; the writer then keeps the
  store open (and its directory locked) until it is killed;
* ``TEARING <topic> <queue id> <first queue offset> <count>`` with ``--tear-after N``: after
  N batches the next one is written only up to the middle of its first message's properties,
  then the writer kills itself with SIGKILL, as if the kill had arrived during the write.

A line that does not end with a newline was cut by the kill and acknowledges nothing.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import signal
import sys
import time

#: topic name -> queue count; the writer spreads its batches over all of these queues
TOPICS = {"CrashOrders": 3, "CrashAudit": 2, "Crash_Single-Queue": 1}
#: TAGS values (None = no TAGS property); non-ASCII ones exercise the UTF-16 tag hash
TAG_CHOICES = (None, "TagA", "TagB", "订单", "emoji-\U0001f600", "with space")


def message_seed(topic: str, queue_id: int, queue_offset: int) -> bytes:
    return hashlib.blake2b(f"{topic}/{queue_id}/{queue_offset}".encode(), digest_size=16).digest()


def expected_message(
    topic: str, queue_id: int, queue_offset: int
) -> tuple[bytes, bytes, str | None]:
    """(body, encoded properties, TAGS value) of the message at this queue offset.

    Bodies are empty (5%), short (55%), up to 2 KB (35%) or 2-6 KB (5%) long.
    """
    from rmq_spark.codec.properties import encode_properties

    seed = message_seed(topic, queue_id, queue_offset)
    kind = seed[0] % 20
    spread = int.from_bytes(seed[1:3], "big")
    if kind == 0:
        length = 0
    elif kind < 12:
        length = 1 + spread % 200
    elif kind < 19:
        length = 200 + spread % 1800
    else:
        length = 2000 + spread % 4000
    header = f"{topic}/{queue_id}/{queue_offset}|".encode()
    body = (header + seed * (length // len(seed) + 1))[:length]
    tag = TAG_CHOICES[seed[3] % len(TAG_CHOICES)]
    props: dict[str, str] = {}
    if tag is not None:
        props["TAGS"] = tag
    props["KEYS"] = f"k{queue_offset} {seed[4:8].hex()}"
    props["UNIQ_KEY"] = seed.hex().upper()
    return body, encode_properties(props), tag


def batch_digest(bodies: list[bytes], properties: list[bytes]) -> str:
    """A short digest of a batch's bodies and properties (order and boundaries included)."""
    h = hashlib.blake2b(digest_size=8)
    for body, props in zip(bodies, properties, strict=True):
        h.update(len(body).to_bytes(4, "big"))
        h.update(body)
        h.update(len(props).to_bytes(4, "big"))
        h.update(props)
    return h.hexdigest()


def store_config(store_dir: str, segment_bytes: int, cq_entries: int, checkpoint_ms: int):
    from rmq_spark.store import StoreConfig

    return StoreConfig(
        store_dir,
        flush_mode="SYNC",
        commitlog_segment_bytes=segment_bytes,
        consumequeue_entries_per_file=cq_entries,
        checkpoint_interval_ms=checkpoint_ms,
    )


def tear_next_commitlog_write(first_properties: bytes) -> None:
    """Make the next commit-log write stop inside ``first_properties`` and die by SIGKILL.

    The kernel ends a write interrupted by SIGKILL between pages; this reproduces the worst
    such cut for the store: the record's body (the only part BODYCRC covers) and lengths are
    all written, and its properties are not.
    """
    from rmq_spark.store import mapped_file

    original = mapped_file.MappedFile.write_at

    def write_at(self, pos, *chunks):
        if self.path.parent.name != "commitlog":
            return original(self, pos, *chunks)
        data = b"".join(bytes(c) for c in chunks)
        at = data.find(first_properties)
        assert at >= 0, "the torn write must hold the first message's properties"
        original(self, pos, data[: at + len(first_properties) - 3])
        os.kill(os.getpid(), signal.SIGKILL)

    mapped_file.MappedFile.write_at = write_at


def _batch_size(rng: random.Random) -> int:
    roll = rng.random()
    if roll < 0.2:
        return 1
    if roll < 0.6:
        return rng.randint(2, 8)
    return rng.randint(9, 64)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store_dir")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--segment-bytes", type=int, default=64 * 1024)
    parser.add_argument("--cq-entries", type=int, default=64)
    parser.add_argument("--checkpoint-ms", type=int, default=1000)
    parser.add_argument("--batches", type=int, default=0, help="stop after N batches (0: never)")
    parser.add_argument("--tear-after", type=int, default=-1, help="tear batch N+1 and die")
    args = parser.parse_args(argv)

    from rmq_spark.store import MessageStore

    rng = random.Random(args.seed)
    queues = [(topic, qid) for topic, n in TOPICS.items() for qid in range(n)]
    out = sys.stdout
    out.write("OPENING\n")
    out.flush()
    config = store_config(args.store_dir, args.segment_bytes, args.cq_entries, args.checkpoint_ms)
    store = MessageStore.open(config)
    for topic, n in TOPICS.items():
        store.topics.create(topic, queues=n)
    out.write(f"READY {os.getpid()}\n")
    out.flush()
    written = 0
    while args.batches == 0 or written < args.batches:
        topic, qid = rng.choice(queues)
        first = store.max_offset(topic, qid)
        messages = [expected_message(topic, qid, first + i) for i in range(_batch_size(rng))]
        bodies = [m[0] for m in messages]
        properties = [m[1] for m in messages]
        # Half the batches name their tags, the other half let the store parse TAGS.
        tags = [m[2] for m in messages] if written % 2 else None
        if written == args.tear_after:
            out.write(f"TEARING {topic} {qid} {first} {len(bodies)}\n")
            out.flush()
            tear_next_commitlog_write(properties[0])
        result = store.append(topic, qid, bodies, properties, tags=tags)
        if result.first_queue_offset != first:
            print(
                f"store put the batch at queue offset {result.first_queue_offset}, "
                f"max_offset said {first}",
                file=sys.stderr,
            )
            return 2
        phys = result.physical_offsets
        out.write(
            f"ACK {topic} {qid} {first} {len(bodies)} {batch_digest(bodies, properties)} "
            f"{int(phys[0])} {int(phys[-1])}\n"
        )
        out.flush()
        written += 1
    out.write("DONE\n")
    out.flush()
    while True:  # keep the store open, as a broker would, until the test kills us
        time.sleep(60)


if __name__ == "__main__":
    sys.exit(main())
