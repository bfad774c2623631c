"""The filter a group's heartbeats give it over remoting (``broker/remoting/filters.py``),
as decisions on literal inputs: which subscription wins, when an expression is compiled,
and what a pull without its own subscription is answered; and what CHECK_CLIENT_CONFIG
and a heartbeat's SQL92 subscriptions are decoded into."""

from __future__ import annotations

import doctest
import json

import pytest

from rmq_spark.broker.config import BrokerConfig
from rmq_spark.broker.core.broker import Broker
from rmq_spark.broker.remoting import filters
from rmq_spark.broker.remoting.answers import Refusal
from rmq_spark.broker.remoting.filters import (
    GroupFilter,
    Subscribed,
    heartbeat_selector,
    refusal,
    updated,
)
from rmq_spark.broker.remoting.service import RemotingService
from rmq_spark.broker.workers import Workers
from rmq_spark.errors import FilterNotSupportedError, InvalidArgumentError
from rmq_spark.filter import SelectorError, compile_selector
from rmq_spark.wire.remoting.codes import RequestCode, ResponseCode
from rmq_spark.wire.remoting.frame import Command
from tests.support.broker_harness import TEST_STORE_OPTIONS

compiled: list[str] = []


def compile_sql(kind: str, text: str):
    compiled.append(text)
    return compile_selector(text)


def sub(expression: str, version: int, kind: str = "SQL92") -> Subscribed:
    return Subscribed("orders", expression, kind, version)


def test_the_newest_version_wins_and_a_new_text_is_compiled_once():
    compiled.clear()
    first = updated(None, sub("a = 'x'", 10), compile_sql)
    assert first is not None and first.selector is not None and first.version == 10
    assert updated(first, sub("b = 'y'", 10), compile_sql) is None  # equal: ignored
    assert updated(first, sub("b = 'y'", 9), compile_sql) is None  # older: ignored
    same = updated(first, sub("a = 'x'", 11), compile_sql)  # the same text, newer
    assert same is not None and same.version == 11 and same.selector is first.selector
    changed = updated(same, sub("b = 'y'", 12), compile_sql)
    assert changed is not None and changed.expression == "b = 'y'"
    assert compiled == ["a = 'x'", "b = 'y'"]


def test_a_tag_subscription_is_kept_uncompiled():
    compiled.clear()
    tag = updated(GroupFilter("SQL92", "a = 'x'", 1), sub("TagA", 2, "TAG"), compile_sql)
    assert tag == GroupFilter("TAG", "TagA", 2)
    assert compiled == []
    assert heartbeat_selector(tag, 5, "g", "orders") is None  # filtered by tags


def test_an_expression_that_does_not_compile_is_kept_with_why():
    bad = updated(None, sub("a = ", 3), compile_sql)
    assert bad is not None and isinstance(bad.error, SelectorError) and bad.selector is None
    with pytest.raises(Refusal) as refused:
        heartbeat_selector(bad, 3, "billing", "orders")
    assert refused.value.code == ResponseCode.FILTER_DATA_NOT_EXIST
    assert "group 'billing' on topic 'orders'" in str(refused.value)
    assert "at column 5" in str(refused.value)


def test_a_pull_naming_a_newer_subscription_is_not_latest():
    found = updated(None, sub("a = 'x'", 100), compile_sql)
    assert found is not None
    assert heartbeat_selector(found, 100, "g", "orders") is found.selector
    assert heartbeat_selector(found, 0, "g", "orders") is found.selector  # no version sent
    with pytest.raises(Refusal) as refused:
        heartbeat_selector(found, 101, "g", "orders")
    assert refused.value.code == ResponseCode.FILTER_DATA_NOT_LATEST


def test_a_broker_without_property_filters_answers_rocketmqs_remark():
    def off(kind: str, text: str):
        raise FilterNotSupportedError("broker 'b' does not filter by SQL92")

    found = updated(None, sub("a = 'x'", 1), off)
    assert found is not None
    with pytest.raises(Refusal) as refused:
        heartbeat_selector(found, 1, "g", "orders")
    assert refused.value.code == ResponseCode.SYSTEM_ERROR
    assert str(refused.value) == (
        "The broker does not support consumer to filter message by SQL92: broker 'b' does "
        "not filter by SQL92"
    )
    bad = refusal("SQL92", InvalidArgumentError("expression type 'X' is not TAG or SQL92"))
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


def test_a_heartbeats_sql92_subscription_is_kept_as_sent(endpoints):
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
    too_long = {**subscription, "subString": "a = '" + "x" * 100 + "'"}
    with pytest.raises(InvalidArgumentError, match="--max-subscription-chars"):
        decode(
            endpoints,
            RequestCode.HEART_BEAT,
            {"clientID": "c1", "consumerDataSet": [{"groupName": "g", "subscriptionDataSet": [
                too_long]}]},
        )  # fmt: skip
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
