"""The message index Apache RocketMQ 4.9 writes, read by rocketlite, and the other way round.

A real RocketMQ broker stores a few hundred messages with several KEYS each (some shared,
some non-ASCII, some with doubled spaces), then stops keeping its store. rocketlite then

* opens its ``index/`` read-only and finds, for every key and every UNIQ_KEY, exactly the
  records carrying it (checked by decoding the commit-log records at the offsets found);
* indexes the same commit log itself and gets the same bytes as RocketMQ's index file;
* puts that index in a copy of the store, where RocketMQ's own broker and Java client
  find the messages by key through it.

Needs ``ROCKETMQ_HOME`` (see the README, "Testing against Apache RocketMQ").
"""

from __future__ import annotations

import mmap
import shutil
import struct
import subprocess
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from rmq_spark.client.remoting import RemotingClient
from rmq_spark.codec.properties import KEYS, UNIQ_KEY, decode_properties
from rmq_spark.codec.record import BLANK_MAGIC, Record, decode_record
from rmq_spark.store.index import MessageIndex
from rmq_spark.store.index_file import (
    DEFAULT_HASH_SLOTS,
    ENTRY_SIZE,
    HEADER_SIZE,
    SLOT_SIZE,
    IndexFile,
    decode_header,
    index_key_hash,
    index_key_hashes,
)
from rmq_spark.structs import MessageQueue
from tests.support import rocketmq_harness
from tests.support.eventually import eventually

pytestmark = pytest.mark.skipif(
    not rocketmq_harness.available(),
    reason="needs Apache RocketMQ 4.9: set ROCKETMQ_HOME to a build with lib/",
)

TOPIC = "IndexedByApache"
MESSAGES = 300
T_END = 1_699_999_000_000  # the end time the file of PutKeys.java inherits
# Puts random keys (many per slot, some outside the BMP) into RocketMQ's own IndexFile class
# until it is full, then looks keys up in a time window; prints what it did and found.
INDEX_FILE_JAVA = """
import java.io.PrintStream;
import java.util.*;
import org.apache.rocketmq.store.index.IndexFile;

public class PutKeys {
    public static void main(String[] args) throws Exception {
        PrintStream out = new PrintStream(System.out, true, "UTF-8");
        Random random = new Random(42);
        IndexFile f = new IndexFile(args[0], 7, 50, 1234, 1699999000000L);
        long time = 1700000000000L;
        for (int i = 0; i < 60; i++) {
            String key = "T#" + (char) ('a' + random.nextInt(20)) + (i % 3 == 0 ? "日😀" : "");
            time += random.nextInt(3000);
            out.println("put\t" + key + "\t" + (2000 + i * 10) + "\t" + time + "\t"
                + f.putKey(key, 2000 + i * 10, time));
        }
        f.flush();
        for (char c = 'a'; c < 'a' + 20; c++) {
            List<Long> found = new ArrayList<>();
            f.selectPhyOffset(found, "T#" + c, 100, 1700000020000L, 1700000060000L);
            out.println("get\tT#" + c + "\t" + found.toString().replace(" ", ""));
        }
    }
}
"""


def keys_of(i: int) -> list[str]:
    keys = [f"order-{i}", f"user-{i % 17}"]
    if i % 2 == 0:
        keys.append(f"день-{i % 7}")
    if i % 3 == 0:
        keys.append(f"😀{i % 5}")
    return keys


@dataclass(frozen=True)
class ApacheStore:
    path: Path
    records: list[Record]
    #: key (KEYS entry or UNIQ_KEY) -> physical offsets of the TOPIC records carrying it
    expected: dict[str, set[int]]
    uniq_keys: list[str]


