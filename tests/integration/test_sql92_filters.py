"""SQL92 property filters over rocketlite.v1, against real broker processes: the pull
(exact matches, next offsets past what the selector rejects, long polls that wake only for a
match), heartbeats (the group records the selector; a malformed one or a broker without
property filtering refuses it), and rocketlite's clients: the pull consumer, the push
consumer and ``rocketlite consume --sql``.
"""

from __future__ import annotations

import socket
import threading
import time

import grpc
import pytest

from rmq_spark.client import Admin, ClientConfig, Cluster, Producer, PullConsumer
from rmq_spark.client.groups import HeartbeatInfo, Subscription, heartbeat
from rmq_spark.client.push import ConsumeStatus, PushConsumer, PushConsumerConfig
from rmq_spark.errors import FilterNotSupportedError, InvalidArgumentError
from rmq_spark.filter import SelectorError
from rmq_spark.structs import MessageQueue, PullStatus
from rmq_spark.wire.proto_gen.rocketlite.v1 import common_pb2, groups_pb2, messaging_pb2
from tests.support.broker_harness import TEST_STORE_FLAGS, BrokerProcess
from tests.support.cli import Cli
from tests.support.eventually import eventually
from tests.support.sql92_messages import BIG_EU, MALFORMED, ORDERS, order_bodies

BROKER = "broker-sql"
NO_FILTER = "broker-nosql"


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """A broker with short delay levels: a retry comes back within a second."""
    root = tmp_path_factory.mktemp("sql")
    process = BrokerProcess(
        BROKER,
        root / "store",
        root / "broker.log",
        [*TEST_STORE_FLAGS, "--delay-levels", "100ms 200ms 300ms", "--remoting-port", "0"],
    )
    process.start()
    yield process
    process.clean_up()


@pytest.fixture(scope="module")
def no_filter_broker(tmp_path_factory):
    root = tmp_path_factory.mktemp("nosql")
    process = BrokerProcess(
        NO_FILTER, root / "store", root / "broker.log", [*TEST_STORE_FLAGS, "--no-property-filter"]
    )
    process.start()
    with Admin(process.endpoint) as admin:
        admin.create_topic("nosql", queues=1)
    yield process
    process.clean_up()


def topic_with_orders(endpoint: str, topic: str, queues: int = 1) -> None:
    """``topic`` holding ORDERS, in order, in queue 0."""
    with Admin(endpoint) as admin:
        admin.create_topic(topic, queues=queues)
    with Producer(endpoint) as producer:
        for body, tag, props in ORDERS:
            producer.send(topic, body, tags=tag, properties=props, queue=0)


def pull_request(topic: str, expression: str, offset: int = 0, **fields):
    return messaging_pb2.PullMessagesRequest(
        queue=common_pb2.MessageQueue(topic=topic, broker_name="", queue_id=0),
        queue_offset=offset,
        subscription_expression=expression,
        expression_type="SQL92",
        **fields,
    )


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- the pull ------------------------------------------------------------------------------


def test_a_pull_returns_exactly_the_matches_and_moves_past_the_rest(broker):
    topic_with_orders(broker.endpoint, "sql-pull")
    mq = MessageQueue("sql-pull", BROKER, 0)
    with PullConsumer(broker.endpoint, sql=BIG_EU) as consumer:
        consumer.assign([mq])
        consumer.seek(mq, 0)
        result = consumer.pull(mq)
        assert result.status == PullStatus.FOUND
        assert result.batch.column("body").to_pylist() == order_bodies(6, 9)
        assert result.next_begin_offset == 12  # the rest was looked at: nothing matched
        consumer.seek(mq, 0)
        first = consumer.pull(mq, max_messages=1)  # cut short: next is after the match
        assert first.batch.column("body").to_pylist() == order_bodies(6)
        assert first.next_begin_offset == 7
        consumer.seek(mq, 10)  # orders 10 and 11 are not big EU orders
        rest = consumer.pull(mq)
        assert rest.status == PullStatus.NO_MATCHED_MSG
        assert rest.next_begin_offset == consumer.position(mq) == 12
    # TAGS is a property like any other
    with PullConsumer(broker.endpoint, sql="TAGS = 'Paid' AND region = 'eu'") as consumer:
        consumer.assign([mq])
        consumer.seek(mq, 0)
        assert consumer.pull(mq).batch.column("body").to_pylist() == order_bodies(3, 9)


