"""Option parsing of the rocketlite source: defaults, every error names the option."""

from __future__ import annotations

import pickle

import pytest
from pyspark.sql.datasource import CaseInsensitiveDict

from rmq_spark.errors import InvalidArgumentError
from rmq_spark.source.options import (
    DEFAULT_PULL_BATCH_SIZE,
    OPTION_NAMES,
    EndingPosition,
    SourceOptions,
    StartingPosition,
)
from rmq_spark.structs import MessageQueue

BASE = {"endpoints": "127.0.0.1:10911", "topic": "orders"}


def parse(streaming: bool = True, **options: str) -> SourceOptions:
    merged = {**BASE, **options}
    return SourceOptions.parse({k: v for k, v in merged.items() if v is not None}, streaming)


def fails(message: str, streaming: bool = True, **options: str) -> str:
    with pytest.raises(InvalidArgumentError, match=message) as info:
        parse(streaming, **options)
    return str(info.value)


def test_streaming_defaults() -> None:
    opts = parse()
    assert opts.endpoints == ("127.0.0.1:10911",)
    assert opts.topics == ("orders",) and opts.topic_pattern is None
    assert opts.starting == StartingPosition("latest")
    assert opts.ending is None
    assert opts.subscription.expression == "*"
    assert (opts.max_messages_per_trigger, opts.max_bytes_per_trigger) == (None, None)
    assert opts.max_trigger_delay_ms == 15 * 60 * 1000
    assert opts.fail_on_data_loss is True
    assert opts.commit_offsets is False
    assert opts.allocate_strategy is None
    assert opts.pull_batch_size == DEFAULT_PULL_BATCH_SIZE == 8192
    assert (opts.pull_timeout_ms, opts.max_retries, opts.retry_backoff_ms) == (10_000, 3, 1_000)


def test_batch_defaults_start_at_earliest_and_end_at_latest() -> None:
    opts = parse(streaming=False)
    assert opts.starting == StartingPosition("earliest")
    assert opts.ending == EndingPosition("latest")


def test_keys_match_ignoring_case_as_from_spark() -> None:
    spark_map = CaseInsensitiveDict(
        {"Endpoints": "h:1", "TOPICS": "a,b", "maxMessagesPerTrigger": "100"}
    )
    opts = SourceOptions.parse(spark_map, streaming=True)
    assert opts.topics == ("a", "b") and opts.max_messages_per_trigger == 100


def test_the_same_option_twice_in_different_case() -> None:
    with pytest.raises(InvalidArgumentError, match="option topic is given twice"):
        SourceOptions.parse({"endpoints": "h:1", "topic": "a", "TOPIC": "b"}, True)


@pytest.mark.parametrize(
    ("key", "suggestion"),
    [
        ("startingOffset", "startingOffsets"),
        ("maxOffsetsPerTrigger", "maxMessagesPerTrigger"),
        ("subscribe", "topics"),
        ("kafka.bootstrap.servers", "endpoints"),
    ],
)
def test_unknown_options_suggest_close_names(key: str, suggestion: str) -> None:
    message = fails(f"unknown option '{key}' .*did you mean {suggestion}", **{key: "x"})
    assert "Valid options: endpoints, topic, topics" in message


def test_option_names_are_unique_ignoring_case() -> None:
    assert len({name.lower() for name in OPTION_NAMES}) == len(OPTION_NAMES)


def test_values_must_be_strings() -> None:
    fails("option pullBatchSize=5 is invalid: option values are strings", pullBatchSize=5)


def test_endpoints_required_and_checked() -> None:
    fails("option endpoints is required", endpoints=None)
    fails("option endpoints='h:99999' is invalid: .*port 99999", endpoints="h:99999")
    assert parse(endpoints="a:1, b:2").endpoints == ("a:1", "b:2")


def test_name_server_reads_a_rocketmq_cluster_instead_of_endpoints() -> None:
    opts = parse(endpoints=None, nameServer=" 10.0.0.5:9876 ; 10.0.0.6:9876 ")
    assert opts.name_server == "10.0.0.5:9876;10.0.0.6:9876" and opts.endpoints == ()
    assert parse().name_server is None
    fails("endpoints .* or nameServer .*, not both", nameServer="h:9876")
    fails("option nameServer='h' is invalid: use host:port", endpoints=None, nameServer="h")
    fails(
        "option maxBytesPerTrigger is not supported with nameServer",
        endpoints=None,
        nameServer="h:9876",
        maxBytesPerTrigger="1m",
    )


