"""rocketlite's remoting client against a name server: the rocketlite broker's remoting
port always, and Apache RocketMQ 4.9 itself when ``ROCKETMQ_HOME`` names a build. The same
checks run against both, so what passes against one behaves the same against the other."""

from __future__ import annotations

import threading
import time

import pytest

from rmq_spark.client import Message
from rmq_spark.client.remoting import RemotingClient, RemotingProducer
from rmq_spark.codec.arrow_decode import decode_records
from rmq_spark.errors import NotFoundError
from rmq_spark.structs import MessageQueue, PullStatus
from tests.support import rocketmq_harness
from tests.support.broker_harness import BrokerProcess
from tests.support.eventually import eventually


@pytest.fixture(
    scope="module",
    params=["rocketlite", pytest.param("apache", marks=rocketmq_harness.needs_rocketmq)],
)
def name_server(request, tmp_path_factory):
    root = tmp_path_factory.mktemp(f"remoting-client-{request.param}")
    if request.param == "rocketlite":
        broker = BrokerProcess(
            "broker-a", root / "store", root / "broker.log",
            ["--remoting-port", "0", "--auto-create-topics"],
        ).start()  # fmt: skip
        yield broker.remoting_address
        broker.stop()
    else:
        cluster = rocketmq_harness.RocketMQCluster(root).start()
        yield cluster.name_server
        cluster.stop()


def _topic(client: RemotingClient, name: str) -> list[MessageQueue]:
    """A topic made by a first send (auto-creation), and its queues once routed."""

    def routed() -> list[MessageQueue]:
        try:
            return client.route(name).writable
        except NotFoundError as missing:
            # Nothing knows the topic yet: one send through the broker's default route
            # creates it (RocketMQ registers it with the name server within seconds).
            default = client.route("TBW102")
            probe = MessageQueue(name, default.writable[0].broker_name, 0)
            client.send(probe, [b"created"], [{"TAGS": "Init"}])
            raise AssertionError(str(missing)) from None

    return eventually(routed, what=f"topic {name} in its route", timeout=30, interval=1)


def test_sends_and_pulls_round_trip_with_properties_and_tag_filters(name_server):
    with RemotingClient(name_server) as client:
        queues = _topic(client, "ClientRoundTrip")
        mq = queues[-1]
        start = client.max_offset(mq)
        sent = client.send(
            mq,
            [b"one", b"two", b"three"],
            [{"TAGS": "TagA", "KEYS": "k1", "color": "red"}, {"TAGS": "TagB"}, {"TAGS": "TagA"}],
        )
        assert sent.queue_offset == start and len(sent.msg_ids) == 3
        answer = client.pull(mq, start, max_messages=32)
        assert answer.status == PullStatus.FOUND
        assert answer.next_begin_offset == client.max_offset(mq) == start + 3
        rows = decode_records(answer.data).to_pylist()
        assert [r["body"] for r in rows] == [b"one", b"two", b"three"]
        assert [r["queueOffset"] for r in rows] == [start, start + 1, start + 2]
        assert dict(rows[0]["properties"])["color"] == "red" and rows[0]["keys"] == "k1"
        assert [dict(r["properties"])["UNIQ_KEY"] for r in rows] == sent.msg_ids
        filtered = client.pull(mq, start, max_messages=32, expression="TagA")
        assert [r["body"] for r in decode_records(filtered.data).to_pylist()] == [b"one", b"three"]


def test_an_empty_pull_waits_for_the_next_message(name_server):
    with RemotingClient(name_server) as client:
        mq = _topic(client, "ClientLongPoll")[0]
        end = client.max_offset(mq)
        assert client.pull(mq, end).status == PullStatus.NO_NEW_MSG
        timer = threading.Timer(0.5, lambda: client.send(mq, [b"late"]))
        started = time.monotonic()
        timer.start()
        answer = client.pull(mq, end, suspend_ms=10_000)
        waited = time.monotonic() - started
        assert answer.status == PullStatus.FOUND, answer
        assert [r["body"] for r in decode_records(answer.data).to_pylist()] == [b"late"]
        assert 0.4 <= waited < 8, waited


def test_offsets_of_a_group_and_by_time(name_server):
    with RemotingClient(name_server) as client:
        mq = _topic(client, "ClientOffsets")[1]
        before = int(time.time() * 1000) - 1
        first = client.send(mq, [b"a", b"b"]).queue_offset
        # RocketMQ 5 and rocketlite say "none"; 4.9 knows no setZeroIfNotFound and answers 0
        # while the queue's first message is still stored
        assert client.committed_offset("client-group", mq) in (None, 0)
        client.commit_offset("client-group", mq, first + 1)
        assert client.committed_offset("client-group", mq) == first + 1
        assert client.offset_at(mq, before) <= first
        assert client.offset_at(mq, int(time.time() * 1000) + 60_000) == client.max_offset(mq)
        assert client.min_offset(mq) == 0


