"""Apache RocketMQ's own Java client and ``mqadmin`` against the broker's remoting port.

These need a build of Apache RocketMQ 4.9 (its ``lib/`` of jars, as a binary distribution
has it) named by ``ROCKETMQ_HOME``, and ``javac``; without them the module is skipped with
the reason. The Java side is ``tests/java/RemotingProbe.java``, compiled once per module
(the ``java`` fixture of ``conftest.py``, from ``tests/support/java_probe.py``): it
sends and consumes with DefaultMQProducer, TransactionMQProducer, DefaultMQPushConsumer and
DefaultLitePullConsumer and prints one line per event.
"""

from __future__ import annotations

import threading
import time

import pytest

from rmq_spark.client import Admin, Producer
from rmq_spark.client.push import ConsumeStatus, PushConsumer, PushConsumerConfig
from rmq_spark.structs import MessageQueue
from tests.support import java_probe, rocketmq_harness
from tests.support.broker_harness import BrokerProcess, read_queue
from tests.support.eventually import eventually

pytestmark = [java_probe.NEEDS_JAVA, pytest.mark.xdist_group("java")]
#: Java's lite pull consumer gets its first message within this of its start (the JVM's
#: client start-up included; the broker's notice makes it about 1 s on an idle machine)
LITE_FIRST_MESSAGE_MS = 5000


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    root = tmp_path_factory.mktemp("remoting-broker")
    process = BrokerProcess(
        "broker-a",
        root / "store",
        root / "broker.log",
        [
            "--remoting-port",
            "0",
            "--auto-create-topics",
            "--delay-levels",
            "1s 1s 1s 1s 1s 1s",
            "--transaction-check-after-ms",
            "60000",
        ],
    ).start()
    yield process
    process.stop()


def sent(lines: list[str]) -> list[tuple[int, int]]:
    return [(int(x.split()[1]), int(x.split()[2])) for x in lines if x.startswith("SENT ")]


def got(lines) -> list[dict]:
    out = []
    for line in lines:
        if line.startswith("GOT "):
            _, queue, offset, times, tags, keys, body = line.split(" ", 6)
            out.append(
                {"queue": int(queue), "offset": int(offset), "times": int(times),
                 "tags": tags, "keys": keys, "body": body}
            )  # fmt: skip
    return out


def bodies(n: int) -> list[str]:
    return [f"body-{i}" for i in range(n)]


def test_java_sends_are_stored_and_read_back_by_rocketlites_own_client(broker, java):
    lines = java("produce", broker.remoting_address, "JavaSync", "8", "sync")
    positions = sent(lines)
    assert len(positions) == 8 and len(set(positions)) == 8
    records = [
        row for q in range(4) for row in read_queue(broker.endpoint, "JavaSync", q, "broker-a")
    ]
    assert sorted(row["body"].decode() for row in records) == sorted(bodies(8))
    by_body = {row["body"].decode(): row for row in records}
    assert by_body["body-3"]["tags"] == "TagB" and by_body["body-3"]["keys"] == "key-3"
    assert dict(by_body["body-3"]["properties"])["seq"] == "3"
    # what Java's SendResult said is where the message is
    assert sorted((row["queueId"], row["queueOffset"]) for row in records) == sorted(positions)


@pytest.mark.parametrize("mode", ["batch", "async", "oneway", "orderly"])
def test_every_send_mode_is_consumed_exactly_once_by_a_java_push_consumer(broker, java, mode):
    topic = f"Java{mode.capitalize()}"
    java("produce", broker.remoting_address, topic, "9", mode)
    lines = java("push", broker.remoting_address, topic, f"g-{mode}", "9", "30", "concurrent")
    received = got(lines)
    assert sorted(m["body"] for m in received) == sorted(bodies(9))
    if mode == "orderly":  # sharded by i % 3: one queue per key, in send order
        queues = {int(m["body"].split("-")[1]) % 3: set() for m in received}
        for m in received:
            queues[int(m["body"].split("-")[1]) % 3].add(m["queue"])
        assert all(len(q) == 1 for q in queues.values())