@pytest.fixture(scope="module")
def apache_store(tmp_path_factory) -> ApacheStore:
    root = tmp_path_factory.mktemp("apache")
    cluster = rocketmq_harness.RocketMQCluster(root).start()
    uniq_keys: list[str] = []
    try:
        with RemotingClient(cluster.name_server) as client:
            queues = _route(client)
            for start in range(0, MESSAGES, 10):
                batch = range(start, min(start + 10, MESSAGES))
                # doubled spaces leave empty entries, which are not keys
                props = [{KEYS: ("  " if i % 4 == 0 else " ").join(keys_of(i))} for i in batch]
                if start < 100:  # one at a time, then batches
                    for i, p in zip(batch, props, strict=True):
                        uniq_keys += client.send(queues[i % len(queues)], [b"m"], [p]).msg_ids
                else:
                    bodies = [f"m{i}".encode() for i in batch]
                    uniq_keys += client.send(queues[start % len(queues)], bodies, props).msg_ids
            # RocketMQ indexes a moment after it stores, in commit-log order: once the last
            # message is found by its key, every message is in the index
            eventually(
                lambda: client.query_messages(TOPIC, uniq_keys[-1]), what="the last key indexed"
            )
    finally:
        cluster.stop(keep_store=True)
    store = root / "store"
    assert not (store / "abort").exists(), "RocketMQ did not shut down cleanly"
    records = _commit_log(store)
    expected: dict[str, set[int]] = defaultdict(set)
    for r in records:
        props = decode_properties(r.properties)
        if r.topic == TOPIC:
            for key in [props.get(UNIQ_KEY), *props.get(KEYS, "").split(" ")]:
                if key:
                    expected[key].add(r.physical_offset)
    return ApacheStore(store, records, dict(expected), uniq_keys)


def test_rocketlite_finds_every_key_in_the_index_rocketmq_wrote(apache_store) -> None:
    store = apache_store.path
    wanted = {k for i in range(MESSAGES) for k in keys_of(i)}
    assert wanted <= apache_store.expected.keys()
    with MessageIndex.open(store / "index", read_only=True) as index:
        assert len(index.files) == 1
        for key in sorted(wanted):
            found = index.query(TOPIC, key, max_num=1000)
            for offset in found:  # what a caller does against hash collisions
                record = _record_at(store, offset)
                assert record.topic == TOPIC
                assert key in decode_properties(record.properties)[KEYS].split(" ")
            assert sorted(found) == sorted(apache_store.expected[key]), key
        assert len(apache_store.uniq_keys) == MESSAGES
        for uniq in apache_store.uniq_keys:
            (offset,) = index.query(TOPIC, uniq)
            assert decode_properties(_record_at(store, offset).properties)[UNIQ_KEY] == uniq
        assert index.query(TOPIC, "no-such-key") == []
        assert index.query("OtherTopic", "order-1") == []
        assert index.end_phy_offset == apache_store.records[-1].physical_offset


def test_rocketlite_indexes_the_commit_log_into_rocketmqs_bytes(apache_store, tmp_path) -> None:
    ours = _index_like_rocketlite(apache_store.records, tmp_path / "index")
    (theirs,) = sorted((apache_store.path / "index").iterdir())
    with open(ours, "rb") as a, open(theirs, "rb") as b:
        mine = mmap.mmap(a.fileno(), 0, access=mmap.ACCESS_READ)
        real = mmap.mmap(b.fileno(), 0, access=mmap.ACCESS_READ)
        assert len(mine) == len(real)
        header = decode_header(real)
        assert header.index_count > MESSAGES * 3
        assert mine[:HEADER_SIZE] == real[:HEADER_SIZE]
        used = HEADER_SIZE + DEFAULT_HASH_SLOTS * SLOT_SIZE + header.index_count * ENTRY_SIZE
        assert mine[:used] == real[:used]  # slots and every entry written
        mine.close()
        real.close()