def test_exactly_one_topic_option() -> None:
    fails("exactly one of the options topic .*got none", topic=None)
    fails("exactly one .*got topic and topicPattern", topicPattern="o.*")


def test_empty_topic() -> None:
    fails("option topic='' is invalid: expected a topic name", topic="")


def test_topics_list_checked() -> None:
    assert parse(topic=None, topics=" a , b ").topics == ("a", "b")
    fails("option topics='a,,b' is invalid: an empty topic name", topic=None, topics="a,,b")
    fails("topic 'a' is listed twice", topic=None, topics="a,b,a")
    fails("option topics='a,b c' is invalid: .*topic name 'b c'", topic=None, topics="a,b c")
    fails("use the option topics for a comma-separated list", topic="a,b")


def test_topic_pattern_matches_whole_names_and_skips_system_topics() -> None:
    opts = parse(topic=None, topicPattern="orders-.*")
    assert opts.subscribes("orders-eu") and not opts.subscribes("x-orders-eu")
    everything = parse(topic=None, topicPattern=".*")
    assert everything.subscribes("orders")
    assert not everything.subscribes("%RETRY%group") and not everything.subscribes("%DLQ%group")
    assert parse(topic=None, topicPattern="%DLQ%.*").subscribes("%DLQ%group")
    fails(
        "option topicPattern='orders\\[' is invalid: not a regular expression",
        topic=None,
        topicPattern="orders[",
    )


def test_group_and_sub_expression_checked() -> None:
    fails("option group='a b' is invalid", group="a b")
    assert parse(subExpression="TagA || TagB").subscription.tags == frozenset({"TagA", "TagB"})
    fails("option subExpression='TagA | TagB' is invalid", subExpression="TagA | TagB")


def test_starting_offsets_keywords_and_json() -> None:
    assert parse(startingOffsets="EARLIEST").starting == StartingPosition("earliest")
    json_start = parse(startingOffsets='{"orders": {"broker-a": {"0": 5, "1": -1}}}').starting
    assert json_start.kind == "offsets"
    assert json_start.offsets == {
        MessageQueue("orders", "broker-a", 0): 5,
        MessageQueue("orders", "broker-a", 1): -1,
    }
    fails(
        "option startingOffsets='first' is invalid: expected earliest, latest, group or JSON",
        startingOffsets="first",
    )
    fails("startingOffsets='\\{\\}' is invalid: names no queue", startingOffsets="{}")


def test_batch_cannot_start_at_latest() -> None:
    fails("a batch query cannot start at latest", streaming=False, startingOffsets="latest")
    fails(
        "-1 \\(latest\\) is not allowed in startingOffsets",
        streaming=False,
        startingOffsets='{"orders": {"broker-a": {"0": -1}}}',
    )


def test_json_offsets_must_name_subscribed_topics() -> None:
    fails(
        "option startingOffsets names topic 'audit', which this source does not read "
        "\\(topics orders\\)",
        startingOffsets='{"audit": {"broker-a": {"0": 5}}}',
    )


def test_start_from_group_with_fallbacks() -> None:
    opts = parse(group="g", startingOffsets="group")
    assert opts.starting == StartingPosition("group", group_fallback="latest")
    assert parse(False, group="g", startingOffsets="group").starting.group_fallback == "earliest"
    by_time = parse(group="g", startingOffsets="group", startingTimestamp="1700000000000")
    assert by_time.starting == StartingPosition(
        "group", timestamp_ms=1700000000000, group_fallback="timestamp"
    )
    explicit = parse(group="g", startingOffsets="group", groupFallback="Earliest")
    assert explicit.starting.group_fallback == "earliest"


def test_group_start_errors() -> None:
    fails("startingOffsets=group needs the option group", startingOffsets="group")
    fails(
        "groupFallback=timestamp needs the option startingTimestamp",
        group="g",
        startingOffsets="group",
        groupFallback="timestamp",
    )
    fails(
        "startingTimestamp is unused with groupFallback=earliest",
        group="g",
        startingOffsets="group",
        groupFallback="earliest",
        startingTimestamp="5",
    )
    fails("groupFallback only applies with startingOffsets=group", groupFallback="earliest")
    fails(
        "option groupFallback='oldest' is invalid: expected earliest, latest or timestamp",
        group="g",
        startingOffsets="group",
        groupFallback="oldest",
    )
    fails(
        "a batch query cannot fall back to latest",
        streaming=False,
        group="g",
        startingOffsets="group",
        groupFallback="latest",
    )


