"""RocketMQ's answers about a group's filter over remoting (``broker/remoting/filters.py``)
as decisions on literal inputs: what a pull without its own subscription reads with or is
answered, given the group's filter the broker core decided; and what CHECK_CLIENT_CONFIG
and a heartbeat's SQL92 subscriptions are decoded into."""

from __future__ import annotations

import doctest
import json

import pytest

from rmq_spark.broker.config import BrokerConfig
from rmq_spark.broker.core.broker import Broker
from rmq_spark.broker.membership.filters import (
    FilterExpressionError,
    Subscribed,
    TopicFilter,
    read_filter,
)
from rmq_spark.broker.remoting import filters
from rmq_spark.broker.remoting.answers import Refusal
from rmq_spark.broker.remoting.filters import group_read, refusal
from rmq_spark.broker.remoting.service import RemotingService
from rmq_spark.broker.workers import Workers
from rmq_spark.codec.taghash import tag_hash_code
from rmq_spark.errors import FilterNotSupportedError, InvalidArgumentError
from rmq_spark.filter import SelectorError, compile_selector
from rmq_spark.wire.remoting.codes import RequestCode, ResponseCode
from rmq_spark.wire.remoting.frame import Command
from tests.support.broker_harness import TEST_STORE_OPTIONS


def sql(expression: str, version: int) -> TopicFilter:
    return TopicFilter(
        "orders", "SQL92", expression, version, selector=compile_selector(expression)
    )


def test_a_tag_filter_reads_by_hash_codes():
    tags = read_filter("TAG", "TagA", max_chars=64)
    found = TopicFilter("orders", "TAG", "TagA", 2, tags.tag_codes)
    assert group_read(found, 5, "g", "orders") == ([tag_hash_code("TagA")], None)


def test_an_expression_that_did_not_compile_is_filter_data_not_exist():
    try:
        compile_selector("a = ")
    except SelectorError as exc:
        error = exc
    bad = TopicFilter("orders", "SQL92", "a = ", 3, error=error)
    with pytest.raises(Refusal) as refused:
        group_read(bad, 3, "billing", "orders")
    assert refused.value.code == ResponseCode.FILTER_DATA_NOT_EXIST
    assert "group 'billing' on topic 'orders'" in str(refused.value)
    assert "at column 5" in str(refused.value)


def test_a_pull_naming_a_newer_subscription_is_not_latest():
    found = sql("a = 'x'", 100)
    assert group_read(found, 100, "g", "orders") == (None, found.selector)
    assert group_read(found, 0, "g", "orders") == (None, found.selector)  # no version sent
    with pytest.raises(Refusal) as refused:
        group_read(found, 101, "g", "orders")
    assert refused.value.code == ResponseCode.FILTER_DATA_NOT_LATEST


def test_a_broker_without_property_filters_answers_rocketmqs_remark():
    off = FilterNotSupportedError("broker 'b' does not filter by SQL92")
    found = TopicFilter("orders", "SQL92", "a = 'x'", 1, error=off)
    with pytest.raises(Refusal) as refused:
        group_read(found, 1, "g", "orders")
    assert refused.value.code == ResponseCode.SYSTEM_ERROR
    assert str(refused.value) == (
        "The broker does not support consumer to filter message by SQL92: broker 'b' does "
        "not filter by SQL92"
    )
    bad = refusal("SQL92", FilterExpressionError("expression type 'X' is not TAG or SQL92"))
    assert bad.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED


# -- what the requests are decoded into -------------------------------------------------------


@pytest.fixture(scope="module")
def endpoints(tmp_path_factory):
    config = BrokerConfig(
        store_dir=tmp_path_factory.mktemp("filters"),
        port=0,
        store_options=dict(TEST_STORE_OPTIONS),
        max_subscription_chars=64,
    )
    broker = Broker(config, 10911)
    workers = Workers(1)
    yield RemotingService(broker, workers, "127.0.0.1:10911")._endpoints
    workers.shutdown()
    broker.close()


def decode(endpoints, code: int, body: dict):
    return endpoints[code].decode(Command(code=code, ext={}, body=json.dumps(body).encode()))


def test_check_client_config_needs_sub_on_the_group_and_topic(endpoints):
    body = {
        "clientId": "c1",
        "group": "billing",
        "subscriptionData": {"topic": "orders", "subString": "a > 1", "expressionType": "sql92"},
    }
    check = decode(endpoints, RequestCode.CHECK_CLIENT_CONFIG, body)
    assert check.subscription == Subscribed("orders", "a > 1", "SQL92", 0)
    needs = endpoints[RequestCode.CHECK_CLIENT_CONFIG].rule.needs(check)
    assert sorted((str(n.resource), sorted(a.name for a in n.actions)) for n in needs) == [
        ("Group:billing", ["SUB"]),
        ("Topic:orders", ["SUB"]),
    ]
    nothing = decode(endpoints, RequestCode.CHECK_CLIENT_CONFIG, {"group": "billing"})
    assert nothing.subscription is None


def test_a_heartbeats_subscriptions_are_kept_as_sent(endpoints):
    subscription = {
        "topic": "orders",
        "subString": "a = 'x' OR b = 'y'",
        "expressionType": "SQL92",
        "subVersion": 1700000000123,
    }
    hb = decode(
        endpoints,
        RequestCode.HEART_BEAT,
        {"clientID": "c1", "consumerDataSet": [{"groupName": "g", "subscriptionDataSet": [
            subscription, {"topic": "%RETRY%g", "subString": "*"}]}]},
    )  # fmt: skip
    assert hb.consumers[0].subscriptions == [
        Subscribed("orders", "a = 'x' OR b = 'y'", "SQL92", 1700000000123),
        Subscribed("%RETRY%g", "*", "TAG", 0),
    ]
    unversioned = {"group": "g", "subscriptionData": {**subscription, "subVersion": None}}
    assert decode(endpoints, RequestCode.CHECK_CLIENT_CONFIG, unversioned).subscription.version == 0
    with pytest.raises(InvalidArgumentError, match="subVersion"):
        decode(
            endpoints,
            RequestCode.CHECK_CLIENT_CONFIG,
            {"group": "g", "subscriptionData": {**subscription, "subVersion": "soon"}},
        )


def test_doctests():
    assert doctest.testmod(filters).failed == 0
