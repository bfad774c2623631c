"""subscriptionGroup.json: RocketMQ's entries read and kept, new groups written with
RocketMQ's fields, the per-group retry limit."""

from __future__ import annotations

import json

import pytest

from rmq_spark.broker.membership.subscription_groups import FILE_NAME, SubscriptionGroups
from rmq_spark.errors import CorruptDataError
from rmq_spark.store.config_files import groups_from_json

# As Apache RocketMQ 4.9 writes it (fastjson: a field rocketlite does not know included).
ROCKETMQ_FILE = """{
\t"dataVersion":{"counter":3,"timestamp":1700000000000},
\t"subscriptionGroupTable":{
\t\t"slow-app":{"brokerId":0,"consumeBroadcastEnable":true,"consumeEnable":true,
\t\t\t"consumeFromMinEnable":true,"groupName":"slow-app","groupRetryPolicy":{"type":"CUSTOMIZED"},
\t\t\t"notifyConsumerIdsChangedEnable":true,"retryMaxTimes":2,"retryQueueNums":1,
\t\t\t"whichBrokerWhenConsumeSlowly":1}
\t}
}"""


def table(tmp_path, seen=(), limit=16) -> SubscriptionGroups:
    return SubscriptionGroups(tmp_path, retry_max_times=limit, seen=lambda: list(seen))


def test_a_rocketmq_file_sets_the_groups_retry_limit_and_keeps_every_field(tmp_path):
    (tmp_path / FILE_NAME).write_text(ROCKETMQ_FILE)
    groups = table(tmp_path, seen=["new-app"], limit=5)
    assert groups.retry_max_times("slow-app") == 2
    assert groups.retry_max_times("new-app") == 5  # the broker's flag
    assert groups.retry_max_times("never-seen") == 5
    assert groups.persist() is True  # new-app appeared
    written = json.loads((tmp_path / FILE_NAME).read_text())["subscriptionGroupTable"]
    assert written["slow-app"]["groupRetryPolicy"] == {"type": "CUSTOMIZED"}
    assert written["slow-app"]["retryMaxTimes"] == 2
    assert written["new-app"] == {
        "brokerId": 0,
        "consumeBroadcastEnable": True,
        "consumeEnable": True,
        "consumeFromMinEnable": True,
        "groupName": "new-app",
        "notifyConsumerIdsChangedEnable": True,
        "retryMaxTimes": 5,
        "retryQueueNums": 1,
        "whichBrokerWhenConsumeSlowly": 1,
    }


def test_the_file_is_written_at_start_and_again_only_when_a_group_appears(tmp_path):
    seen: list[str] = []
    groups = SubscriptionGroups(tmp_path, retry_max_times=16, seen=lambda: seen)
    assert groups.persist() is True  # a new store gets the file
    assert json.loads((tmp_path / FILE_NAME).read_text())["subscriptionGroupTable"] == {}
    assert groups.persist() is False
    seen.append("orders-app")
    assert groups.persist() is True
    assert groups.persist() is False
    reopened = table(tmp_path)
    assert list(reopened.table()) == ["orders-app"]


@pytest.mark.parametrize(
    ("document", "names"),
    [
        ([], "JSON object"),
        ({"subscriptionGroupTable": []}, "must be an object"),
        ({"subscriptionGroupTable": {"g": 1}}, "'g'"),
        ({"subscriptionGroupTable": {"g": {"retryMaxTimes": "x"}}}, "'x'"),
    ],
)
def test_a_garbled_file_is_refused_naming_what_is_wrong(document, names):
    with pytest.raises(CorruptDataError, match=names):
        groups_from_json(document)
