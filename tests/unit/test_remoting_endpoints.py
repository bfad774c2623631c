"""The remoting front-end's endpoints as a table: each request is decoded once, and the
rights its rule asks for are read from that decoded value, so the topic or group checked is
the one the handler acts on, whatever else the raw header says.

A real Broker over a temporary store serves the decoders (they read its limits); no request
is served here (the integration tests send them over a real connection)."""

from __future__ import annotations

import json

import pytest

from rmq_spark.broker.config import BrokerConfig
from rmq_spark.broker.core.broker import Broker
from rmq_spark.broker.remoting.answers import Refusal
from rmq_spark.broker.remoting.service import RemotingService
from rmq_spark.broker.transactions.state import HalfState
from rmq_spark.broker.workers import Workers
from rmq_spark.errors import InvalidArgumentError, ReservedTopicError
from rmq_spark.wire.remoting.codes import RequestCode as C
from rmq_spark.wire.remoting.codes import ResponseCode
from rmq_spark.wire.remoting.frame import Command
from rmq_spark.wire.remoting.headers import encode_batch
from tests.support.broker_harness import TEST_STORE_OPTIONS


@pytest.fixture(scope="module")
def endpoints(tmp_path_factory):
    store = tmp_path_factory.mktemp("endpoints")
    config = BrokerConfig(
        store_dir=store, port=0, store_options=dict(TEST_STORE_OPTIONS), max_batch_messages=3
    )
    broker = Broker(config, 10911)
    workers = Workers(1)
    service = RemotingService(broker, workers, "127.0.0.1:10911")
    yield service._endpoints
    workers.shutdown()
    broker.close()


def needs_of(endpoint, value) -> list[tuple[str, list[str]]]:
    needs = endpoint.rule.needs(value) if endpoint.rule.needs else []
    return sorted((str(n.resource), sorted(a.name for a in n.actions)) for n in needs)


def decoded_needs(endpoints, code, ext, body=b""):
    endpoint = endpoints[code]
    return needs_of(endpoint, endpoint.decode(Command(code=code, ext=ext, body=body)))


SEND_V2 = {"a": "pg", "c": "TBW102", "d": "4", "e": "0", "f": "0", "g": "1", "h": "0"}
SEND_V1 = {
    "producerGroup": "pg",
    "defaultTopic": "TBW102",
    "defaultTopicQueueNums": "4",
    "queueId": "0",
    "sysFlag": "0",
    "bornTimestamp": "1",
    "flag": "0",
}


@pytest.mark.parametrize(
    ("code", "ext", "topic_written", "needs"),
    [
        # each send code reads its own names; the other code's names are ignored, by the
        # check and by the write alike
        (C.SEND_MESSAGE, {**SEND_V1, "topic": "TopicB", "b": "TopicA"}, "TopicB", "Topic:TopicB"),
        (
            C.SEND_MESSAGE_V2,
            {**SEND_V2, "b": "TopicA", "topic": "TopicB"},
            "TopicA",
            "Topic:TopicA",
        ),
        # a consumer's fallback send to its retry topic is its group's business
        (C.SEND_MESSAGE_V2, {**SEND_V2, "b": "%RETRY%billing"}, "%RETRY%billing", "Group:billing"),
    ],
)
def test_a_send_is_checked_on_the_topic_it_writes(endpoints, code, ext, topic_written, needs):
    endpoint = endpoints[code]
    plan = endpoint.decode(Command(code=code, ext=ext, body=b"x"))
    assert plan.topic == topic_written
    assert [name for name, _ in needs_of(endpoint, plan)] == [needs]


@pytest.mark.parametrize(
    "topic",
    [
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "RMQ_SYS_TRANS_OP_HALF_TOPIC",
        "rmq_sys_wheel_timer",
        "RMQ_SYS_SINK_HALF_TOPIC",
        "TRANS_CHECK_MAX_TIME_TOPIC",
        "SCHEDULE_TOPIC_XXXX",
        "rmq_sys_some_future_topic",
        "%DLQ%billing",
    ],
)
def test_a_send_to_a_topic_of_the_brokers_is_refused_when_decoded(endpoints, topic):
    with pytest.raises(ReservedTopicError, match="the broker's own"):
        endpoints[C.SEND_MESSAGE_V2].decode(Command(C.SEND_MESSAGE_V2, {**SEND_V2, "b": topic}))


def test_a_batch_over_the_limit_is_refused_when_decoded(endpoints):
    body = encode_batch([0] * 4, [b"m"] * 4, [b""] * 4)
    request = Command(C.SEND_BATCH_MESSAGE, {**SEND_V2, "b": "TopicA", "m": "true"}, body)
    with pytest.raises(Refusal, match="--max-batch-messages") as refused:
        endpoints[C.SEND_BATCH_MESSAGE].decode(request)
    assert refused.value.code == ResponseCode.MESSAGE_ILLEGAL


