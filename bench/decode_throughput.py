"""Throughput of the vectorised commit-log decoder (``rmq_spark.codec.arrow_decode``).

Builds N records in memory (100-byte bodies; TAGS, KEYS and UNIQ_KEY properties; distinct
queue and physical offsets; a few producer hosts, one broker), then times:

* ``decode_records(buf)``: the client's path, walking the TOTALSIZE chain first;
* ``decode_records(buf, starts, sizes)``: the store's path, positions known from the
  consume queue;
* ``index_records(buf)``: the chain walk and its checks alone;
* small batches, 256 and 32 records a call, as a pull or push consumer decodes each pull
  response (``decode_records(records, sizes=sizes)``, the records of one call side by side):
  here the fixed cost of a call counts, so each is reported in microseconds per call too.

Each case has a baseline measured in the same run: the same batch already in Arrow form,
read from an in-memory IPC stream and deep-copied column by column (``pa.concat_arrays``).
Reading IPC alone is zero-copy and would measure nothing; the copy is the memory traffic
that producing this batch costs anyone, so ``x baseline`` says how far decoding is from just
materialising the output.

Contenders run in interleaved rounds (alternating order), because neighbours on a shared
machine make single timings drift: the whole-buffer cases one call per round, the small
batches in a loop for a fraction of a second per round. Figures are the best of the rounds
(3 by default), the ratios the median of per-round ratios. MB/s counts input bytes (whole
records), 1 MB = 10^6 bytes.

Run: ``.venv/bin/python bench/decode_throughput.py [--count N] [--quick] [--rounds R]``.
"""

from __future__ import annotations

import argparse
import itertools
import platform
import time
import uuid

import numpy as np
import pyarrow as pa
from _common import RateResult, Table, Timing, fmt_int, fmt_mb, looped, measure_rates

from rmq_spark.codec.arrow_decode import decode_records, index_records
from rmq_spark.codec.properties import encode_properties
from rmq_spark.codec.record import POS_PHYSICALOFFSET, POS_QUEUEOFFSET, Record, encode_record

TEMPLATES = 1000  # distinct encoded records; the buffer tiles them
BODY_BYTES = 100


def template_records(count: int) -> list[bytes]:
    rng = np.random.default_rng(7)
    out = []
    for i in range(count):
        props = {
            "TAGS": f"Tag{i % 5}",
            "KEYS": f"order-{i} user-{i % 97}",
            "UNIQ_KEY": uuid.UUID(int=int(rng.integers(1 << 62))).hex.upper(),
        }
        rec = Record(
            topic="BenchTopic",
            queue_id=i % 8,
            body=rng.integers(32, 127, BODY_BYTES, dtype=np.uint8).tobytes(),
            properties=encode_properties(props),
            born_timestamp=1_700_000_000_000 + i,
            store_timestamp=1_700_000_000_005 + i,
            born_host=f"10.0.{i % 4}.{i % 7 + 1}:{50000 + i % 16}",
            store_host="10.0.0.100:10911",
        )
        out.append(encode_record(rec))
    return out


