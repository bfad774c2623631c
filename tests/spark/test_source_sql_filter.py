"""The option ``sqlFilter`` (RocketMQ's SQL92 selector over message properties): exactly the
messages it picks, on every path a read takes, batch and streaming, with the offsets of a
read without it; the brokers filter where they can (their own count of messages pulled
says so), the tasks where they read files or a broker does not filter by SQL92.

One rocketlite broker (gRPC and remoting ports) and one topic serve the module; Apache
RocketMQ 4.9 with and without ``enablePropertyFilter`` when ``ROCKETMQ_HOME`` names a build.
"""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from rmq_spark.client import Admin, Producer
from rmq_spark.client.remoting import RemotingClient
from rmq_spark.client.remoting.transport import RemotingConnection
from rmq_spark.codec import fastjson
from rmq_spark.datasource import RocketliteDataSource
from rmq_spark.source.read import read_partition
from rmq_spark.source.schema import SPARK_SCHEMA
from rmq_spark.wire.remoting.codes import RequestCode
from rmq_spark.wire.remoting.frame import Command
from tests.support import rocketmq_harness
from tests.support.broker_harness import BrokerProcess
from tests.support.spark_helpers import (
    Messages,
    create_topic,
    pushdown,
    rows_of,
    run_available_now,
)

TOPIC = "SqlOrders"
QUEUES = 4
#: the selector of most reads, and the same in Python
SELECTOR = "region = 'eu' AND amount >= 30"
REGIONS = ["eu", "us", "apac", "eu", None]  # every fifth message has no region


def wanted(props: dict[str, str]) -> bool:
    return props.get("region") == "eu" and int(props["amount"]) >= 30


def message(queue: int, i: int) -> tuple[bytes, str, None, dict[str, str]]:
    """Message ``i`` of ``queue``: body, tag, no keys, properties."""
    props = {"amount": str(i)}
    region = REGIONS[i % len(REGIONS)]
    if region is not None:
        props["region"] = region
    return f"q{queue}-m{i}".encode(), ["paid", "new"][i % 2], None, props


@pytest.fixture(scope="module")
def rocketlite(tmp_path_factory) -> BrokerProcess:
    root = tmp_path_factory.mktemp("sql-filter")
    broker = BrokerProcess(
        "broker-a", root / "store", root / "broker.log", ["--remoting-port", "0"]
    ).start()
    yield broker
    broker.stop()


class Sent:
    """What the module's topic holds: each message's body and properties by (broker, queue,
    offset); more are added by :meth:`add`."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self.props: dict[tuple[str, int, int], dict[str, str]] = {}
        self.bodies: Messages = {}
        self.tags: dict[tuple[str, int, int], str] = {}

    def add(self, per_queue: int) -> None:
        with Producer(self.endpoint) as producer:
            for mq in producer.writable_queues(TOPIC):
                first = sum(1 for k in self.bodies if k[1] == mq.queue_id)
                batch = [message(mq.queue_id, first + i) for i in range(per_queue)]
                results = producer.send_batch(TOPIC, batch, queue=mq)
                for result, (body, tag, _, props) in zip(results, batch, strict=True):
                    key = (mq.broker_name, mq.queue_id, result.queue_offset)
                    self.bodies[key], self.props[key], self.tags[key] = body, props, tag

    def matching(self, also=lambda key: True) -> Messages:
        return {k: b for k, b in self.bodies.items() if wanted(self.props[k]) and also(k)}


@pytest.fixture(scope="module")
def sent(rocketlite) -> Sent:
    create_topic(rocketlite.endpoint, TOPIC, queues=QUEUES)
    messages = Sent(rocketlite.endpoint)
    messages.add(150)
    return messages


def stats(endpoint: str) -> dict[str, int]:
    with Admin(endpoint) as admin:
        (info,) = admin.broker_info().values()
    return dict(info.server_stats)


def read(spark, broker: BrokerProcess, path: str, *, streaming: bool = False, **options: str):
    """A read of the module's topic by ``path``: pull, short-circuit, storePath, nameServer."""
    reader = spark.readStream if streaming else spark.read
    reader = reader.format("rocketlite").option("topic", TOPIC)
    where = {
        "pull": {"endpoints": broker.endpoint, "shortCircuit": "false"},
        "short-circuit": {"endpoints": broker.endpoint},
        "storePath": {"storePath": str(broker.store_dir), "allowLiveStore": "true"},
        "nameServer": {"nameServer": broker.remoting_address},
    }[path]
    for key, value in {**where, "startingOffsets": "earliest", **options}.items():
        reader = reader.option(key, value)
    return reader.load()


