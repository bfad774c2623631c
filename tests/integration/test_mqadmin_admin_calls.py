"""Apache RocketMQ 4.9's ``mqadmin`` changing a rocketlite broker and reaching its Java
consumers through it: ``getBrokerConfig``, ``updateBrokerConfig``, ``updateSubGroup``,
``deleteSubGroup``, ``consumerStatus`` and ``queryMsgById -g -d`` (CONSUME_MESSAGE_DIRECTLY)
against a live Java push consumer, ``resetOffsetByTime`` while a Java consumer runs (it
consumes again from the new offsets), and ``consumeMessage``.

They need ``ROCKETMQ_HOME`` (Apache RocketMQ 4.9's ``lib/``) and a JDK; without them the
module is skipped with the reason. The Java consumer is ``tests/java/RemotingProbe.java``'s
push mode, which prints ``GOT queueId queueOffset reconsumeTimes tags keys body`` per
message it consumes.
"""

from __future__ import annotations

import json
import re
import threading
import time

import pytest

from rmq_spark.wire.remoting.codes import RequestCode
from tests.support import java_probe
from tests.support.broker_harness import BrokerProcess
from tests.support.eventually import eventually
from tests.support.remoting_wire import Wire

pytestmark = [java_probe.NEEDS_JAVA, pytest.mark.xdist_group("java")]
#: how long the Java consumer runs at most (it is stopped when its test ends)
CONSUMER_S = "240"


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    root = tmp_path_factory.mktemp("mqadmin-admin")
    process = BrokerProcess(
        "broker-a",
        root / "store",
        root / "broker.log",
        ["--remoting-port", "0", "--auto-create-topics"],
    ).start()
    yield process
    process.stop()


class JavaConsumer:
    """RemotingProbe's push consumer running in the background; ``got`` collects its GOT
    lines as (queueId, queueOffset, body)."""

    def __init__(self, java, ns: str, topic: str, group: str) -> None:
        self.process = java.start("push", ns, topic, group, "100000", CONSUMER_S, "concurrent")
        assert self.process.stdout.readline().strip() == "STARTED"
        self.got: list[tuple[int, int, str]] = []
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.process.stdout:
            if line.startswith("GOT "):
                _, queue, offset, _times, _tags, _keys, body = line.rstrip("\n").split(" ", 6)
                with self._lock:
                    self.got.append((int(queue), int(offset), body))

    def received(self) -> list[tuple[int, int, str]]:
        with self._lock:
            return list(self.got)

    def stop(self) -> None:
        self.process.kill()
        self.process.wait(timeout=30)


def sent(lines: list[str]) -> list[list[str]]:
    """SENT queueId queueOffset msgId offsetMsgId status, split."""
    return [line.split() for line in lines if line.startswith("SENT ")]


