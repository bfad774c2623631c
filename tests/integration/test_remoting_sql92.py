"""SQL92 property filters on the remoting port of a broker process, as RocketMQ's clients
use them: pulls that carry their selector (rocketlite's RemotingClient, Java's lite pull
consumer), pulls that rely on the group's heartbeat (Java's push consumer), the check
Java's consumers make at start (CHECK_CLIENT_CONFIG), and a broker started with
``--no-property-filter``.

What is checked is what a client sees: exactly the matching messages with the next offsets
to pull from, a held pull that answers for a matching arrival only, and RocketMQ's response
codes with remarks that say what is wrong (1, 23, 27, 28). Hostile selectors get answers
and the broker keeps serving, with no traceback in its log.
"""

from __future__ import annotations

import json
import time

import pytest

from rmq_spark.client.remoting import RemotingClient
from rmq_spark.client.remoting.transport import RemotingError
from rmq_spark.codec.arrow_decode import decode_records
from rmq_spark.errors import FilterNotSupportedError
from rmq_spark.filter import compile_selector
from rmq_spark.structs import MessageQueue, PullStatus
from rmq_spark.wire.proto_gen.rocketlite.v1 import groups_pb2
from rmq_spark.wire.remoting.codes import (
    PULL_SUBSCRIPTION,
    PULL_SUSPEND,
    V4_1_0,
    RequestCode,
    ResponseCode,
)
from rmq_spark.wire.remoting.frame import Command, encode
from tests.support import sql92_messages as data
from tests.support.broker_harness import TEST_STORE_FLAGS, BrokerProcess
from tests.support.remoting_wire import Remoting, Wire

NAME = "broker-sql"
TOPIC = "SqlOrders"
REMOTING_FLAGS = ["--remoting-port", "0", "--auto-create-topics"]


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    root = tmp_path_factory.mktemp("sql92-broker")
    process = BrokerProcess(
        NAME, root / "store", root / "broker.log", [*TEST_STORE_FLAGS, *REMOTING_FLAGS]
    ).start()
    with RemotingClient(process.remoting_address) as client:
        client.route("TBW102")  # where topics are made on first send
        data.send_all(client, TOPIC, NAME)
    yield Remoting(process, process.remoting_address)
    process.stop()


@pytest.fixture(scope="module")
def client(broker):
    with RemotingClient(broker.address) as client:
        client.route(TOPIC)
        yield client


def expected(selector: str) -> list[str]:
    """The bodies of the messages ``selector`` picks, in send order."""
    compiled = compile_selector(selector)
    return [
        data.body(seq).decode()
        for seq in range(data.COUNT)
        if compiled.matches(data.properties(seq))
    ]


def bodies_of(payload) -> list[str]:
    return [b.decode() for b in decode_records(payload).column("body").to_pylist()]


def pull_all(client: RemotingClient, selector: str, batch: int) -> tuple[list[str], list[tuple]]:
    """Every message ``selector`` picks, pulled queue by queue ``batch`` at a time; and
    each answer as (queue, status, offsets returned, next offset)."""
    got: dict[int, str] = {}
    answers = []
    for queue in range(data.QUEUES):
        mq = MessageQueue(TOPIC, NAME, queue)
        offset = 0
        while True:
            answer = client.pull(
                mq, offset, max_messages=batch, expression=selector, expression_type="SQL92"
            )
            records = answer.records(["queueOffset", "body"])
            offsets = records.column("queueOffset").to_pylist()
            for body in records.column("body").to_pylist():
                seq = int(body.decode().split("-")[1])
                got[seq] = body.decode()
            answers.append((queue, answer.status, offsets, answer.next_begin_offset))
            if answer.status != PullStatus.FOUND:
                break
            offset = answer.next_begin_offset
    return [got[seq] for seq in sorted(got)], answers


# -- pulls that carry their selector ----------------------------------------------------------