def test_group_fallback_is_never_silently_ignored() -> None:
    fails(
        "groupFallback only applies with startingOffsets=group",
        groupFallback="earliest",
        startingOffsetsByTimestamp='{"orders": {"b": {"3": 17}}}',
    )


def test_wrong_mode_is_reported_before_other_problems() -> None:
    fails("option commitOffsets only applies to streaming", streaming=False, commitOffsets="true")


def test_start_by_timestamp() -> None:
    assert parse(startingTimestamp="1700000000000").starting == StartingPosition(
        "timestamp", timestamp_ms=1700000000000
    )
    per_queue = parse(startingOffsetsByTimestamp='{"orders": {"b": {"3": 17}}}').starting
    assert per_queue == StartingPosition(
        "byTimestamp", offsets={MessageQueue("orders", "b", 3): 17}
    )
    fails(
        "option startingTimestamp='yesterday' is invalid: expected milliseconds since the epoch",
        startingTimestamp="yesterday",
    )
    fails(
        "startingTimestamp cannot be combined with startingOffsets='earliest'",
        startingTimestamp="5",
        startingOffsets="earliest",
    )
    fails(
        "startingOffsetsByTimestamp cannot be combined with startingTimestamp",
        startingTimestamp="5",
        startingOffsetsByTimestamp='{"orders": {"b": {"3": 17}}}',
    )


def test_ending_positions_for_batch() -> None:
    end = parse(False, endingOffsets='{"orders": {"b": {"0": 9, "1": -1}}}').ending
    assert end == EndingPosition(
        "offsets", offsets={MessageQueue("orders", "b", 0): 9, MessageQueue("orders", "b", 1): -1}
    )
    assert parse(False, endingTimestamp="99").ending == EndingPosition("timestamp", timestamp_ms=99)
    fails(
        "-2 \\(earliest\\) is not allowed in endingOffsets",
        streaming=False,
        endingOffsets='{"orders": {"b": {"0": -2}}}',
    )
    fails(
        "endingOffsets and endingTimestamp cannot be combined",
        streaming=False,
        endingOffsets="latest",
        endingTimestamp="5",
    )
    fails(
        "startingTimestamp=10 is after endingTimestamp=5",
        streaming=False,
        startingTimestamp="10",
        endingTimestamp="5",
    )
    fails(
        "starts topic 'orders' broker 'b' queue 0 at 10, after its endingOffsets 5",
        streaming=False,
        startingOffsets='{"orders": {"b": {"0": 10}}}',
        endingOffsets='{"orders": {"b": {"0": 5}}}',
    )


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("maxMessagesPerTrigger", "10"),
        ("maxBytesPerTrigger", "10"),
        ("minMessagesPerTrigger", "10"),
        ("commitOffsets", "false"),
    ],
)
def test_streaming_only_options_rejected_in_batch(option: str, value: str) -> None:
    fails(
        f"option {option} only applies to streaming queries .*this is a batch query",
        streaming=False,
        **{option: value},
    )


@pytest.mark.parametrize(
    ("option", "value"), [("endingOffsets", "latest"), ("endingTimestamp", "5")]
)
def test_batch_only_options_rejected_in_streaming(option: str, value: str) -> None:
    fails(f"option {option} only applies to batch queries", **{option: value})


def test_trigger_limits() -> None:
    opts = parse(maxMessagesPerTrigger="1000", minMessagesPerTrigger="10", maxTriggerDelay="30s")
    assert (opts.max_messages_per_trigger, opts.min_messages_per_trigger) == (1000, 10)
    assert opts.max_trigger_delay_ms == 30_000
    fails(
        "minMessagesPerTrigger=10 is above maxMessagesPerTrigger=5",
        maxMessagesPerTrigger="5",
        minMessagesPerTrigger="10",
    )
    fails("maxTriggerDelay only applies with minMessagesPerTrigger", maxTriggerDelay="1m")
    fails(
        "option maxMessagesPerTrigger='0' is invalid: expected a whole number in 1..",
        maxMessagesPerTrigger="0",
    )


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("500ms", 500),
        ("30s", 30_000),
        ("15m", 900_000),
        ("2 min", 120_000),
        ("1H", 3_600_000),
        ("1d", 86_400_000),
    ],
)
def test_durations(text: str, ms: int) -> None:
    assert parse(minMessagesPerTrigger="1", maxTriggerDelay=text).max_trigger_delay_ms == ms