def test_an_unknown_topic_is_not_found(name_server):
    with RemotingClient(name_server) as client, pytest.raises(NotFoundError, match="NoSuchTopic"):
        client.route("NoSuchTopic")


def test_offset_moved_when_pulling_past_the_end(name_server):
    with RemotingClient(name_server) as client:
        mq = _topic(client, "ClientMoved")[0]
        end = client.max_offset(mq)
        answer = client.pull(mq, end + 100)
        assert answer.status == PullStatus.OFFSET_ILLEGAL
        assert answer.next_begin_offset in (0, end)


def test_the_producer_spreads_sends_and_keeps_a_sharding_keys_order(name_server):
    with RemotingClient(name_server) as client:
        queues = _topic(client, "ClientProducer")
    with RemotingProducer(name_server) as producer:
        spread = [producer.send("ClientProducer", Message(f"rr-{i}", tags="RR")) for i in range(8)]
        keyed = [
            producer.send("ClientProducer", Message(f"order-{i}", keys="o42"), sharding_key="o42")
            for i in range(5)
        ]
        batch = producer.send_batch("ClientProducer", [b"b0", b"b1", b"b2"], queue=queues[0])
    assert len({r.message_queue for r in spread}) == len(queues)  # round robin over all
    assert len({r.message_queue for r in keyed}) == 1
    offsets = [r.queue_offset for r in keyed]
    assert offsets == sorted(offsets)
    mq = keyed[0].message_queue
    with RemotingClient(name_server) as client:
        rows = client.pull(mq, offsets[0], max_messages=64).records().to_pylist()
        in_order = [r["body"] for r in rows if r["body"].startswith(b"order-")]
        assert in_order == [f"order-{i}".encode() for i in range(5)]
        stored = {dict(r["properties"])["UNIQ_KEY"] for r in rows}
        assert {r.msg_id for r in keyed} <= stored
        first = batch[0].queue_offset
        got = client.pull(queues[0], first, max_messages=3).records().column("body").to_pylist()
    assert got == [b"b0", b"b1", b"b2"]
    assert [r.queue_offset for r in batch] == [first, first + 1, first + 2]


def test_the_producer_sends_to_a_topic_made_on_first_use(name_server):
    """As RocketMQ's producer: a topic no route names yet is sent through TBW102's route,
    and the broker creates it with that first send."""
    topic = f"AutoMade{int(time.time() * 1000)}"
    with RemotingProducer(name_server) as producer:
        first = producer.send(topic, Message("made by its first message"))
    with RemotingClient(name_server) as client:

        def routed():
            try:
                return client.route(topic)
            except NotFoundError as missing:
                raise AssertionError(str(missing)) from None

        # RocketMQ registers a new topic with its name server within seconds
        route = eventually(routed, what="the topic's route", timeout=30, interval=0.5)
        assert first.message_queue in route.readable
        rows = client.pull(first.message_queue, first.queue_offset).records().to_pylist()
    assert [r["body"] for r in rows] == [b"made by its first message"]


def test_search_by_time_is_the_first_offset_stored_at_or_after_it(name_server):
    """Whatever the broker's own rule (RocketMQ 4.x answers the nearest offset), the client
    answers the first offset stored at or after the time."""
    with RemotingClient(name_server) as client:
        mq = _topic(client, "ClientByTime")[2]
        early = client.send(mq, [b"early"]).queue_offset
        time.sleep(0.05)
        between = int(time.time() * 1000)
        time.sleep(0.2)  # the later message is further from the time than the earlier one
        late = client.send(mq, [b"late"]).queue_offset
        assert late == early + 1
        assert client.offset_at(mq, between) == late
        assert client.offset_at(mq, int(time.time() * 1000) + 60_000) == late + 1