@pytest.mark.parametrize("selector", data.SELECTORS)
def test_a_pull_returns_exactly_the_messages_its_selector_picks(client, selector):
    got, answers = pull_all(client, selector, batch=3)
    assert got == expected(selector)
    per_queue = data.COUNT // data.QUEUES
    for queue, status, offsets, next_offset in answers:
        if status == PullStatus.FOUND:
            assert offsets == sorted(offsets) and next_offset > offsets[-1]
            if len(offsets) == 3:  # cut short by the count: the next pull starts right after
                assert next_offset == offsets[-1] + 1, (queue, offsets, next_offset)
        else:  # the last answer of each queue: nothing after the queue's end
            assert status in (PullStatus.NO_NEW_MSG, PullStatus.NO_MATCHED_MSG)
            assert next_offset == per_queue, (queue, status, next_offset)


def test_the_selector_picks_by_value_as_rocketmq_does(client):
    """A few answers written out: a value a whole number cannot read fails the message
    (never delivered, even when OR's other side holds), a missing property is unknown."""

    def picked(selector: str) -> list[int]:
        return [int(body[2:]) for body in pull_all(client, selector, 32)[0]]

    # eu, but price abc (m-10, m-24) or 10.5 (m-4, m-30): failed before OR's right side
    assert picked("price = 9 OR region = 'eu'") == [0, 6, 12, 16, 18, 22, 28, 34, 36, 40, 42, 46]
    assert picked("region IS NULL AND seq < 20") == [3, 9, 15]
    assert picked("price BETWEEN 38 AND 39") == [13, 26]
    # flag missing: unknown; flag "true" is not FALSE
    assert picked("TAGS = 'TagC' AND flag = FALSE AND seq < 30") == [10, 22]


def test_a_pull_where_nothing_matched_answers_past_what_it_scanned(client):
    mq = MessageQueue(TOPIC, NAME, 1)
    answer = client.pull(mq, 0, expression="region = 'nowhere'", expression_type="SQL92")
    assert answer.status == PullStatus.NO_MATCHED_MSG  # PULL_RETRY_IMMEDIATELY (20)
    assert answer.next_begin_offset == data.COUNT // data.QUEUES
    assert answer.data == b""


def test_a_held_pull_answers_for_a_matching_arrival_only(broker, client):
    topic = "SqlHold"
    mq = MessageQueue(topic, NAME, 0)
    client.send(mq, [b"first"], [{"region": "us"}])
    with broker.wire() as wire:
        ext = {"consumerGroup": "g-hold", "topic": topic, "queueId": "0", "queueOffset": "1",
               "maxMsgNums": "32", "sysFlag": str(PULL_SUSPEND | PULL_SUBSCRIPTION),
               "suspendTimeoutMillis": "10000", "subscription": "region = 'eu'",
               "expressionType": "SQL92", "subVersion": "1"}  # fmt: skip
        wire.send_bytes(encode(Command(RequestCode.PULL_MESSAGE, ext, opaque=7)))
        time.sleep(1.0)  # the pull is held by now
        client.send(mq, [b"not-this"], [{"region": "us"}])  # a write it does not want
        with pytest.raises(TimeoutError):
            wire.response(7, timeout_s=1.5)
        sent = time.monotonic()
        client.send(mq, [b"this"], [{"region": "eu"}])
        answer = wire.response(7, timeout_s=10)
        assert time.monotonic() - sent < 5
    assert answer.code == ResponseCode.SUCCESS and bodies_of(answer.body) == ["this"]
    assert answer.ext["nextBeginOffset"] == "3"


# -- the push consumer's way: the group's heartbeat ------------------------------------------


def heartbeat(wire: Wire, group: str, subscriptions: list[dict], client_id: str = "c1@sql"):
    body = {
        "clientID": client_id,
        "producerDataSet": [],
        "consumerDataSet": [
            {
                "groupName": group,
                "consumeType": "CONSUME_PASSIVELY",
                "messageModel": "CLUSTERING",
                "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
                "subscriptionDataSet": subscriptions,
            }
        ],
    }
    return wire.call(RequestCode.HEART_BEAT, body=json.dumps(body).encode())