def test_tag_filters_deliver_only_matching_messages(broker, java):
    java("produce", broker.remoting_address, "JavaTags", "10", "sync")
    lines = java(
        "push", broker.remoting_address, "JavaTags", "g-tags", "5", "20", "concurrent", "TagA"
    )
    received = got(lines)
    assert sorted(m["body"] for m in received) == sorted(f"body-{i}" for i in range(0, 10, 2))
    assert {m["tags"] for m in received} == {"TagA"}


def test_delayed_messages_arrive_after_their_level(broker, java):
    before = time.monotonic()
    java("produce", broker.remoting_address, "JavaDelay", "4", "delay")
    lines = java("push", broker.remoting_address, "JavaDelay", "g-delay", "4", "30", "concurrent")
    assert sorted(m["body"] for m in got(lines)) == sorted(bodies(4))
    assert time.monotonic() - before >= 1.0


def test_transactions_deliver_committed_messages_only(broker, java):
    java("produce", broker.remoting_address, "JavaTx", "6", "tx")
    lines = java("push", broker.remoting_address, "JavaTx", "g-tx", "3", "20", "concurrent")
    assert sorted(m["body"] for m in got(lines)) == ["body-0", "body-2", "body-4"]


def test_the_broker_asks_the_producer_about_an_unfinished_transaction(java, tmp_path):
    checked = BrokerProcess(
        "broker-a",
        tmp_path / "store",
        tmp_path / "broker.log",
        [
            *("--remoting-port", "0", "--auto-create-topics"),
            *("--transaction-check-after-ms", "1000", "--transaction-check-interval-ms", "1000"),
        ],
    ).start()
    try:
        lines = java("produce", checked.remoting_address, "JavaTxCheck", "4", "txcheck")
        asked = sorted(int(x.split()[1]) for x in lines if x.startswith("CHECKED "))
        assert asked == [0, 1, 2, 3]  # each once, with its real topic
        assert all(x.split()[2] == "JavaTxCheck" for x in lines if x.startswith("CHECKED "))
        received = java(
            "push", checked.remoting_address, "JavaTxCheck", "g-txc", "2", "20", "concurrent"
        )
        assert sorted(m["body"] for m in got(received)) == ["body-0", "body-2"]
    finally:
        checked.stop()


def test_javas_acl_hook_signs_requests_the_broker_checks(java, tmp_path):
    acl = tmp_path / "acl.json"
    acl.write_text(
        '{"users": [{"username": "app", "password": "app-secret"}], "acls": [{"subject": '
        '"User:app", "policies": [{"entries": [{"resource": ["Topic:JavaAcl", '
        '"Group:g-acl"], "actions": ["All"]}]}]}]}'
    )
    secured = BrokerProcess(
        "broker-a",
        tmp_path / "store",
        tmp_path / "broker.log",
        ["--remoting-port", "0", "--auto-create-topics", "--acl", str(acl)],
    ).start()
    try:
        keys = {"PROBE_ACCESS_KEY": "app", "PROBE_SECRET_KEY": "app-secret"}
        ns = secured.remoting_address
        assert len(sent(java("produce", ns, "JavaAcl", "4", "sync", env=keys))) == 4
        received = java("push", ns, "JavaAcl", "g-acl", "4", "30", "concurrent", env=keys)
        assert sorted(m["body"] for m in got(received)) == sorted(bodies(4))
        with pytest.raises(AssertionError, match=r"No route info|NO_PERMISSION|access control"):
            java("produce", ns, "JavaAcl", "1", "sync", timeout_s=60)  # unsigned: refused
        wrong = {**keys, "PROBE_SECRET_KEY": "guess"}
        with pytest.raises(AssertionError, match=r"No route info|NO_PERMISSION|access control"):
            java("produce", ns, "JavaAcl", "1", "sync", env=wrong, timeout_s=60)
    finally:
        secured.stop()


def test_a_failed_message_comes_back_through_the_retry_topic(broker, java):
    java("produce", broker.remoting_address, "JavaRetry", "3", "sync")
    lines = java("push", broker.remoting_address, "JavaRetry", "g-retry", "3", "40", "retry")
    received = got(lines)
    first = sorted(m["body"] for m in received if m["times"] == 0)
    again = sorted(m["body"] for m in received if m["times"] == 1)
    assert first == again == sorted(bodies(3))