@rocketmq_harness.needs_rocketmq
def test_reads_follow_the_replicas_of_a_broker_group(tmp_path):
    """Apache RocketMQ with broker-a as master and slave and a broker-b master: with
    broker-a's master SIGKILLed, pulls, offsets, committed offsets and key look-ups of its
    queues come from its slave (a commit is refused, naming the master); once the master
    is back, reads return to it."""
    from rmq_spark.errors import UnavailableError

    cluster = rocketmq_harness.ReplicatedCluster(tmp_path / "cluster").start()
    try:
        queues = cluster.make_topic("Replicated")
        a_queues = [mq for mq in queues if mq.broker_name == "broker-a"]
        with RemotingClient(cluster.name_server) as client:
            for i, mq in enumerate(queues):
                client.send(mq, [f"m{i}-{j}".encode() for j in range(5)], [{"KEYS": "k"}] * 5)
            client.commit_offset("replica-group", a_queues[1], 3)
            cluster.wait_slave_caught_up(queues)
            with cluster.slave_client() as slave:  # it copies the offsets every 10 s
                eventually(
                    lambda: slave.committed_offset("replica-group", a_queues[1]) == 3,
                    what="the slave's copy of the group's offsets",
                    timeout=30,
                )
            ends = {mq: client.max_offset(mq) for mq in queues}
            assert all(client.pull(mq, 0).broker_id == 0 for mq in a_queues)

            cluster.kill("broker-a", 0)
            cluster.wait_routed([("broker-a", 1), ("broker-b", 0)])
            for mq in a_queues:
                assert client.max_offset(mq) == ends[mq]
                answer = client.pull(mq, 0, max_messages=64)
                assert answer.status == PullStatus.FOUND and answer.broker_id == 1
                assert len(answer.records()) == ends[mq]
            assert client.committed_offset("replica-group", a_queues[1]) == 3
            found = client.query_messages("Replicated", "k")
            assert {name for _, name in found} == {"broker-a", "broker-b"}
            with pytest.raises(UnavailableError, match="master of broker group 'broker-a'"):
                client.commit_offset("replica-group", a_queues[1], 4)

            cluster.start_broker("broker-a", 0)

            def back_on_the_master() -> bool:
                return client.pull(a_queues[0], 0).broker_id == 0

            eventually(back_on_the_master, what="reads back on the master", timeout=30)
    finally:
        cluster.stop()


def test_a_broker_group_without_a_live_replica_is_named_after_the_retries():
    """Every replica of the group refuses connections and no name server answers: each
    round tries every replica, the retries' pauses are waited out, then the error names
    the group and its replicas (the route is not asked for ever)."""
    from rmq_spark.client.connection import ClientConfig, RetryPolicy
    from rmq_spark.errors import UnavailableError
    from tests.support.broker_harness import free_port

    dead = [f"127.0.0.1:{free_port()}" for _ in range(3)]
    config = ClientConfig(retry=RetryPolicy(attempts=3, backoff_ms=100, max_backoff_ms=200))
    with RemotingClient(dead[0], config) as client:
        client.learn_replicas("broker-x", {0: dead[1], 1: dead[2]})
        mq = MessageQueue("Gone", "broker-x", 2)
        started = time.monotonic()
        with pytest.raises(UnavailableError) as failed:
            client.pull(mq, 0)
        assert time.monotonic() - started >= 0.2  # the retries' pauses were waited out
        message = str(failed.value)
        assert "broker group 'broker-x'" in message and "queue_id=2" in message
        assert dead[1] in message and dead[2] in message
        with pytest.raises(UnavailableError, match="master of broker group 'broker-x'"):
            client.commit_offset("g", mq, 1)


@rocketmq_harness.needs_rocketmq
def test_a_pull_answer_suggesting_the_slave_sends_the_next_pulls_there(tmp_path):
    """With slaveReadEnable, RocketMQ's master answers a pull of messages it no longer
    holds in memory (here: none, accessMessageInMemoryMaxRatio=0) suggesting the slave
    (suggestWhichBrokerId 1): the queue's next pulls go there, as Java's client sends them."""
    settings = ("slaveReadEnable=true", "accessMessageInMemoryMaxRatio=0")
    cluster = rocketmq_harness.ReplicatedCluster(tmp_path / "cluster", settings).start()
    try:
        queues = cluster.make_topic("Suggested")
        mq = next(q for q in queues if q.broker_name == "broker-a" and q.queue_id == 1)
        with RemotingClient(cluster.name_server) as client:
            client.send(mq, [b"x" * 100] * 20)
            cluster.wait_slave_caught_up(queues)
            first = client.pull(mq, 0, max_messages=1)
            assert (first.broker_id, first.suggested_broker_id) == (0, 1)
            following = client.pull(mq, 1, max_messages=1)
            assert following.status == PullStatus.FOUND and following.broker_id == 1
            other = next(q for q in queues if q.broker_name == "broker-a" and q.queue_id == 2)
            assert client.pull(other, 0).broker_id == 0  # the memory is per queue
    finally:
        cluster.stop()