def sql(topic: str, expression: str, version: int) -> dict:
    """A SubscriptionData as Java's push consumer sends it for MessageSelector.bySql."""
    return {
        "topic": topic,
        "subString": expression,
        "expressionType": "SQL92",
        "subVersion": version,
        "tagsSet": [],
        "codeSet": [],
        "classFilterMode": False,
    }


def push_pull(wire: Wire, group: str, topic: str, queue: int, version: int, **more: str):
    """A pull as Java's push consumer sends it: no subscription, its type and version."""
    ext = {
        "consumerGroup": group,
        "topic": topic,
        "queueId": str(queue),
        "queueOffset": "0",
        "maxMsgNums": "32",
        "sysFlag": "2",
        "commitOffset": "0",
        "suspendTimeoutMillis": "0",
        "subVersion": str(version),
        "expressionType": "SQL92",
        **more,
    }
    return wire.call(RequestCode.PULL_MESSAGE, ext)


def test_pulls_without_a_selector_use_the_groups_heartbeat(broker):
    with broker.wire() as wire:
        answer = heartbeat(wire, "g-push", [sql(TOPIC, "region = 'eu'", 1000)])
        assert answer.code == ResponseCode.SUCCESS
        # Java's client sends no SQL92 pull to a broker older than 4.1.0 (version 232)
        assert answer.version >= V4_1_0
        got = []
        for queue in range(data.QUEUES):
            answer = push_pull(wire, "g-push", TOPIC, queue, 1000)
            assert answer.code in (ResponseCode.SUCCESS, ResponseCode.PULL_RETRY_IMMEDIATELY)
            got += bodies_of(answer.body) if answer.code == ResponseCode.SUCCESS else []
        assert sorted(got) == sorted(expected("region = 'eu'"))
        # a pull naming a newer subscription than the heartbeats gave: not latest (28)
        stale = push_pull(wire, "g-push", TOPIC, 0, 2000)
        assert stale.code == ResponseCode.FILTER_DATA_NOT_LATEST
        assert "version 1000" in stale.remark and "version 2000" in stale.remark
        # the next heartbeat brings it: the newer subscription filters from then on
        heartbeat(wire, "g-push", [sql(TOPIC, "region = 'ap'", 2000)])
        ap_in_queue_2 = [b for b in expected("region = 'ap'") if int(b[2:]) % data.QUEUES == 2]
        answer = push_pull(wire, "g-push", TOPIC, 2, 2000)
        assert answer.code == ResponseCode.SUCCESS and bodies_of(answer.body) == ap_in_queue_2
        # an older subscription (another member subscribed earlier) does not replace it
        heartbeat(wire, "g-push", [sql(TOPIC, "region = 'eu'", 1500)], "c2@sql")
        answer = push_pull(wire, "g-push", TOPIC, 2, 1500)
        assert answer.code == ResponseCode.SUCCESS and bodies_of(answer.body) == ap_in_queue_2


def test_a_heartbeat_selector_that_does_not_compile_fails_the_groups_pulls(broker):
    with broker.wire() as wire:
        answer = heartbeat(wire, "g-bad", [sql(TOPIC, "region = 'eu' AND", 7)])
        assert answer.code == ResponseCode.SUCCESS  # as RocketMQ: heartbeats always succeed
        refused = push_pull(wire, "g-bad", TOPIC, 0, 7)
        assert refused.code == ResponseCode.FILTER_DATA_NOT_EXIST  # 27
        assert "could not be compiled" in refused.remark
        assert "at column 18" in refused.remark and "the end of the selector" in refused.remark
        # a newer subscription that compiles replaces it
        heartbeat(wire, "g-bad", [sql(TOPIC, "region = 'us'", 8)])
        answer = push_pull(wire, "g-bad", TOPIC, 1, 8)
        assert answer.code == ResponseCode.SUCCESS
        assert bodies_of(answer.body) == [
            b for b in expected("region = 'us'") if int(b[2:]) % data.QUEUES == 1
        ]