def client_ids(ns: str, group: str) -> list[str]:
    with Wire(ns) as wire:
        answer = wire.call(RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": group})
    assert answer.code == 0, answer.remark
    return [c["clientId"] for c in json.loads(bytes(answer.body))["connectionSet"]]


def test_get_and_update_broker_config(broker, java):
    ns, admin = broker.remoting_address, java.mqadmin
    shown = admin("getBrokerConfig", "-n", ns, "-b", ns)
    assert re.search(r"^brokerName\s+=\s+broker-a$", shown, re.M), shown
    assert re.search(r"^brokerPermission\s+=\s+6$", shown, re.M), shown
    assert re.search(rf"^listenPort\s+=\s+{ns.rsplit(':', 1)[1]}$", shown, re.M), shown

    assert "success" in admin("updateTopic", "-n", ns, "-b", ns, "-t", "MqaPerm")
    changed = admin("updateBrokerConfig", "-n", ns, "-b", ns, "-k", "brokerPermission", "-v", "4")
    assert f"update broker config success, {ns}" in changed, changed
    try:
        shown = admin("getBrokerConfig", "-n", ns, "-c", "DefaultCluster")
        assert re.search(r"^brokerPermission\s+=\s+4$", shown, re.M), shown
        route = admin("topicRoute", "-n", ns, "-t", "MqaPerm").replace(" ", "")
        assert '"perm":4' in route, route  # routes announce the broker read-only
    finally:
        admin("updateBrokerConfig", "-n", ns, "-c", "DefaultCluster", "-k", "brokerPermission",
              "-v", "6")  # fmt: skip
    assert re.search(r"^brokerPermission\s+=\s+6$", admin("getBrokerConfig", "-n", ns, "-b", ns),
                     re.M)  # fmt: skip

    refused = admin("updateBrokerConfig", "-n", ns, "-b", ns, "-k", "brokerName", "-v", "other")
    assert "brokerName cannot change while the broker runs" in refused, refused
    assert "update broker config success" not in refused
    refused = admin("updateBrokerConfig", "-n", ns, "-b", ns, "-k", "brokerPermission", "-v", "9")
    assert "brokerPermission=9 must be 2" in refused, refused


def test_update_and_delete_a_subscription_group(broker, java):
    ns, admin, group = broker.remoting_address, java.mqadmin, "g-mqa-sub"
    created = admin("updateSubGroup", "-n", ns, "-b", ns, "-g", group, "-r", "5", "-s", "true")
    assert f"create subscription group to {ns} success." in created, created
    shown = admin("getConsumerConfig", "-n", ns, "-g", group)
    assert re.search(r"^retryMaxTimes\s+=\s+5$", shown, re.M), shown
    assert re.search(r"^groupName\s+=\s+g-mqa-sub$", shown, re.M), shown

    deleted = admin("deleteSubGroup", "-n", ns, "-b", ns, "-g", group)
    assert f"delete subscription group [{group}] from broker [{ns}] success." in deleted, deleted
    assert "retryMaxTimes" not in admin("getConsumerConfig", "-n", ns, "-g", group)

    refused = admin("updateSubGroup", "-n", ns, "-b", ns, "-g", "bad group!", "-r", "5")
    assert "success" not in refused and "bad group!" in refused, refused


def test_consumer_status_and_a_message_consumed_directly(broker, java, tmp_path, monkeypatch):
    ns, admin = broker.remoting_address, java.mqadmin
    topic, group = "MqaStatus", "g-mqa-status"
    messages = sent(java("produce", ns, topic, "4", "sync"))
    consumer = JavaConsumer(java, ns, topic, group)
    try:
        eventually(lambda: len(consumer.received()) == 4, timeout=60, what="4 messages")
        (client_id,) = client_ids(ns, group)

        status = admin("consumerStatus", "-n", ns, "-g", group, "-i", client_id)
        assert "#Consumer Subscription#" in status and "#Consumer MQ Detail#" in status, status
        assert topic in status and f"%RETRY%{group}" in status, status
        # every queue it consumes, with its offset: 4 messages over the topic's 4 queues
        offsets = re.findall(rf"^{topic}\s+broker-a\s+(\d)\s+(\d+)\s*$", status, re.M)
        assert sorted(offsets) == [(str(q), "1") for q in range(4)], status

        monkeypatch.chdir(tmp_path)  # without -i it writes each client's info to a file
        every = admin("consumerStatus", "-n", ns, "-g", group)
        assert client_id in every and "Same subscription in the same group" in every, every
        assert "Rebalance OK" in every, every

        queue, offset, _, offset_msg_id = messages[2][1:5]
        pushed = admin("queryMsgById", "-n", ns, "-g", group, "-d", client_id, "-i", offset_msg_id)
        assert "consumeResult=CR_SUCCESS" in pushed, pushed
        again = (int(queue), int(offset), "body-2")
        eventually(lambda: consumer.received().count(again) == 2, what="the message consumed again")
    finally:
        consumer.stop()
    gone = admin("consumerStatus", "-n", ns, "-g", group, "-i", client_id)
    # the group's connection list says so once the member has left, the relayed call
    # while its connection has closed and it has not yet
    assert "not online" in gone and "#Consumer Subscription#" not in gone, gone


def test_reset_offset_by_time_while_a_java_consumer_runs(broker, java):
    ns, admin = broker.remoting_address, java.mqadmin
    topic, group = "MqaReset", "g-mqa-reset"
    before = sent(java("produce", ns, topic, "4", "sync"))
    time.sleep(0.2)
    between = int(time.time() * 1000)
    time.sleep(0.2)
    after = sent(java("produce", ns, topic, "4", "sync"))
    old = {(int(s[1]), int(s[2])) for s in before}
    new = {(int(s[1]), int(s[2])) for s in after}

    consumer = JavaConsumer(java, ns, topic, group)
    try:
        eventually(lambda: len(consumer.received()) == 8, timeout=60, what="8 messages")
        done = admin("resetOffsetByTime", "-n", ns, "-g", group, "-t", topic, "-s", str(between))
        rows = re.findall(r"^broker-a\s+(\d+)\s+(\d+)\s*$", done, re.M)
        first_new = {q: min(o for qq, o in new if qq == q) for q, _ in new}
        assert {int(q): int(o) for q, o in rows} == first_new, done

        # the consumer is told: it drops its queues and consumes again from the new offsets
        def consumed_again() -> set[tuple[int, int]]:
            return {(q, o) for q, o, _ in consumer.received()[8:]}

        eventually(lambda: consumed_again() == new, timeout=120, what="the newer 4 again")
        assert not consumed_again() & old  # nothing stored before the time came back
    finally:
        consumer.stop()


def test_consume_message_reads_a_topics_messages(broker, java):
    ns, admin, topic = broker.remoting_address, java.mqadmin, "MqaConsume"
    java("produce", ns, topic, "4", "sync")
    # the tool counts (max - min) + 1 messages against -c for each queue it reads, one
    # more than the queue holds: -c 8 for 4 queues of one message each
    shown = admin("consumeMessage", "-n", ns, "-t", topic, "-c", "8")
    assert "Exception" not in shown, shown
    for i in range(4):
        assert f"body-{i}" in shown, shown


def test_reset_offset_by_time_with_no_consumer_online(broker, java):
    """The broker answers CONSUMER_NOT_ONLINE and changes nothing; mqadmin then sets the
    offsets itself (its old way: consume stats, offsets by time, offset commits)."""
    ns, admin = broker.remoting_address, java.mqadmin
    topic, group = "MqaResetOffline", "g-mqa-offline"
    java("produce", ns, topic, "4", "sync")
    with Wire(ns) as wire:
        for queue in range(4):
            ext = {"consumerGroup": group, "topic": topic, "queueId": str(queue)}
            answer = wire.call(RequestCode.UPDATE_CONSUMER_OFFSET, {**ext, "commitOffset": "1"})
            assert answer.code == 0, answer.remark
    done = admin("resetOffsetByTime", "-n", ns, "-g", group, "-t", topic, "-s", "0")
    assert "Exception" not in done, done
    # brokerName queueId brokerOffset consumerOffset timestampOffset rollbackOffset
    rows = re.findall(r"^broker-a\s+(\d)\s+1\s+1\s+0\s+0\s*$", done, re.M)
    assert sorted(rows) == ["0", "1", "2", "3"], done
    with Wire(ns) as wire:
        for queue in range(4):
            ext = {"consumerGroup": group, "topic": topic, "queueId": str(queue)}
            answer = wire.call(
                RequestCode.QUERY_CONSUMER_OFFSET, {**ext, "setZeroIfNotFound": "false"}
            )
            assert (answer.code, answer.ext.get("offset")) == (0, "0"), (queue, done)


def test_stats_all_and_broker_status_show_what_was_sent_and_consumed(broker, java):
    """``statsAll`` reads each topic's and group's rates (VIEW_BROKER_STATS_DATA) and
    ``brokerStatus`` the broker's runtime info: both show the sends and the consumption."""
    ns, admin = broker.remoting_address, java.mqadmin
    topic, group = "MqaStats", "g-mqa-stats"
    assert len(sent(java("produce", ns, topic, "6", "sync"))) == 6
    consumer = JavaConsumer(java, ns, topic, group)
    try:
        eventually(lambda: len(consumer.received()) == 6, timeout=60, what="6 messages")
    finally:
        consumer.stop()
    rows = [
        line.split()
        for line in admin("statsAll", "-n", ns, "-t", topic).splitlines()
        if line.startswith(topic)
    ]
    # topic, group, accumulation, in TPS, out TPS, in today, out today
    assert len(rows) == 1, rows
    _, shown_group, _, in_tps, out_tps, in_today, out_today = rows[0]
    assert (shown_group, int(in_today), int(out_today)) == (group, 6, 6), rows
    assert float(in_tps) > 0 and float(out_tps) > 0, rows
    status = admin("brokerStatus", "-n", ns, "-b", ns)
    fields = dict(re.findall(r"^(\w+)\s*:\s*(.*)$", status, re.M))
    assert int(fields["msgPutTotalTodayNow"]) >= 6, status
    assert int(fields["msgGetTotalTodayNow"]) >= 6, status
    assert float(fields["putTps"].split()[1]) > 0, status  # over the last minute