@pytest.mark.parametrize("path", ["pull", "short-circuit", "storePath", "nameServer"])
def test_a_batch_read_yields_exactly_the_selected_messages(spark, rocketlite, sent, path):
    before = stats(rocketlite.endpoint)
    rows = rows_of(read(spark, rocketlite, path, sqlFilter=SELECTOR))
    after = stats(rocketlite.endpoint)
    expected = sent.matching()
    assert rows == expected
    assert 0 < len(expected) < len(sent.bodies) // 2
    pulled = after["messages_pulled"] - before["messages_pulled"]
    if path in ("pull", "nameServer"):
        assert pulled == len(expected), "the broker sent the matching messages only"
    else:  # the task read the files and picked the messages itself
        assert pulled == 0
    if path == "short-circuit":
        assert after["short_circuit_reads"] >= before["short_circuit_reads"] + QUEUES


def test_with_a_tag_filter_the_read_takes_what_both_pick(spark, rocketlite, sent):
    for path in ("pull", "short-circuit"):
        df = read(spark, rocketlite, path, sqlFilter=SELECTOR, subExpression="paid")
        assert rows_of(df) == sent.matching(lambda k: sent.tags[k] == "paid"), path


@pytest.mark.parametrize("path", ["pull", "short-circuit", "nameServer"])
def test_a_stream_reads_the_selected_messages_twice_from_its_checkpoint(
    spark, rocketlite, sent, path, tmp_path
):
    checkpoint = tmp_path / "checkpoint"
    first = run_available_now(
        read(spark, rocketlite, path, streaming=True, sqlFilter=SELECTOR), checkpoint
    )
    seen = first.messages
    assert seen.items() <= sent.matching().items()
    sent.add(20)  # more for the second run, from the checkpoint
    second = run_available_now(
        read(spark, rocketlite, path, streaming=True, sqlFilter=SELECTOR), checkpoint
    )
    assert not seen.keys() & second.messages.keys(), "nothing is read twice"
    assert {**seen, **second.messages} == sent.matching()
    # the checkpoint's offsets are every queue's end: what was skipped was read past
    ends = {
        (broker, int(q)): offset
        for broker, queues in last_offsets(checkpoint)[TOPIC].items()
        for q, offset in queues.items()
    }
    assert ends == queue_ends(sent)


def last_offsets(checkpoint: Path) -> dict:
    logs = sorted((checkpoint / "offsets").glob("[0-9]*"), key=lambda p: int(p.name))
    return json.loads(logs[-1].read_text().splitlines()[-1])


def queue_ends(sent: Sent) -> dict[tuple[str, int], int]:
    ends: dict[tuple[str, int], int] = {}
    for broker, queue, offset in sent.bodies:
        ends[(broker, queue)] = max(ends.get((broker, queue), 0), offset + 1)
    return ends


def test_a_malformed_selector_fails_at_load_naming_the_option(spark, rocketlite):
    with pytest.raises(Exception, match="sqlFilter") as refused:
        read(spark, rocketlite, "pull", sqlFilter="region = 'eu' AND amount => 30")
    text = str(refused.value)
    assert "at column 27, near '>'" in text, text


#: the rows' columns, properties as a struct of the two the queries use
STRUCT_SCHEMA = (
    "brokerName string, queueId int, queueOffset long, body binary, tags string, "
    "properties struct<region string, amount bigint>"
)


def test_filter_pushdown_of_property_predicates(spark, rocketlite, sent):
    """Spark pushes predicates on the fields of a properties struct (never on a map's
    keys): with pushdown the broker sends only the matches, and the rows are the same."""

    def load(schema: str | None, **options: str):
        reader = spark.read.format("rocketlite")
        if schema is not None:
            reader = reader.schema(schema)
        where = {"endpoints": rocketlite.endpoint, "shortCircuit": "false", "topic": TOPIC}
        for key, value in {**where, **options}.items():
            reader = reader.option(key, value)
        return reader.load()

    condition = "properties.region = 'eu' AND properties.amount > 29 AND tags <> 'new'"
    expected = sent.matching(lambda k: sent.tags[k] != "new")
    assert rows_of(load(STRUCT_SCHEMA).where(condition)) == expected
    with pushdown(spark):
        df = load(STRUCT_SCHEMA, filterPushdown="true").where(condition)
        before = stats(rocketlite.endpoint)["messages_pulled"]
        assert rows_of(df) == expected
        pulled = stats(rocketlite.endpoint)["messages_pulled"] - before
        assert pulled == len(expected), "the broker sent the matching messages only"
        # The same predicate on the properties map: Spark pushes none of it (only
        # IsNotNull(properties)), so every message is pulled and Spark filters.
        on_map = (F.col("properties")["region"] == "eu") & (F.col("tags") != "new")
        df = load(None, filterPushdown="true").where(on_map)
        before = stats(rocketlite.endpoint)["messages_pulled"]
        rows = rows_of(df)
        pulled = stats(rocketlite.endpoint)["messages_pulled"] - before
    assert rows == {
        k: b
        for k, b in sent.bodies.items()
        if sent.props[k].get("region") == "eu" and sent.tags[k] != "new"
    }
    assert pulled == sum(1 for k in sent.bodies if sent.tags[k] != "new")  # tags only