def test_a_transaction_end_is_checked_on_the_half_message_it_ends(endpoints):
    endpoint = endpoints[C.END_TRANSACTION]
    ext = {"commitOrRollback": "8", "msgId": "TX1", "producerGroup": "pg"}
    end = endpoint.decode(Command(C.END_TRANSACTION, ext))
    assert end.topic is None  # Java 4.9 names no topic
    half = HalfState("TX1", 0, 100, 0, "TopicB", 0, producer_group="pg")
    resolved = type(end)(**{**end.__dict__, "half": half})
    assert needs_of(endpoint, resolved) == [("Topic:TopicB", ["PUB"])]
    # a topic given is not what is checked: the half message's is
    told = endpoint.decode(Command(C.END_TRANSACTION, {**ext, "topic": "TopicA"}))
    assert needs_of(endpoint, type(told)(**{**told.__dict__, "half": half})) == [
        ("Topic:TopicB", ["PUB"])
    ]


def test_a_transaction_end_naming_two_transactions_is_refused(endpoints):
    ext = {"commitOrRollback": "8", "msgId": "TX1", "transactionId": "TX2"}
    with pytest.raises(InvalidArgumentError, match="two transactions"):
        endpoints[C.END_TRANSACTION].decode(Command(C.END_TRANSACTION, ext))


@pytest.mark.parametrize(
    ("code", "ext", "body", "needs"),
    [
        (
            C.CONSUMER_SEND_MSG_BACK,
            {"group": "GroupC", "offset": "0", "delayLevel": "-1", "originTopic": "TopicA"},
            b"",
            [("Group:GroupC", ["SUB"]), ("Topic:TopicA", ["SUB"])],
        ),
        (
            C.PULL_MESSAGE,
            {"topic": "orders", "consumerGroup": "billing", "queueId": "0", "queueOffset": "0"},
            b"",
            [("Group:billing", ["SUB"]), ("Topic:orders", ["SUB"])],
        ),
        (
            C.UPDATE_CONSUMER_OFFSET,
            {"topic": "orders", "consumerGroup": "billing", "queueId": "0", "commitOffset": "3"},
            b"",
            [("Group:billing", ["SUB"]), ("Topic:orders", ["SUB"])],
        ),
        (C.GET_MAX_OFFSET, {"topic": "orders", "queueId": "0"}, b"", [("Topic:orders", ["SUB"])]),
        (C.GET_ROUTEINFO_BY_TOPIC, {"topic": "orders"}, b"", [("Topic:orders", ["PUB", "SUB"])]),
        (C.GET_ROUTEINFO_BY_TOPIC, {"topic": "TBW102"}, b"", []),  # auto-creation's fallback
        # the consume statistics of one topic carry its offsets: Sub on it too
        (
            C.GET_CONSUME_STATS,
            {"consumerGroup": "billing", "topic": "payments"},
            b"",
            [("Group:billing", ["SUB"]), ("Topic:payments", ["SUB"])],
        ),
        (
            C.QUERY_MESSAGE,
            {
                "topic": "orders",
                "key": "order-1",
                "maxNum": "1",
                "beginTimestamp": "0",
                "endTimestamp": "1",
                "_UNIQUE_KEY_QUERY": "true",
            },
            b"",
            [("Topic:orders", ["GET", "SUB"])],
        ),
        (
            C.HEART_BEAT,
            {},
            json.dumps(
                {
                    "clientID": "c1",
                    "consumerDataSet": [
                        {
                            "groupName": "billing",
                            "subscriptionDataSet": [
                                {"topic": "orders"},
                                # another group's retry topic is that group's
                                {"topic": "%RETRY%audit"},
                            ],
                        }
                    ],
                }
            ).encode(),
            [("Group:audit", ["SUB"]), ("Group:billing", ["SUB"]), ("Topic:orders", ["SUB"])],
        ),
        (
            C.LOCK_BATCH_MQ,
            {},
            json.dumps(
                {
                    "consumerGroup": "billing",
                    "clientId": "c1",
                    "mqSet": [{"topic": "orders", "brokerName": "broker-a", "queueId": 0}],
                }
            ).encode(),
            [("Group:billing", ["SUB"]), ("Topic:orders", ["SUB"])],
        ),
    ],
)
def test_each_request_needs_the_topic_and_group_it_acts_on(endpoints, code, ext, body, needs):
    assert decoded_needs(endpoints, code, ext, body) == needs


def test_broker_wide_requests_are_for_super_users(endpoints):
    for code in (
        C.UPDATE_AND_CREATE_TOPIC,
        C.DELETE_TOPIC_IN_BROKER,
        C.GET_BROKER_RUNTIME_INFO,
        C.VIEW_MESSAGE_BY_ID,
        C.PUT_KV_CONFIG,
    ):
        assert endpoints[code].rule.super_only, code
    assert not endpoints[C.GET_BROKER_CLUSTER_INFO].rule.super_only
    assert not endpoints[C.QUERY_MESSAGE].rule.super_only


@pytest.mark.parametrize("topic", ["RMQ_SYS_TRANS_HALF_TOPIC", "rmq_sys_wheel_timer"])
def test_tools_cannot_create_or_delete_the_brokers_topics(endpoints, topic):
    for code in (C.UPDATE_AND_CREATE_TOPIC, C.DELETE_TOPIC_IN_BROKER):
        with pytest.raises(InvalidArgumentError, match="the broker's own"):
            endpoints[code].decode(Command(code, {"topic": topic}))