def test_a_groups_retry_topic_is_not_filtered(broker, client):
    """Java's push consumer subscribes its group's %RETRY% topic by tag (*): messages sent
    back reach it whatever its SQL92 selector says (RocketMQ's filterSupportRetry=false)."""
    retry = "%RETRY%g-retry"
    with broker.wire() as wire:
        heartbeat(
            wire,
            "g-retry",
            [sql(TOPIC, "region = 'eu'", 5), {"topic": retry, "subString": "*", "subVersion": 5}],
        )
        client.route(retry)
        client.send(MessageQueue(retry, NAME, 0), [b"sent-back"], [{"region": "us"}])
        answer = push_pull(wire, "g-retry", retry, 0, 5, expressionType="TAG")
        assert answer.code == ResponseCode.SUCCESS and bodies_of(answer.body) == ["sent-back"]


def test_the_consumer_connection_list_shows_the_sql92_subscription(broker):
    with broker.wire() as wire:
        heartbeat(wire, "g-shown", [sql(TOPIC, "region IN ('eu')", 9)])
        answer = wire.call(RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "g-shown"})
        shown = json.loads(bytes(answer.body))["subscriptionTable"][TOPIC]
        assert shown["expressionType"] == "SQL92" and shown["subString"] == "region IN ('eu')"
        assert shown["tagsSet"] == []


# -- the group's filter: decided by the broker core from its live members ----------------------


def pulled_bodies(wire: Wire, group: str, version: int, **more: str) -> list[str]:
    """Every message a pull without its subscription gets from each queue."""
    got = []
    for queue in range(data.QUEUES):
        answer = push_pull(wire, group, TOPIC, queue, version, **more)
        assert answer.code in (ResponseCode.SUCCESS, ResponseCode.PULL_RETRY_IMMEDIATELY), (
            answer.code,
            answer.remark,
        )
        got += bodies_of(answer.body) if answer.code == ResponseCode.SUCCESS else []
    return sorted(got)


def test_a_rocketlite_v1_members_sql92_subscription_filters_remoting_pulls(broker, connect):
    """A member that subscribed over rocketlite.v1 with a SQL92 selector: a remoting pull of
    its group without a subscription (RocketMQ's push consumer's way) gets what the
    selector picks; its text is never read as tags (that answered
    PULL_RETRY_IMMEDIATELY past every message)."""
    stubs = connect(broker.process.endpoint)
    stubs.groups.Heartbeat(
        groups_pb2.HeartbeatRequest(
            client_id="10.0.0.9@v1",
            consumer_group="g-v1",
            subscriptions=[
                groups_pb2.Subscription(
                    topic=TOPIC, expression="region = 'eu'", expression_type="SQL92"
                )
            ],
            message_model=groups_pb2.MESSAGE_MODEL_CLUSTERING,
            consume_type=groups_pb2.CONSUME_TYPE_PUSH,
            consume_from_where=groups_pb2.CONSUME_FROM_WHERE_FIRST_OFFSET,
        ),
        timeout=5,
    )
    with broker.wire() as wire:
        # a Java client's subVersion is when it subscribed: before the v1 member's heartbeat
        assert pulled_bodies(wire, "g-v1", int(time.time() * 1000) - 60_000) == sorted(
            expected("region = 'eu'")
        )


def unregister(wire: Wire, group: str, client_id: str) -> None:
    ext = {"clientID": client_id, "consumerGroup": group, "producerGroup": ""}
    assert wire.call(RequestCode.UNREGISTER_CLIENT, ext).code == ResponseCode.SUCCESS