def test_a_broker_that_does_not_filter_by_sql92_leaves_it_to_the_tasks(spark, tmp_path, caplog):
    broker = BrokerProcess(
        "broker-n",
        tmp_path / "store",
        tmp_path / "broker.log",
        ["--remoting-port", "0", "--no-property-filter"],
    ).start()
    try:
        create_topic(broker.endpoint, TOPIC, queues=QUEUES)
        messages = Sent(broker.endpoint)
        messages.add(40)
        for path in ("pull", "nameServer"):
            before = stats(broker.endpoint)["messages_pulled"]
            rows = rows_of(read(spark, broker, path, sqlFilter=SELECTOR))
            assert rows == messages.matching(), path
            pulled = stats(broker.endpoint)["messages_pulled"] - before
            assert pulled == len(messages.bodies), f"{path}: pulled whole"
        # The driver says so, once per read, naming the broker group.
        options = {"endpoints": broker.endpoint, "topic": TOPIC, "sqlFilter": SELECTOR}
        with caplog.at_level(logging.WARNING, "rmq_spark.source"):
            RocketliteDataSource(options).reader(SPARK_SCHEMA).partitions()
        said = [r.getMessage() for r in caplog.records if "sqlFilter" in r.getMessage()]
        assert len(said) == 1 and "broker-n" in said[0], said
        # A task the driver did not tell (the broker changed since) finds out by itself.
        for where in ({"endpoints": broker.endpoint}, {"nameServer": broker.remoting_address}):
            options = {**where, "topic": TOPIC, "sqlFilter": SELECTOR, "shortCircuit": "false"}
            reader = RocketliteDataSource(options).reader(SPARK_SCHEMA)
            parts = [replace(p, filter_in_task=()) for p in reader.partitions()]
            batches = [b for p in parts for b in read_partition(p, reader.options)]
            rows = {
                (r["brokerName"], r["queueId"], r["queueOffset"]): r["body"]
                for b in batches
                for r in b.to_pylist()
            }
            assert rows == messages.matching(), where
    finally:
        broker.stop()


# -- Apache RocketMQ 4.9 ------------------------------------------------------------------


def messages_sent(broker_address: str) -> int:
    """Messages a RocketMQ broker has put in pull answers (GET_BROKER_RUNTIME_INFO's
    msgGetTotalTodayNow: Apache RocketMQ's getMessageTransferedMsgCount)."""
    connection = RemotingConnection(broker_address)
    try:
        answer = connection.call(Command(RequestCode.GET_BROKER_RUNTIME_INFO), timeout_s=10)
    finally:
        connection.close()
    return int(fastjson.loads(bytes(answer.body))["table"]["msgGetTotalTodayNow"])


def apache_cluster(root: Path, *settings: str):
    if not rocketmq_harness.available():
        pytest.skip("needs Apache RocketMQ 4.9: set ROCKETMQ_HOME to a build with lib/")
    return rocketmq_harness.RocketMQCluster(root, settings=settings).start()


def fill_apache(cluster, topic: str) -> tuple[dict, dict, int]:
    """Messages on ``topic`` of an Apache RocketMQ cluster: (bodies, properties) by key, and
    how many messages without properties creating the topic sent."""
    bodies, props = {}, {}
    with RemotingClient(cluster.name_server) as client:
        queues, first = rocketmq_harness.make_topic(client, topic)
        for mq in queues:
            batch = [message(mq.queue_id, i) for i in range(60)]
            answer = client.send(
                mq, [b for b, *_ in batch], [{"TAGS": t, **p} for _, t, _, p in batch]
            )
            for i, (body, _, _, p) in enumerate(batch):
                key = (mq.broker_name, mq.queue_id, answer.queue_offset + i)
                bodies[key], props[key] = body, p
    return bodies, props, first


@pytest.mark.parametrize("filters", [True, False], ids=["enablePropertyFilter", "without"])
def test_apache_rocketmq_with_and_without_its_property_filter(spark, tmp_path, caplog, filters):
    settings = ("enablePropertyFilter=true",) if filters else ()
    cluster = apache_cluster(tmp_path, *settings)
    try:
        bodies, props, first = fill_apache(cluster, "SqlApache")
        expected = {k: b for k, b in bodies.items() if wanted(props[k])}
        options = {"nameServer": cluster.name_server, "topic": "SqlApache", "sqlFilter": SELECTOR}
        reader = spark.read.format("rocketlite")
        for key, value in options.items():
            reader = reader.option(key, value)
        before = messages_sent(cluster.broker_address)
        assert rows_of(reader.load()) == expected
        sent_now = messages_sent(cluster.broker_address) - before
        # with its filter the broker sent the matches only; without, everything
        assert sent_now == (len(expected) if filters else len(bodies) + first)
        with caplog.at_level(logging.WARNING, "rmq_spark.source"):
            RocketliteDataSource(options).reader(SPARK_SCHEMA).partitions()
        said = [r.getMessage() for r in caplog.records if "sqlFilter" in r.getMessage()]
        if filters:
            assert said == []
        else:
            assert len(said) == 1 and "enablePropertyFilter" in said[0], said
    finally:
        cluster.stop()