@pytest.mark.parametrize("text", ["15", "0s", "-1s", "1.5s", "15 minutes", ""])
def test_bad_durations(text: str) -> None:
    fails(
        "option maxTriggerDelay=.* is invalid: expected a positive duration with a unit",
        minMessagesPerTrigger="1",
        maxTriggerDelay=text,
    )


@pytest.mark.parametrize(
    ("text", "size"),
    [("1048576", 1 << 20), ("512k", 512 << 10), ("64MB", 64 << 20), ("1g", 1 << 30)],
)
def test_byte_sizes(text: str, size: int) -> None:
    assert parse(maxBytesPerTrigger=text).max_bytes_per_trigger == size


def test_bad_byte_size() -> None:
    fails(
        "option maxBytesPerTrigger='1.5m' is invalid: expected a positive size in bytes",
        maxBytesPerTrigger="1.5m",
    )


def test_fail_on_data_loss() -> None:
    assert parse(failOnDataLoss="FALSE").fail_on_data_loss is False
    fails("option failOnDataLoss='no' is invalid: expected true or false", failOnDataLoss="no")


def test_commit_offsets_follows_group() -> None:
    assert parse(group="g").commit_offsets is True
    assert parse(group="g", commitOffsets="false").commit_offsets is False
    assert parse(False, group="g").commit_offsets is False  # batch queries never commit
    fails("commitOffsets=true needs the option group", commitOffsets="true")


def test_allocate_strategy() -> None:
    opts = parse(allocateStrategy="AVG_BY_CIRCLE", numPartitions="4")
    assert (opts.allocate_strategy, opts.num_partitions) == ("avgByCircle", 4)
    assert parse(allocateStrategy="consistenthash", numPartitions="2").allocate_strategy == (
        "consistentHash"
    )
    message = fails(
        "option allocateStrategy='machineRoom' is invalid: expected one of avg, "
        "avgByCircle, consistentHash",
        allocateStrategy="machineRoom",
        numPartitions="2",
    )
    assert "unread or read twice" in message
    fails("option allocateStrategy needs the option numPartitions", allocateStrategy="avg")
    fails("option numPartitions needs the option allocateStrategy", numPartitions="3")
    fails(
        "option minPartitions splits queue ranges, allocateStrategy groups whole queues",
        allocateStrategy="avg",
        numPartitions="3",
        minPartitions="8",
    )


def test_splitting_options() -> None:
    opts = parse(minPartitions="16", maxMessagesPerPartition="100000")
    assert (opts.min_partitions, opts.max_messages_per_partition) == (16, 100_000)
    fails(
        "option minPartitions='10001' is invalid: expected a whole number in 1..10000",
        minPartitions="10001",
    )


def test_grouping_option() -> None:
    assert parse(minMessagesPerPartition="5000").min_messages_per_partition == 5000
    fails(
        "option minMessagesPerPartition groups queues by their message counts, "
        "allocateStrategy by a RocketMQ strategy",
        minMessagesPerPartition="5000",
        allocateStrategy="avg",
        numPartitions="2",
    )
    fails(
        "option maxMessagesPerPartition splits queue ranges, minMessagesPerPartition groups "
        "whole queues",
        minMessagesPerPartition="5000",
        maxMessagesPerPartition="100",
    )
    fails("option minMessagesPerPartition='0' is invalid", minMessagesPerPartition="0")


def test_pull_and_retry_options() -> None:
    opts = parse(pullBatchSize="32", pullTimeoutMs="2500", maxRetries="0", retryBackoffMs="0")
    assert (opts.pull_batch_size, opts.pull_timeout_ms) == (32, 2500)
    assert (opts.max_retries, opts.retry_backoff_ms) == (0, 0)
    fails(
        "option pullBatchSize='65537' is invalid: expected a whole number in 1..65536",
        pullBatchSize="65537",
    )
    fails("option pullTimeoutMs='1e3' is invalid", pullTimeoutMs="1e3")


def test_parsed_options_pickle_for_executors() -> None:
    opts = parse(
        topic=None,
        topicPattern="orders-.*",
        group="g",
        startingOffsets='{"orders-1": {"b": {"0": 5}}}',
        subExpression="TagA",
    )
    copy = pickle.loads(pickle.dumps(opts))
    assert copy == opts and copy.subscribes("orders-2")


def test_a_relative_store_path_is_made_absolute_where_the_query_is_planned(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    parsed = SourceOptions.parse({"storePath": "backups/store", "topic": "t"}, streaming=False)
    assert parsed.store_path == str(tmp_path / "backups" / "store")