def test_a_departed_members_filter_goes_with_it(broker):
    """The member subscribed by SQL92 leaves: the remaining member's tag subscription
    filters the group's pulls, though its subVersion is lower, as the consumer connection
    list shows it; once the last member leaves the group has no filter at all."""
    everything = sorted(data.body(seq).decode() for seq in range(data.COUNT))
    star = {"topic": TOPIC, "subString": "*", "expressionType": "TAG", "subVersion": 1000}
    with broker.wire() as sql_member, broker.wire() as tag_member:
        heartbeat(sql_member, "g-left", [sql(TOPIC, "region = 'eu'", 2000)], "c-sql@left")
        heartbeat(tag_member, "g-left", [star], "c-tag@left")
        assert pulled_bodies(tag_member, "g-left", 1000) == sorted(expected("region = 'eu'"))
        unregister(sql_member, "g-left", "c-sql@left")
        assert pulled_bodies(tag_member, "g-left", 1000, expressionType="TAG") == everything
        answer = tag_member.call(
            RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "g-left"}
        )
        shown = json.loads(bytes(answer.body))["subscriptionTable"][TOPIC]
        assert (shown["expressionType"], shown["subString"]) == ("TAG", "*")
        unregister(tag_member, "g-left", "c-tag@left")
        gone = push_pull(tag_member, "g-left", TOPIC, 0, 1000)
        assert gone.code == ResponseCode.SUBSCRIPTION_NOT_EXIST
        # a member joining later with an older SQL92 subscription is the group's filter
        heartbeat(tag_member, "g-left", [sql(TOPIC, "region = 'us'", 500)], "c-late@left")
        assert pulled_bodies(tag_member, "g-left", 500) == sorted(expected("region = 'us'"))


def test_a_heartbeat_of_many_subscriptions_is_answered_at_once(broker):
    """A heartbeat's cost grows with its subscriptions, not with their square: 16,000 tag
    subscriptions (a 1.3 MB heartbeat; 9.2 s when the bookkeeping was quadratic, 0.35 s
    now) cost well under 64 times what 1,000 do, timed on the same broker one after the
    other (a ratio, so a loaded machine slows both alike). A heartbeat bringing more
    different SQL92 selectors than the broker compiles at once is refused naming the limit,
    and changes nothing."""

    def subscriptions(count: int) -> list[dict]:
        return [
            {
                "topic": f"ManyTopic{i:05d}",
                "subString": "TagA || TagB",
                "expressionType": "TAG",
                "subVersion": 1_700_000_000_000 + i,
                "tagsSet": ["TagA", "TagB"],
                "codeSet": [2598919, 2598920],
                "classFilterMode": False,
            }
            for i in range(count)
        ]

    mark = broker.log_mark()
    with broker.wire() as wire:
        took = {}
        for count in (1_000, 16_000):
            for _ in range(2):  # the second of each: the first fills the tag cache
                started = time.monotonic()
                answer = heartbeat(wire, f"g-many-{count}", subscriptions(count), "c-many@1")
                took[count] = time.monotonic() - started
                assert answer.code == ResponseCode.SUCCESS, answer.remark
        ratio = took[16_000] / max(took[1_000], 0.01)
        assert ratio < 64, f"16,000 subscriptions took {ratio:.0f}x what 1,000 did: {took}"
        selectors = [sql(f"ManyTopic{i:05d}", f"seq = {i}", 1) for i in range(33)]
        refused = heartbeat(wire, "g-many-16000", selectors, "c-many@2")
        assert refused.code == ResponseCode.INVALID_PARAMETER
        assert "33 different SQL92 selectors" in refused.remark
        assert "--max-heartbeat-selectors" in refused.remark
        members = wire.call(
            RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "g-many-16000"}
        )
        assert json.loads(bytes(members.body))["consumerIdList"] == ["c-many@1"]
    broker.assert_no_traceback_since(mark)


# -- the check at a Java consumer's start -------------------------------------------------------


def check_client(wire: Wire, subscription: dict | None, group: str = "g-check"):
    body = {"clientId": "c1@check", "group": group}
    if subscription is not None:
        body["subscriptionData"] = subscription
    return wire.call(RequestCode.CHECK_CLIENT_CONFIG, body=json.dumps(body).encode())


def test_check_client_config_answers_as_rocketmq(broker):
    with broker.wire() as wire:
        assert check_client(wire, sql(TOPIC, "region = 'eu'", 1)).code == ResponseCode.SUCCESS
        tag = {"topic": TOPIC, "subString": "TagA || TagB", "expressionType": "TAG"}
        assert check_client(wire, tag).code == ResponseCode.SUCCESS
        assert check_client(wire, None).code == ResponseCode.SUCCESS
        bad = check_client(wire, sql(TOPIC, "region == 'eu'", 1))
        assert bad.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED  # 23
        assert "at column 9" in bad.remark and "'='" in bad.remark
        trap = check_client(wire, sql(TOPIC, "a LIKE 'x%'", 1))  # RocketMQ reads it as `a`
        assert trap.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
        assert "'LIKE'" in trap.remark
        other = check_client(wire, {**sql(TOPIC, "x", 1), "expressionType": "CLASS"})
        assert other.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
        assert "not TAG or SQL92" in other.remark