def test_a_long_poll_wakes_only_for_a_matching_message(broker):
    with Admin(broker.endpoint) as admin:
        admin.create_topic("sql-poll", queues=1)
    mq = MessageQueue("sql-poll", BROKER, 0)
    results = []

    def poll() -> None:
        with PullConsumer(broker.endpoint, sql=BIG_EU) as consumer:
            consumer.assign([mq])
            consumer.seek(mq, 0)
            started = time.monotonic()
            results.append((consumer.pull(mq, timeout_ms=15_000), time.monotonic() - started))

    puller = threading.Thread(target=poll)
    puller.start()
    with Admin(broker.endpoint) as admin, Producer(broker.endpoint) as producer:

        def held() -> bool:
            info = next(iter(admin.broker_info().values()))
            return info.server_stats["held_pulls"] >= 1

        eventually(held, what="the pull is held by the broker")
        producer.send("sql-poll", b"small", properties={"region": "eu", "amount": "5"})
        producer.send("sql-poll", b"elsewhere", properties={"region": "us", "amount": "500"})
        time.sleep(1)
        assert puller.is_alive(), results  # neither arrival answered the pull
        eventually(held, what="the pull is held again after messages it filters out")
        producer.send("sql-poll", b"big", properties={"region": "eu", "amount": "500"})
    puller.join(timeout=20)
    ((result, waited_s),) = results
    assert result.status == PullStatus.FOUND
    assert result.batch.column("body").to_pylist() == [b"big"]
    assert result.next_begin_offset == 3
    assert waited_s < 10


def test_malformed_selectors_are_invalid_arguments_naming_the_column(broker, connect):
    with Admin(broker.endpoint) as admin:
        admin.create_topic("sql-bad", queues=1)
    stubs = connect(broker.endpoint)
    with pytest.raises(grpc.RpcError) as refused:
        stubs.messaging.PullMessages(pull_request("sql-bad", MALFORMED), timeout=5)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "column 27" in refused.value.details()
    # rocketlite's clients compile a selector before they reach any broker
    nowhere = f"127.0.0.1:{closed_port()}"
    with pytest.raises(SelectorError, match="column 27") as local:
        PullConsumer(nowhere, sql=MALFORMED)
    assert local.value.column == 27
    consumer = PushConsumer("g-sql-bad", nowhere)
    with pytest.raises(SelectorError, match="column 27"):
        consumer.subscribe("sql-bad", sql=MALFORMED)
    with pytest.raises(InvalidArgumentError, match="filter by one of them"):
        consumer.subscribe("sql-bad", "Paid", sql=BIG_EU)
    consumer.shutdown()


# -- heartbeats ----------------------------------------------------------------------------


def sql_heartbeat(stubs, group: str, topic: str, selector: str):
    request = groups_pb2.HeartbeatRequest(
        client_id="10.0.0.9@sql",
        consumer_group=group,
        subscriptions=[
            groups_pb2.Subscription(topic=topic, expression=selector, expression_type="SQL92")
        ],
        message_model=groups_pb2.MESSAGE_MODEL_CLUSTERING,
        consume_type=groups_pb2.CONSUME_TYPE_PUSH,
        consume_from_where=groups_pb2.CONSUME_FROM_WHERE_FIRST_OFFSET,
    )
    return stubs.groups.Heartbeat(request, timeout=5)


def test_a_heartbeat_refuses_a_malformed_selector_naming_topic_and_column(broker, connect):
    stubs = connect(broker.endpoint)
    with pytest.raises(grpc.RpcError) as refused:
        sql_heartbeat(stubs, "g-hb-bad", "sql-pull", MALFORMED)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "'sql-pull'" in refused.value.details() and "column 27" in refused.value.details()
    answer = sql_heartbeat(stubs, "g-hb-good", "sql-pull", BIG_EU)
    assert answer.session_timeout_ms > 0
    members = stubs.groups.GetConsumerList(
        groups_pb2.GetConsumerListRequest(consumer_group="g-hb-good"), timeout=5
    )
    assert list(members.consumer_ids) == ["10.0.0.9@sql"]
    bad = stubs.groups.GetConsumerList(
        groups_pb2.GetConsumerListRequest(consumer_group="g-hb-bad"), timeout=5
    )
    assert list(bad.consumer_ids) == []  # the refused member did not join


def test_the_group_records_a_members_sql92_subscription(in_process_broker):
    """What the broker's group view holds (RocketMQ's consumer connection lists show it)."""
    with Admin(in_process_broker.endpoint) as admin:
        admin.create_topic("sql-seen", queues=1)
    info = HeartbeatInfo(
        "10.0.0.9@seen",
        "g-seen",
        (Subscription("sql-seen", BIG_EU, "SQL92"), Subscription("%RETRY%g-seen", "*")),
    )
    cluster = Cluster(in_process_broker.endpoint, ClientConfig())
    try:
        heartbeat(cluster.connection(in_process_broker.endpoint), info)
    finally:
        cluster.close()
    seen = in_process_broker.broker.consumers.consumer_info("g-seen", "10.0.0.9@seen")
    assert ("sql-seen", BIG_EU) in seen.subscriptions
    assert seen.expression_type("sql-seen") == "SQL92"
    assert seen.expression_type("%RETRY%g-seen") == "TAG"


# -- a broker started with --no-property-filter --------------------------------------------


