"""A store rocketlite wrote, opened by Apache RocketMQ 4.9 itself: the real broker serves
every message and every group's offset, after a clean stop and after a crash (where its
recovery reads rocketlite's ``checkpoint`` to choose the segment it scans from). Segments
and queue files have RocketMQ's sizes (16 MiB here, 300,000 entries), several segments.
Needs ``ROCKETMQ_HOME`` (see the README, "Testing against Apache RocketMQ")."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from rmq_spark.client import Admin, ClientConfig, Producer
from rmq_spark.client.cluster import Cluster
from rmq_spark.client.groups import send_back
from rmq_spark.client.remoting import RemotingClient
from rmq_spark.codec import record as rec
from rmq_spark.store.checkpoint import read_store_checkpoints, rocketmq_recovery_start
from rmq_spark.structs import MessageQueue, PullStatus
from tests.support import rocketmq_harness
from tests.support.broker_harness import BrokerProcess
from tests.support.eventually import eventually

pytestmark = pytest.mark.skipif(
    not rocketmq_harness.available(),
    reason="needs Apache RocketMQ 4.9: set ROCKETMQ_HOME to a build with lib/",
)

TOPIC, GROUP, QUEUES = "WrittenByRocketlite", "lite-group", 4
SEGMENT = 16 * 1024 * 1024
BODY = 1024
GEOMETRY = ["--commitlog-segment-bytes", str(SEGMENT), "--consumequeue-entries-per-file", "300000"]


def body(i: int) -> bytes:
    return f"lite-{i:08d}-".encode().ljust(BODY, b"x")


def write_store(
    store: Path, log: Path, rounds: list[int], pause_s: float, uniq_keys: dict[str, int]
) -> BrokerProcess:
    """A rocketlite broker on ``store`` that got the group's offsets, then ``rounds`` of
    messages (a round per count, ``pause_s`` after each, 500 per queue in turn; message i
    has KEYS ``order-i``; ``uniq_keys`` gets each message's UNIQ_KEY)."""
    broker = BrokerProcess("broker-a", store, log, GEOMETRY).start()
    with Admin(broker.endpoint) as admin:
        admin.create_topic(TOPIC, QUEUES)
        # Committed first: consumerOffset.json (what RocketMQ reads) is rewritten every 5 s;
        # a crash loses the commits of the last seconds for RocketMQ, as its own crash does.
        offsets = {MessageQueue(TOPIC, "broker-a", q): 100 + q for q in range(QUEUES)}
        admin.commit_offsets(GROUP, offsets)
        n = 0
        uniq_keys.clear()
        with Producer(broker.endpoint) as producer:
            for count in rounds:
                for start in range(n, n + count, 500):
                    batch = [(body(i), None, f"order-{i}") for i in range(start, start + 500)]
                    results = producer.send_batch(TOPIC, batch, queue=start // 500 % 4)
                    uniq_keys.update({r.msg_id: start + j for j, r in enumerate(results)})
                n += count
                time.sleep(pause_s)
    return broker


def expected_bodies(rounds: list[int]) -> dict[int, list[bytes]]:
    by_queue: dict[int, list[bytes]] = {q: [] for q in range(QUEUES)}
    for i in range(sum(rounds)):
        by_queue[i // 500 % 4].append(body(i))
    return by_queue


def read_through_rocketmq(cluster: rocketmq_harness.RocketMQCluster) -> dict[int, list[bytes]]:
    got: dict[int, list[bytes]] = {}
    with RemotingClient(cluster.name_server) as client:
        for q in range(QUEUES):
            mq = MessageQueue(TOPIC, "broker-a", q)
            offset, bodies = 0, []
            while True:
                answer = client.pull(mq, offset, max_messages=32)
                if answer.status != PullStatus.FOUND:
                    break
                bodies += [r.body for r in rec.iter_records(answer.data)]
                offset = answer.next_begin_offset
            got[q] = bodies
            assert client.committed_offset(GROUP, mq) == 100 + q
    return got


def test_apache_rocketmq_serves_a_store_rocketlite_wrote(tmp_path):
    store = tmp_path / "store"
    rounds = [20_000, 20_000, 5_000]  # about 51 MB
    uniq_keys: dict[str, int] = {}
    write_store(store, tmp_path / "rocketlite.log", rounds, 0, uniq_keys).stop()
    assert len(list((store / "commitlog").iterdir())) == 4
    assert GROUP in groups_in(store)

    cluster = rocketmq_harness.RocketMQCluster(tmp_path / "apache", store=store).start()
    try:
        assert read_through_rocketmq(cluster) == expected_bodies(rounds)
        # RocketMQ's own client finds messages by key through the index rocketlite wrote
        wanted = {f"key=order-{i}": i for i in (0, 7, 19_999, 20_000, 31_234, 44_999)}
        wanted |= {f"uniq={u}": i for u, i in list(uniq_keys.items())[::9_000]}
        answers = rocketmq_harness.query_by_key(cluster, TOPIC, list(wanted), tmp_path)
    finally:
        cluster.stop(keep_store=True)
    assert {q: [body_at(store, o) for o in answers.get(q, ())] for q in wanted} == {
        q: [body(i)] for q, i in wanted.items()
    }
    # RocketMQ parsed rocketlite's subscriptionGroup.json and wrote the group back
    assert groups_in(store)[GROUP]["retryMaxTimes"] == 16


def body_at(store: Path, physical_offset: int) -> bytes:
    """The body of the record at ``physical_offset``, read from the segment files."""
    start = physical_offset // SEGMENT * SEGMENT
    with open(store / "commitlog" / f"{start:020d}", "rb") as segment:
        segment.seek(physical_offset - start)
        return rec.decode_record(segment.read(BODY + 1024)).body


def groups_in(store: Path) -> dict:
    text = (store / "config" / "subscriptionGroup.json").read_text()
    return json.loads(text)["subscriptionGroupTable"]


def test_apache_rocketmqs_crash_recovery_starts_where_rocketlites_checkpoint_says(tmp_path):
    store = tmp_path / "store"
    # Rounds 4 s apart; the last segment starts during the last round, the one before it
    # during the round before: RocketMQ scans from the newest segment whose first record is
    # 3 s older than the checkpoint, the one before the last. (Reading the checkpoint as
    # rocketlite used to write it, RocketMQ took the last segment.)
    rounds = [20_000, 12_000, 14_000]
    broker = write_store(store, tmp_path / "rocketlite.log", rounds, 4, {})
    broker.kill()  # SIGKILL: the abort file stays, RocketMQ recovers as after a crash
    assert (store / "abort").exists()
    segments = sorted((store / "commitlog").iterdir())
    checkpoint = read_store_checkpoints(store).rocketmq
    assert checkpoint is not None
    firsts = [(int(s.name), rec.store_timestamp_in(s.read_bytes()[:100])) for s in segments]
    assert rocketmq_recovery_start(firsts, checkpoint) == int(segments[-2].name)

    cluster = rocketmq_harness.RocketMQCluster(tmp_path / "apache", store=store).start()
    try:
        assert read_through_rocketmq(cluster) == expected_bodies(rounds)
    finally:
        cluster.stop(keep_store=True)
    store_log = (tmp_path / "apache" / "logs" / "rocketmqlogs" / "store.log").read_text()
    assert f"recover from this mapped file {segments[-2]}" in store_log, store_log[-3000:]


def test_apache_rocketmq_delivers_the_delayed_messages_rocketlite_left_pending(tmp_path):
    """Delayed sends and a consumer's retries (send-backs, delivered to its %RETRY% topic
    after a delay level), still pending when rocketlite stops, are delivered by RocketMQ."""
    store = tmp_path / "store"
    broker = BrokerProcess("broker-a", store, tmp_path / "rocketlite.log", GEOMETRY).start()
    with Admin(broker.endpoint) as admin:
        admin.create_topic("Delayed", 1)
        admin.create_topic("Retried", 1)
    with Producer(broker.endpoint) as producer:
        sent = [producer.send("Delayed", f"later-{i}".encode(), delay_level=3) for i in range(20)]
        failed = producer.send_batch("Retried", [f"retry-{i}".encode() for i in range(5)])
    cluster = Cluster(broker.endpoint, ClientConfig())
    try:
        for result in failed:  # the consumer gives them back: retry in 10 s (level 3)
            _, physical = rec.parse_offset_msg_id(result.offset_msg_id)
            send_back(cluster, GROUP, "broker-a", physical, "Retried", delay_level=3)
    finally:
        cluster.close()
    broker.stop()  # before the 10 s of level 3 pass: every message is still pending
    assert all(r.queue_offset is None for r in sent)

    cluster = rocketmq_harness.RocketMQCluster(tmp_path / "apache", store=store).start()
    try:
        with RemotingClient(cluster.name_server) as client:
            mq = MessageQueue("Delayed", "broker-a", 0)
            eventually(
                lambda: client.max_offset(mq) >= 20,
                what="RocketMQ to deliver the delayed messages",
                timeout=60,
                interval=0.5,
            )
            answer = client.pull(mq, 0, max_messages=32)
            bodies = sorted(r.body for r in rec.iter_records(answer.data))
            retry = MessageQueue(f"%RETRY%{GROUP}", "broker-a", 0)
            eventually(
                lambda: client.max_offset(retry) >= 5,
                what="RocketMQ to deliver the retries",
                timeout=60,
                interval=0.5,
            )
            answer = client.pull(retry, 0, max_messages=32)
            retried = sorted(r.body for r in rec.iter_records(answer.data))
    finally:
        cluster.stop(keep_store=True)
    assert bodies == sorted(f"later-{i}".encode() for i in range(20))
    assert retried == [f"retry-{i}".encode() for i in range(5)]
