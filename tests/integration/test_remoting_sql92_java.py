"""Apache RocketMQ 4.9's own Java consumers with SQL92 selectors (``MessageSelector.bySql``)
against the broker's remoting port, judged by Apache RocketMQ's broker itself.

The same messages (``tests/support/sql92_messages.py``) are stored in a rocketlite broker
and in a real Apache RocketMQ 4.9 broker started with ``enablePropertyFilter=true``; Java's
``DefaultMQPushConsumer`` and ``DefaultLitePullConsumer`` subscribe to each with the same
selectors, and each must receive from rocketlite exactly what it receives from RocketMQ.
A selector that does not compile fails the push consumer's start with code 23, and a
broker started with ``--no-property-filter`` fails it with code 1, as RocketMQ's check
(CHECK_CLIENT_CONFIG) does.

These need a build of Apache RocketMQ 4.9 named by ``ROCKETMQ_HOME`` and a JDK, and are
skipped with the reason otherwise. The Java side is ``tests/java/FilterProbe.java``.
"""

from __future__ import annotations

from collections import Counter

import pytest

from rmq_spark.client.remoting import RemotingClient
from rmq_spark.filter import compile_selector
from rmq_spark.structs import MessageQueue
from tests.support import java_probe, rocketmq_harness
from tests.support import sql92_messages as data
from tests.support.broker_harness import TEST_STORE_FLAGS, BrokerProcess

pytestmark = [java_probe.NEEDS_JAVA, pytest.mark.xdist_group("java")]

BROKER = "broker-a"  # Apache RocketMQ's harness names its broker so too
TOPIC = "SqlJava"
FIRST = b"first"
#: how long a consumer may take to receive its messages, and how long it is then watched
#: for one it should not get
SECONDS = 60
SETTLE_MS = 3000
#: the selectors the lite pull consumer is tried with (a new consumer each)
LITE_SELECTORS = (
    "price > 20",
    "region IS NULL",
    "(region = 'us' OR TAGS = 'TagA') AND NOT (price > 25)",
    "price = 9 OR region = 'eu'",
)


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    return java_probe.compile_probe(
        tmp_path_factory.mktemp("filter-probe"),
        java_probe.PROBE.with_name("FilterProbe.java"),
    )


@pytest.fixture(scope="module")
def apache(tmp_path_factory):
    """Apache RocketMQ with the messages; how many ``first`` messages made the topic."""
    cluster = rocketmq_harness.RocketMQCluster(
        tmp_path_factory.mktemp("apache-sql92"), settings=("enablePropertyFilter=true",)
    ).start()
    with RemotingClient(cluster.name_server) as client:
        _, first = rocketmq_harness.make_topic(client, TOPIC)
        data.send_all(client, TOPIC, BROKER)
    yield cluster.name_server, first
    cluster.stop()


@pytest.fixture(scope="module")
def rocketlite(tmp_path_factory, apache):
    """A rocketlite broker holding what Apache RocketMQ holds: its name-server address."""
    _, first = apache
    root = tmp_path_factory.mktemp("rocketlite-sql92")
    flags = [*TEST_STORE_FLAGS, "--remoting-port", "0", "--auto-create-topics"]
    process = BrokerProcess(BROKER, root / "store", root / "broker.log", flags).start()
    with RemotingClient(process.remoting_address) as client:
        client.route("TBW102")
        client.send(MessageQueue(TOPIC, BROKER, 0), [FIRST] * first)
        data.send_all(client, TOPIC, BROKER)
    yield process.remoting_address
    process.stop()


def expected(selector: str, first: int) -> Counter:
    """What ``selector`` picks of the messages both brokers hold, by body."""
    compiled = compile_selector(selector)
    picked = Counter(
        data.body(seq).decode()
        for seq in range(data.COUNT)
        if compiled.matches(data.properties(seq))
    )
    if compiled.matches({}):  # the messages that made the topic carry no property
        picked[FIRST.decode()] = first
    return picked


def received(lines: list[str], count: int) -> list[Counter]:
    """The bodies each of ``count`` consumers printed, with how many times each came."""
    got = [Counter() for _ in range(count)]
    for line in lines:
        if line.startswith("GOT "):
            _, index, _, _, body = line.split(" ", 4)
            got[int(index)][body] += 1
    return got


def consume(probe, mode: str, name_server: str, group: str, selectors, first: int):
    args = [mode, name_server, TOPIC, group, str(SECONDS), str(SETTLE_MS)]
    for selector in selectors:
        args += [str(sum(expected(selector, first).values())), selector]
    lines = probe(*args, timeout_s=SECONDS * (len(selectors) if mode == "lite" else 1) + 60)
    return received(lines, len(selectors))


def test_java_push_consumers_get_from_rocketlite_what_they_get_from_rocketmq(
    probe, apache, rocketlite
):
    name_server, first = apache
    from_apache = consume(probe, "push", name_server, "sql-push", data.SELECTORS, first)
    from_rocketlite = consume(probe, "push", rocketlite, "sql-push", data.SELECTORS, first)
    for selector, theirs, ours in zip(data.SELECTORS, from_apache, from_rocketlite, strict=True):
        assert ours == theirs, f"{selector}: rocketlite {sorted(ours)}, RocketMQ {sorted(theirs)}"
        assert ours == expected(selector, first), selector  # each message once


def test_java_lite_pull_consumers_get_from_rocketlite_what_they_get_from_rocketmq(
    probe, apache, rocketlite
):
    name_server, first = apache
    from_apache = consume(probe, "lite", name_server, "sql-lite", LITE_SELECTORS, first)
    from_rocketlite = consume(probe, "lite", rocketlite, "sql-lite", LITE_SELECTORS, first)
    for selector, theirs, ours in zip(LITE_SELECTORS, from_apache, from_rocketlite, strict=True):
        assert ours == theirs, f"{selector}: rocketlite {sorted(ours)}, RocketMQ {sorted(theirs)}"
        assert ours == expected(selector, first), selector


def start_failure(probe, name_server: str, selector: str) -> tuple[int, str]:
    lines = probe("start", name_server, TOPIC, "sql-start", selector, timeout_s=90)
    (line,) = [x for x in lines if x.startswith(("STARTED", "START_FAILED"))]
    assert line.startswith("START_FAILED"), f"the consumer started with {selector!r}"
    _, code, remark = line.split(" ", 2)
    return int(code), remark


def test_a_malformed_selector_fails_the_push_consumers_start(probe, apache, rocketlite):
    selector = "region = 'eu' AND"
    code, remark = start_failure(probe, rocketlite, selector)
    assert code == 23, remark  # SUBSCRIPTION_PARSE_FAILED, as from RocketMQ:
    assert "at column 18" in remark and "the end of the selector" in remark
    assert start_failure(probe, apache[0], selector)[0] == 23


def test_a_broker_without_property_filters_fails_the_push_consumers_start(probe, tmp_path):
    flags = [*TEST_STORE_FLAGS, "--remoting-port", "0", "--auto-create-topics"]
    off = BrokerProcess(
        BROKER, tmp_path / "store", tmp_path / "broker.log", [*flags, "--no-property-filter"]
    ).start()
    try:
        with RemotingClient(off.remoting_address) as client:
            client.route("TBW102")
            client.send(MessageQueue(TOPIC, BROKER, 0), [b"made"])
        code, remark = start_failure(probe, off.remoting_address, "region = 'eu'")
        assert code == 1, remark  # SYSTEM_ERROR, RocketMQ's remark
        assert remark.startswith("The broker does not support consumer to filter message by SQL92")
    finally:
        off.stop()
