"""The broker's settings as tools read and change them (core/settings.py), their Java
Properties text (wire/remoting/config_text.py) and subscription groups created and deleted
by tools (membership/subscription_groups.py)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from rmq_spark.broker.config import BrokerConfig
from rmq_spark.broker.core import settings
from rmq_spark.broker.membership.subscription_groups import SubscriptionGroups, check_group_entry
from rmq_spark.errors import InvalidArgumentError
from rmq_spark.wire.remoting.config_text import read_properties, write_properties


@pytest.fixture
def config(tmp_path) -> BrokerConfig:
    return BrokerConfig(tmp_path / "store", name="broker-s", remoting_port=0)


def shown(config: BrokerConfig) -> dict[str, str]:
    return settings.settings(config, config.store_config(), grpc_port=10911, remoting_port=9876)


def test_settings_show_rocketmqs_names_and_the_bound_ports(config):
    listed = shown(config)
    assert listed["brokerName"] == "broker-s"
    assert listed["brokerPermission"] == "6"
    assert listed["autoCreateTopicEnable"] == "false"
    assert listed["flushDiskType"] == "ASYNC_FLUSH"
    assert listed["listenPort"] == "9876" and listed["grpcPort"] == "10911"
    assert listed["mappedFileSizeCommitLog"] == str(config.store_config().commitlog_segment_bytes)
    assert listed["maxPullBytes"] == str(config.max_pull_bytes)
    # RocketMQ's fileReservedTime counts hours: rocketlite's milliseconds are not shown as it
    assert "fileReservedTime" not in listed and "fileReservedMs" in listed
    assert list(listed) == sorted(listed)


def test_every_changeable_setting_is_shown_and_set_on_the_live_config(config):
    listed = shown(config)
    values = {
        "brokerPermission": ("4", 4),
        "autoCreateTopicEnable": ("TRUE", True),
        "defaultTopicQueueNums": ("3", 3),
        "maxPullMessages": ("10", 10),
        "maxPullBytes": ("1024", 1024),
        "maxBatchMessages": ("5", 5),
        "maxSubscriptionChars": ("100", 100),
    }
    assert set(values) == set(settings.CHANGEABLE)
    for key, (text, value) in values.items():
        assert key in listed
        field = settings.CHANGEABLE[key].field
        assert settings.update(config, config.store_config(), {key: text}) == {field: value}
        assert getattr(config, field) == value
        expected = ("true" if value else "false") if isinstance(value, bool) else str(value)
        assert shown(config)[key] == expected


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"brokerName": "x"}, ["brokerName cannot change", "--name"]),
        ({"maxMessageSize": "10"}, ["maxMessageSize cannot change", "--max-message-bytes"]),
        ({"consumerSessionTimeoutMs": "1"}, ["--session-timeout-ms"]),
        ({"fileReservedMs": "1"}, ["fileReservedMs cannot change", "--file-reserved-ms"]),
        ({"nope": "1"}, ["'nope' is not a setting", "brokerPermission"]),
        ({"brokerPermission": "7"}, ["brokerPermission=7 must be 2"]),
        ({"brokerPermission": "rw"}, ["brokerPermission='rw' is not a whole number"]),
        ({"defaultTopicQueueNums": "0"}, ["defaultTopicQueueNums=0 must be >= 1"]),
        ({"autoCreateTopicEnable": "1"}, ["autoCreateTopicEnable='1' must be true or false"]),
        ({"maxPullBytes": str(1 << 40)}, ["max_response_bytes", "nothing was changed"]),
        ({}, ["names no setting"]),
    ],
)
def test_a_refused_change_names_the_setting_and_changes_nothing(config, changes, words):
    before = dataclasses.asdict(config)
    with pytest.raises(InvalidArgumentError) as refused:
        # with a good change beside it (when the refused one is not empty): neither is made
        both = {"brokerPermission": "4", **changes} if changes else changes
        settings.update(config, config.store_config(), both)
    for word in words:
        assert word in str(refused.value)
    assert dataclasses.asdict(config) == before


def test_properties_text_reads_what_java_writes_and_back():
    text = (
        b"# written by a tool\n! another comment\n\nbrokerPermission=4\n"
        b"autoCreateTopicEnable : true\nmaxPullBytes 1024\n"
        b"messageDelayLevel=1s 5s \\\n    10s\nweird\\=key=a\\\\b\\u0041\n"
    )
    assert read_properties(text) == {
        "brokerPermission": "4",
        "autoCreateTopicEnable": "true",
        "maxPullBytes": "1024",
        "messageDelayLevel": "1s 5s 10s",
        "weird=key": "a\\bA",
    }
    written = {"b": "x\\y", "a": "1s 5s", "c": "line\nbreak"}
    assert read_properties(write_properties(written)) == written
    assert write_properties({"b": "2", "a": "1"}) == b"a=1\nb=2\n"
    with pytest.raises(InvalidArgumentError, match="UTF-8"):
        read_properties(b"\xffkey=1")
    with pytest.raises(InvalidArgumentError, match="no key"):
        read_properties(b"=value\n")


def test_a_group_entry_from_a_tool_is_checked_and_filled():
    entry = check_group_entry({"groupName": "g", "retryMaxTimes": 2, "groupSysFlag": 0})
    assert entry["retryMaxTimes"] == 2 and entry["consumeEnable"] is True
    assert entry["groupSysFlag"] == 0  # a newer RocketMQ's field, kept
    for bad, word in [
        ({"groupName": "g", "consumeEnable": "true"}, "consumeEnable"),
        ({"groupName": "g", "retryQueueNums": -1}, "retryQueueNums"),
        ({"groupName": "g", "brokerId": True}, "brokerId"),
        ({"groupName": "g", "retryMaxTimes": 1 << 40}, "retryMaxTimes"),
        ({"retryMaxTimes": 1}, "group"),
        ([], "JSON object"),
    ]:
        with pytest.raises(InvalidArgumentError, match=word):
            check_group_entry(bad)


def test_groups_created_and_deleted_by_tools_are_in_the_file(tmp_path):
    seen = {"with-offsets"}
    groups = SubscriptionGroups(tmp_path, retry_max_times=16, seen=lambda: seen)
    groups.start()
    try:
        groups.update({"groupName": "made", "retryMaxTimes": 3})
        assert groups.retry_max_times("made") == 3
        on_disk = json.loads((tmp_path / "subscriptionGroup.json").read_text())
        assert on_disk["subscriptionGroupTable"]["made"]["retryMaxTimes"] == 3

        assert groups.delete("with-offsets") and not groups.delete("never-there")
        assert groups.delete("made")
        assert set(groups.table()) == set()  # a deleted group seen again is not re-added
        assert groups.retry_max_times("made") == 16
        on_disk = json.loads((tmp_path / "subscriptionGroup.json").read_text())
        assert on_disk["subscriptionGroupTable"] == {}

        groups.update({"groupName": "with-offsets"})
        assert set(groups.table()) == {"with-offsets"}
    finally:
        groups.close()