def test_rocketmq_finds_messages_through_the_index_rocketlite_wrote(apache_store, tmp_path):
    replay = tmp_path / "replay"
    store = replay / "store"
    shutil.copytree(apache_store.path, store, ignore=shutil.ignore_patterns("index"))
    _index_like_rocketlite(apache_store.records, store / "index")
    cluster = rocketmq_harness.RocketMQCluster(replay).start()
    try:
        asked = ["key=user-3", "key=день-2", "key=😀4", "key=order-250"]
        asked += [f"uniq={u}" for u in apache_store.uniq_keys[::97]]
        answers = rocketmq_harness.query_by_key(cluster, TOPIC, asked, tmp_path)
    finally:
        cluster.stop()
    assert answers == {q: apache_store.expected[q.split("=", 1)[1]] for q in asked}


def test_index_file_equals_rocketmqs_own_index_file_class(tmp_path) -> None:
    source = tmp_path / "PutKeys.java"
    source.write_text(INDEX_FILE_JAVA)
    theirs = tmp_path / "20231114221320000"  # RocketMQ's MappedFile wants a number
    command = [*rocketmq_harness.java_command(tmp_path, "256m"), str(source), str(theirs)]
    run = subprocess.run(command, capture_output=True, timeout=120)
    assert run.returncode == 0, run.stderr.decode()[-3000:]
    rows = [line.split("\t") for line in run.stdout.decode().splitlines()]
    puts = [row[1:] for row in rows if row[0] == "put"]
    gets = {row[1]: row[2] for row in rows if row[0] == "get"}
    ours = IndexFile.create(tmp_path / "ours", 7, 50, end_phy_offset=1234, end_timestamp=T_END)
    hashes = index_key_hashes([p[0] for p in puts])
    phys = np.array([int(p[1]) for p in puts])
    stamps = np.array([int(p[2]) for p in puts])
    added = 0
    for step in range(1, 100):  # batches of 1 to 7 keys, until the file is full
        batch = slice(added, added + step % 7 + 1)
        added += ours.add_batch(hashes[batch], phys[batch], stamps[batch])
    assert added == sum(p[3] == "true" for p in puts) == 49
    ours.flush()
    assert (tmp_path / "ours").read_bytes() == theirs.read_bytes()
    window = (1_700_000_020_000, 1_700_000_060_000)
    found = {k: str(ours.lookup(index_key_hash(k), *window, 100)).replace(" ", "") for k in gets}
    assert found == gets
    assert any(v != "[]" for v in found.values())


# -- helpers ---------------------------------------------------------------------------------


def _route(client: RemotingClient) -> list[MessageQueue]:
    return rocketmq_harness.make_topic(client, TOPIC)[0]


def _commit_log(store: Path) -> list[Record]:
    """Every record of the commit log, in log order."""
    records = []
    for segment in sorted((store / "commitlog").iterdir()):
        data = segment.read_bytes()
        pos = 0
        while pos + 8 <= len(data):
            size, magic = struct.unpack_from(">iI", data, pos)
            if size <= 0 or magic == BLANK_MAGIC:
                break
            record = decode_record(data, pos)
            assert record.physical_offset == int(segment.name) + pos
            records.append(record)
            pos += size
    return records


def _record_at(store: Path, offset: int) -> Record:
    segments = sorted((store / "commitlog").iterdir())
    segment = max((s for s in segments if int(s.name) <= offset), key=lambda s: int(s.name))
    return decode_record(segment.read_bytes(), offset - int(segment.name))


def _index_like_rocketlite(records: list[Record], directory: Path) -> Path:
    """Index ``records`` as rocketlite's store would, in dispatch batches of up to 32."""
    with MessageIndex.open(directory) as index:
        for start in range(0, len(records), 32):
            batch = records[start : start + 32]
            props = [decode_properties(r.properties) for r in batch]
            index.add(
                [r.topic for r in batch],
                [p.get(UNIQ_KEY) for p in props],
                [p.get(KEYS) for p in props],
                [r.physical_offset for r in batch],
                [r.store_timestamp for r in batch],
                [r.sysflag for r in batch],
            )
        index.flush()
        (only,) = index.files
        return only.path