# -- hostile selectors --------------------------------------------------------------------------


def test_hostile_selectors_get_answers_and_the_broker_keeps_serving(broker, client):
    mark = broker.log_mark()
    mq = MessageQueue(TOPIC, NAME, 0)
    cases = {
        # longer than a subscription may be: refused before it is parsed
        "(" * 10_000 + "a = 1" + ")" * 10_000: "--max-subscription-chars",
        "(" * 5_000 + "a = 1" + ")" * 5_000: "nests deeper than 64",
        "NOT " * 1_000 + "(a = 1)": "nests deeper than 64",
        " OR ".join(["a = 1"] * 2_000): "--max-subscription-chars",
        " OR ".join(["a = 1"] * 1_000): "more than 256",
        "a = '" + "x" * 100_000 + "'": "--max-subscription-chars",
        "": "empty",
    }
    for selector, reason in cases.items():
        with pytest.raises(RemotingError) as refused:
            client.pull(mq, 0, expression=selector, expression_type="SQL92")
        assert refused.value.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED, selector[:40]
        assert reason in str(refused.value), (selector[:40], str(refused.value))
        assert len(str(refused.value)) < 1000  # the selector is echoed in part only
    with broker.wire() as wire:
        nested = sql(TOPIC, "(" * 5_000 + "a = 1" + ")" * 5_000, 3)
        answer = check_client(wire, nested)
        assert answer.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
        assert heartbeat(wire, "g-hostile", [nested]).code == ResponseCode.SUCCESS
        assert push_pull(wire, "g-hostile", TOPIC, 0, 3).code == ResponseCode.FILTER_DATA_NOT_EXIST
        # a lone surrogate is not text: refused before any selector is read
        surrogate = b'{"clientId": "c", "group": "g", "subscriptionData": {"topic": "SqlOrders",'
        surrogate += b' "subString": "a = \'\\ud800\'", "expressionType": "SQL92"}}'
        answer = wire.call(RequestCode.CHECK_CLIENT_CONFIG, body=surrogate)
        assert answer.code == ResponseCode.INVALID_PARAMETER and "Unicode" in answer.remark
    answer = client.pull(mq, 0, expression="region = 'eu'", expression_type="SQL92")
    assert answer.status == PullStatus.FOUND
    broker.assert_no_traceback_since(mark)


# -- a broker that does not filter by properties ------------------------------------------------


def test_a_broker_without_property_filters_refuses_sql92_as_rocketmq(broker_factory):
    off = broker_factory(NAME, *REMOTING_FLAGS, "--no-property-filter")
    refusal = "The broker does not support consumer to filter message by SQL92"
    with RemotingClient(off.remoting_address) as client, Wire(off.remoting_address) as wire:
        client.route("TBW102")
        data.send_all(client, TOPIC, NAME)
        mq = MessageQueue(TOPIC, NAME, 0)
        with pytest.raises(FilterNotSupportedError, match=refusal):
            client.pull(mq, 0, expression="region = 'eu'", expression_type="SQL92")
        answer = check_client(wire, sql(TOPIC, "region = 'eu'", 1))
        assert answer.code == ResponseCode.SYSTEM_ERROR and answer.remark.startswith(refusal)
        assert "--no-property-filter" in answer.remark
        assert heartbeat(wire, "g-off", [sql(TOPIC, "region = 'eu'", 1)]).code == 0
        answer = push_pull(wire, "g-off", TOPIC, 0, 1)
        assert answer.code == ResponseCode.SYSTEM_ERROR and answer.remark.startswith(refusal)
        # tags still filter
        tagged = client.pull(mq, 0, expression="TagA")
        assert bodies_of(tagged.data) == [data.body(s).decode() for s in range(0, data.COUNT, 4)]