def build_buffer(count: int) -> tuple[bytearray, np.ndarray, np.ndarray]:
    """``count`` records back to back, each with its own queue and physical offset."""
    templates = template_records(min(TEMPLATES, count))
    reps = -(-count // len(templates))
    one = b"".join(templates)
    buf = bytearray(one * reps)
    sizes = np.tile([len(t) for t in templates], reps).astype(np.int64)
    extra = len(sizes) - count
    if extra:
        del buf[len(buf) - int(sizes[-extra:].sum()) :]
        sizes = sizes[:count]
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    data = np.frombuffer(buf, np.uint8)
    as_long = np.ndarray((len(data) - 7,), ">i8", buffer=data, strides=(1,))
    as_long[starts + POS_QUEUEOFFSET] = np.arange(count)
    as_long[starts + POS_PHYSICALOFFSET] = starts
    return buf, starts, sizes


def ipc_bytes(batch: pa.RecordBatch) -> pa.Buffer:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue()


def read_and_copy(stream: pa.Buffer) -> pa.Table:
    table = pa.ipc.open_stream(stream).read_all()
    columns = [pa.concat_arrays(c.chunks) for c in table.columns]  # copies, even one chunk
    return pa.Table.from_arrays(columns, schema=table.schema)


SMALL_BATCHES = (256, 32)  # records per call of the small-batch cases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1_000_000, help="records to decode")
    parser.add_argument("--quick", action="store_true", help="100,000 records, 1 round")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds (3)")
    args = parser.parse_args()
    count = 100_000 if args.quick else args.count
    rounds = 1 if args.quick else args.rounds

    t0 = time.perf_counter()
    buf, starts, sizes = build_buffer(count)
    print(f"built {count:,} records ({len(buf) / 1e6:.1f} MB) in {time.perf_counter() - t0:.1f} s")
    batch = decode_records(buf)
    assert batch.num_rows == count and batch.column("queueOffset")[-1].as_py() == count - 1
    stream = ipc_bytes(batch)

    def once(fn):  # one call per round: each call is already a large unit of work
        return looped(lambda: (fn(), count)[1])

    cases = [
        ("decode_records(buf)  [walks TOTALSIZE]", count, once(lambda: decode_records(buf))),
        (
            "decode_records(buf, starts, sizes)",
            count,
            once(lambda: decode_records(buf, starts, sizes)),
        ),
        ("index_records(buf)  [the walk alone]", count, once(lambda: index_records(buf))),
    ]
    whole = measure_rates(
        [fn for _, _, fn in cases] + [once(lambda: read_and_copy(stream))],
        Timing(warmup_s=0.0, round_s=1e-6, rounds=rounds),
    )
    *decoded, baseline = whole
    results = [
        (name, per_call, result, baseline)
        for (name, per_call, _), result in zip(cases, decoded, strict=True)
    ]
    for per_call in SMALL_BATCHES:
        decode, baseline = small_batch_contenders(buf, sizes, per_call)
        small = measure_rates(
            [decode, baseline],
            Timing(warmup_s=0.05, round_s=0.1 if args.quick else 0.3, rounds=rounds),
        )
        results.append((f"{per_call} records a call (records, sizes)", per_call, *small))
    print(
        f"python {platform.python_version()}, pyarrow {pa.__version__}, numpy {np.__version__}; "
        f"best of {rounds} interleaved round(s)"
    )
    table = Table(
        [
            ("case", "<"),
            ("recs/call", ">"),
            ("us/call", ">"),
            ("msgs/s", ">"),
            ("MB/s", ">"),
            ("baseline us/call", ">"),
            ("x baseline", ">"),
            ("spread", ">"),
        ]
    )
    record_bytes = len(buf) / count
    for name, per_call, result, baseline in results:
        table.add(
            name,
            fmt_int(per_call),
            f"{per_call / result.best * 1e6:,.1f}",
            fmt_int(result.best),
            fmt_mb(result.best * record_bytes),
            "" if "index_records" in name else f"{per_call / baseline.best * 1e6:,.1f}",
            "" if "index_records" in name else f"{ratio(baseline, result):.1f}x",
            f"{result.spread:.0%}",
        )
    table.print()


def small_batch_contenders(buf: bytearray, sizes: np.ndarray, per_call: int):
    """Decoding consecutive chunks of ``per_call`` records, each its own buffer (as a pull
    response holds them), and the IPC read + copy of each chunk's decoded batch."""
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    chunks = []
    for lo in range(0, min(len(sizes), 64 * per_call) - per_call + 1, per_call):
        chunk_sizes = sizes[lo : lo + per_call]
        chunks.append((bytes(buf[bounds[lo] : bounds[lo + per_call]]), chunk_sizes))
    streams = [ipc_bytes(decode_records(data, sizes=s)) for data, s in chunks]
    turn = itertools.count()

    def decode() -> int:
        data, chunk_sizes = chunks[next(turn) % len(chunks)]
        decode_records(data, sizes=chunk_sizes)
        return per_call

    def baseline() -> int:
        read_and_copy(streams[next(turn) % len(streams)])
        return per_call

    return looped(decode), looped(baseline)


def ratio(fast: RateResult, slow: RateResult) -> float:
    """Median over rounds of how many times longer ``slow`` took than ``fast``."""
    return float(np.median([f / s for f, s in zip(fast.rates, slow.rates, strict=True)]))


if __name__ == "__main__":
    main()