def test_broadcasting_consumers_each_get_every_message(broker, java):
    java("produce", broker.remoting_address, "JavaBroadcast", "6", "sync")
    args = ("push", broker.remoting_address, "JavaBroadcast", "g-bc", "6", "30", "broadcast")
    results: list[list[str]] = []
    threads = [threading.Thread(target=lambda: results.append(java(*args))) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [sorted(m["body"] for m in got(r)) for r in results] == [sorted(bodies(6))] * 2


def test_lite_pull_commits_are_the_groups_offsets(broker, java):
    java("produce", broker.remoting_address, "JavaLite", "8", "sync")
    lines = java("lite", broker.remoting_address, "JavaLite", "g-lite", "8", "30")
    assert sorted(m["body"] for m in got(lines)) == sorted(bodies(8))
    # the broker tells the joining member at once (against Apache RocketMQ: about 1 s);
    # without that notice the lite consumer waits for its 20 s rebalance timer
    (first_ms,) = [int(line.split()[1]) for line in lines if line.startswith("FIRST ")]
    print(f"\n[lite pull] first message {first_ms} ms after the consumer's start")
    assert first_ms < LITE_FIRST_MESSAGE_MS, f"first message after {first_ms} ms"
    with Admin(broker.endpoint) as admin:
        offsets = admin.consumer_offsets("g-lite", "JavaLite")
        maxima = {mq: q.max_offset for mq, q in admin.query_offsets(list(offsets)).items()}
    assert offsets and offsets == maxima


def test_assign_and_seek_read_every_queue_from_its_start(broker, java):
    java("produce", broker.remoting_address, "JavaSeek", "8", "sync")
    lines = java("seek", broker.remoting_address, "JavaSeek", "g-seek")
    assert [line for line in lines if line.startswith("SEEK")] == [
        f"SEEK {q} byTime0=0" for q in range(4)
    ]
    assert sorted(m["body"] for m in got(lines)) == sorted(bodies(8))


def test_java_and_python_members_of_one_group_share_the_queues(broker, java):
    topic, group = "JavaMixed", "g-mixed"
    with Admin(broker.endpoint) as admin:
        admin.create_topic(topic, 4)
    seen: list[str] = []
    lock = threading.Lock()

    def on_messages(messages, context):
        with lock:
            seen.extend(m.body.decode() for m in messages)
        return ConsumeStatus.CONSUME_SUCCESS

    config = PushConsumerConfig(consume_from="FIRST_OFFSET")
    python_member = PushConsumer(group, broker.endpoint, config=config)
    python_member.subscribe(topic)
    python_member.register_listener(on_messages)
    python_member.start()
    try:
        args = ("push", broker.remoting_address, topic, group, "40", "25", "concurrent")
        java_member = java.start(*args)  # type: ignore[attr-defined]
        assert java_member.stdout.readline().strip() == "STARTED"
        # both members rebalanced: the Python one gave the Java one half of the queues
        eventually(
            lambda: sum(mq.topic == topic for mq in python_member.assignment()) == 2,
            what="the Python member to own 2 of the 4 queues",
        )
        java("produce", broker.remoting_address, topic, "40", "sync")
        out, _ = java_member.communicate(timeout=60)
    finally:
        python_member.shutdown()
    java_bodies = [m["body"] for m in got(out.splitlines())]
    assert sorted(java_bodies + seen) == sorted(bodies(40))  # each message once in all
    assert java_bodies and seen, "both members should own queues"


def test_mqadmin_commands(broker, java):
    ns = broker.remoting_address
    admin = java.mqadmin  # type: ignore[attr-defined]
    assert "success" in admin(
        "updateTopic", "-n", ns, "-c", "DefaultCluster", "-t", "AdminT", "-r", "3", "-w", "3"
    )
    assert "AdminT" in admin("topicList", "-n", ns).split()
    assert '"readQueueNums":3' in admin("topicRoute", "-n", ns, "-t", "AdminT").replace(" ", "")
    lines = java("produce", ns, "AdminT", "3", "sync")
    status = admin("topicStatus", "-n", ns, "-t", "AdminT")
    max_offsets = [int(row.split()[3]) for row in status.splitlines() if row.startswith("broker-a")]
    assert sum(max_offsets) == 3 and len(max_offsets) == 3
    cluster = admin("clusterList", "-n", ns)
    assert "DefaultCluster" in cluster and ns in cluster and "Exception" not in cluster
    assert "brokerActive" in admin("brokerStatus", "-n", ns, "-b", ns)
    java("push", ns, "AdminT", "g-admin", "3", "20", "concurrent")
    progress = admin("consumerProgress", "-n", ns, "-g", "g-admin")
    rows = [row.split() for row in progress.splitlines() if row.startswith("AdminT")]
    assert len(rows) == 3 and all(row[3] == row[4] for row in rows)  # broker = consumer offset
    offset_id = lines[0].split()[4]
    message = admin("queryMsgById", "-n", ns, "-i", offset_id)
    assert "Topic:               AdminT" in message and "Keys:                [key-0]" in message
    assert "success" in admin("deleteTopic", "-n", ns, "-c", "DefaultCluster", "-t", "AdminT")
    assert "AdminT" not in admin("topicList", "-n", ns).split()


def test_mqadmin_and_the_java_client_find_messages_by_key(broker, java, tmp_path):
    ns, topic = broker.remoting_address, "JavaKeys"
    admin = java.mqadmin  # type: ignore[attr-defined]
    # SENT queueId queueOffset msgId (UNIQ_KEY) offsetMsgId status; message i has key-i
    java_sent = [
        x.split() for x in java("produce", ns, topic, "4", "sync") if x.startswith("SENT ")
    ]
    with Producer(broker.endpoint) as producer:
        ours = producer.send(topic, "from rocketlite", keys=["py-key", "key-1"])
    with Admin(broker.endpoint) as rocketlite:  # keys are indexed a moment after the write

        def offsets(key: str) -> set[int]:
            found = rocketlite.query_messages(topic, key)
            return {o for batch, _ in found for o in batch.column("commitLogOffset").to_pylist()}

        eventually(lambda: len(offsets("key-1")) == 2, what="both key-1 messages indexed")
        expected = {key: offsets(key) for key in ("key-1", "key-2", "py-key")}
        for uniq in (ours.msg_id, java_sent[2][3]):
            expected[uniq] = offsets(uniq)

    by_key = admin("queryMsgByKey", "-n", ns, "-t", topic, "-k", "key-1")
    rows = {tuple(line.split()) for line in by_key.splitlines()[1:] if line.strip()}
    _, queue, offset, msg_id = java_sent[1][:4]
    ours_row = (ours.msg_id, str(ours.message_queue.queue_id), str(ours.queue_offset))
    assert rows == {(msg_id, queue, offset), ours_row}, by_key
    assert "but no message" in admin("queryMsgByKey", "-n", ns, "-t", topic, "-k", "nothing")

    shown = admin("queryMsgByUniqueKey", "-n", ns, "-t", topic, "-i", java_sent[2][3])
    assert "Topic:               JavaKeys" in shown and "Keys:                [key-2]" in shown
    assert "Exception" not in shown, shown
    shown = admin("queryMsgByUniqueKey", "-n", ns, "-t", topic, "-i", ours.msg_id)
    assert "Keys:                [py-key key-1]" in shown and "Exception" not in shown, shown
    assert "WARN: No Consumer" in shown  # no group consumes the topic yet
    with Admin(broker.endpoint) as rocketlite:  # a group with offsets on the topic
        rocketlite.commit_offsets("g-keys", {MessageQueue(topic, "broker-a", 0): 0})
    shown = admin("queryMsgByUniqueKey", "-n", ns, "-t", topic, "-i", ours.msg_id)
    assert "MessageTrack [consumerGroup=g-keys" in shown, shown  # QUERY_TOPIC_CONSUME_BY_WHO

    # the Java client's queryMessage (by key) and viewMessage (by unique key)
    asked = [
        "key=key-1",
        "key=key-2",
        "key=py-key",
        f"uniq={ours.msg_id}",
        f"uniq={java_sent[2][3]}",
    ]
    answers = rocketmq_harness.query_by_key(ns, topic, asked, tmp_path)
    assert answers == {what: expected[what.split("=", 1)[1]] for what in asked}
    assert (
        len(answers["key=key-1"]) == 2
        and answers[f"uniq={java_sent[2][3]}"] == answers["key=key-2"]
    )