def test_a_broker_without_property_filtering_refuses_sql92_naming_the_flag(
    no_filter_broker, connect
):
    endpoint = no_filter_broker.endpoint
    stubs = connect(endpoint)
    with pytest.raises(grpc.RpcError) as pulled:
        stubs.messaging.PullMessages(pull_request("nosql", "region = 'eu'"), timeout=5)
    assert pulled.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "--no-property-filter" in pulled.value.details()
    with pytest.raises(grpc.RpcError) as joined:
        sql_heartbeat(stubs, "g-nosql", "nosql", "region = 'eu'")
    assert joined.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "--no-property-filter" in joined.value.details()
    mq = MessageQueue("nosql", NO_FILTER, 0)
    with PullConsumer(endpoint, sql="region = 'eu'") as consumer:
        consumer.assign([mq])
        consumer.seek(mq, 0)
        with pytest.raises(FilterNotSupportedError, match="--no-property-filter"):
            consumer.pull(mq)
    push = PushConsumer("g-nosql-push", endpoint, config=PushConsumerConfig(drain_timeout_ms=500))
    push.subscribe("nosql", sql="region = 'eu'")
    push.register_listener(lambda messages, context: ConsumeStatus.CONSUME_SUCCESS)
    with pytest.raises(FilterNotSupportedError, match="--no-property-filter"):
        push.start()
    push.shutdown()
    members = stubs.groups.GetConsumerList(
        groups_pb2.GetConsumerListRequest(consumer_group="g-nosql-push"), timeout=5
    )
    assert list(members.consumer_ids) == []
    # tag subscriptions still work there
    with PullConsumer(endpoint, subscription="*") as consumer:
        consumer.assign([mq])
        consumer.seek(mq, 0)
        assert consumer.pull(mq).status == PullStatus.NO_NEW_MSG


# -- the push consumer ---------------------------------------------------------------------


def test_a_push_consumer_gets_exactly_the_matches_and_its_retries(broker):
    topic_with_orders(broker.endpoint, "sql-push", queues=2)
    lock = threading.Lock()
    seen: list[tuple[bytes, int]] = []

    def listener(messages, context):
        with lock:
            seen.extend((m.body, m.reconsume_times) for m in messages)
        if any(m.body == b"order-9" and m.reconsume_times == 0 for m in messages):
            return ConsumeStatus.RECONSUME_LATER  # comes back through %RETRY%g-sql-push
        return ConsumeStatus.CONSUME_SUCCESS

    config = PushConsumerConfig(consume_from="FIRST_OFFSET", long_poll_ms=500)
    consumer = PushConsumer("g-sql-push", broker.endpoint, config=config)
    consumer.subscribe("sql-push", sql=BIG_EU)
    consumer.register_listener(listener)
    consumer.start()
    try:
        eventually(lambda: (b"order-9", 1) in seen, what="order 9 consumed again", timeout=20)
        with Producer(broker.endpoint) as producer:
            producer.send("sql-push", b"late-small", properties={"region": "eu", "amount": "1"})
            producer.send("sql-push", b"late-big", properties={"region": "eu", "amount": "900"})
        eventually(lambda: (b"late-big", 0) in seen, what="the late match", timeout=20)
        time.sleep(1)
    finally:
        consumer.shutdown()
    assert sorted(seen) == [
        (b"late-big", 0),
        (b"order-6", 0),
        (b"order-9", 0),
        (b"order-9", 1),  # the retry topic's copy, delivered as RocketMQ delivers it
    ]


# -- rocketlite consume --sql --------------------------------------------------------------


def test_the_consume_command_prints_exactly_the_matches(broker):
    topic_with_orders(broker.endpoint, "sql-cli")
    cli = Cli(broker.endpoint)
    namesrv = ["--namesrv", broker.remoting_address]
    newer = "region CONTAINS 'e'"
    found, remoting, bad, bad_remoting, both, contains = cli.run_all(
        ["consume", "sql-cli", "--sql", BIG_EU, "--json", "--idle-exit-ms", "500"],
        ["consume", "sql-cli", "--sql", BIG_EU, "--json", "--idle-exit-ms", "500", *namesrv],
        ["consume", "sql-cli", "--sql", MALFORMED],
        ["consume", "sql-cli", "--sql", MALFORMED, *namesrv],
        ["consume", "sql-cli", "--sql", BIG_EU, "--tag", "Paid"],
        ["consume", "sql-cli", "--sql", newer, *namesrv],
    )
    for run in (found, remoting):
        rows = run.ok().json_lines()
        assert [row["body"] for row in rows] == ["order-6", "order-9"], run
        assert all(row["properties"]["region"] == "eu" for row in rows)
    bad.failed("column 27", MALFORMED)
    bad_remoting.failed("column 27", MALFORMED)
    both.failed("consume: error:", "--sql", "--tag", code=2, prefix="rocketlite")
    # a name server may route to RocketMQ 4.x brokers, which read CONTAINS as another selector
    contains.failed("CONTAINS", "before 5.1.3")
