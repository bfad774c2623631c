"""The web console's JSON API on a broker process (``--http-port``): what a user sees of
topics, groups (members of every protocol, lag per queue), messages and the broker; the
changes only super users may make; ACL; bad input answered 400 naming the value; the
security headers. The page itself in a real browser: ``test_web_console_browser.py``.
"""

from __future__ import annotations

import re
import time
import urllib.request

import grpc
import pytest
from rocketmq import FilterExpression, SimpleConsumer

from rmq_spark.client.groups import HeartbeatInfo, Subscription
from rmq_spark.wire.proto_gen.rocketlite.v1 import groups_pb2_grpc
from rmq_spark.wire.remoting.codes import RequestCode
from tests.support.console_broker import (
    BINARY_BODY,
    MARKUP_BODY,
    api,
    http_base,
    seed,
    start_console_broker,
)
from tests.support.eventually import eventually
from tests.support.remoting_member import RemotingMember
from tests.support.remoting_wire import offset_table
from tests.support.rocketmq5_harness import config, running

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def open_broker(tmp_path_factory):
    broker = start_console_broker(tmp_path_factory.mktemp("console"), acl=False)
    seeded = seed(broker)
    # one member over the remoting protocol, one over rocketlite.v1
    member = RemotingMember(broker.remoting_address, "billing", "remoting-member", broker.name)
    member.heartbeat("orders")
    with grpc.insecure_channel(broker.endpoint) as channel:
        info = HeartbeatInfo("v1-member", "billing", (Subscription("orders", "paid"),))
        groups_pb2_grpc.GroupServiceStub(channel).Heartbeat(info.to_pb(), timeout=10)
    # and a RocketMQ 5 simple consumer (its settings come over Telemetry)
    simple = SimpleConsumer(
        config(broker.endpoint), "billing", {"orders": FilterExpression("paid || created")}
    )
    with running(simple):
        eventually(
            lambda: api(http_base(broker), "/api/status")[2]["members"] == 3,
            what="the RocketMQ 5 consumer's settings",
        )
        yield broker, http_base(broker), seeded
    member.close()
    broker.clean_up()


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory):
    broker = start_console_broker(tmp_path_factory.mktemp("console-acl"), acl=True)
    seeded = seed(broker, user="root")
    yield broker, http_base(broker), seeded
    broker.clean_up()


def ok(answer):
    status, _, value = answer
    assert status == 200, value
    return value


# -- what everyone sees --------------------------------------------------------------------


def test_topics_show_their_queues_offsets_and_counts(open_broker):
    _broker, base, seeded = open_broker
    topics = {t["topic"]: t for t in ok(api(base, "/api/topics"))["topics"]}
    orders = topics["orders"]
    assert (orders["read_queues"], orders["write_queues"], orders["system"]) == (4, 4, False)
    assert [q["queue"] for q in orders["queues"]] == [0, 1, 2, 3]
    assert orders["messages"] == seeded.sent["orders"] == orders["in_total"]
    assert {q["queue"]: q["max"] for q in orders["queues"]} == seeded.max_offsets
    assert all(q["min"] == 0 for q in orders["queues"])
    assert topics["audit"]["messages"] == 1
    assert orders["in_per_s"] >= 0
    assert topics["SCHEDULE_TOPIC_XXXX"]["system"] is True
    # the queues of some topics only (the page asks for those shown open)
    some = {t["topic"]: t for t in ok(api(base, "/api/topics?queues=audit"))["topics"]}
    assert [q["queue"] for q in some["audit"]["queues"]] == [0, 1]
    assert some["orders"]["queues"] is None
    assert some["orders"]["messages"] == orders["messages"]
    assert all(t["queues"] is None for t in ok(api(base, "/api/topics?queues="))["topics"])


def test_groups_show_members_of_every_protocol_and_lag_per_queue(open_broker):
    _broker, base, seeded = open_broker
    groups = {g["group"]: g for g in ok(api(base, "/api/groups"))["groups"]}
    billing = groups["billing"]
    members = {m["client_id"]: m for m in billing["members"]}
    (rocketmq5,) = set(members) - {"remoting-member", "v1-member"}
    assert {"remoting-member", "v1-member"} < set(members)
    assert members["v1-member"]["subscriptions"] == [
        {"topic": "orders", "expression": "paid", "type": "TAG"}
    ]
    assert members["remoting-member"]["subscriptions"][0]["topic"] == "orders"
    assert members[rocketmq5]["protocol"] == "RocketMQ 5"
    assert members[rocketmq5]["consume_type"] == "SIMPLE_CONSUMER"
    assert members[rocketmq5]["subscriptions"] == [
        {"topic": "orders", "expression": "paid || created", "type": "TAG"}
    ]
    rows = {q["queue"]: q for q in billing["queues"] if q["topic"] == "orders"}
    assert {q: r["committed"] for q, r in rows.items()} == seeded.committed
    for queue_id, row in rows.items():
        assert row["max"] == seeded.max_offsets[queue_id]
        assert row["lag"] == row["max"] - row["committed"] == row["inflight"] + row["ready"]
        assert (row["lag_ms"] > 0) == (row["lag"] > 0)
    assert billing["lag"] == seeded.lag > 0
    assert groups["auditors"]["members"] == []
    assert groups["auditors"]["lag"] == 0


def test_a_message_is_found_by_offset_id_by_key_and_by_queue_offset(open_broker):
    _broker, base, seeded = open_broker
    by_id = ok(api(base, f"/api/message?id={seeded.ids['order-7']}"))["messages"]
    by_key = ok(api(base, "/api/message?topic=orders&key=order-7"))["messages"]
    queue, offset = seeded.positions["order-7"]
    at = ok(api(base, f"/api/message?topic=orders&queue={queue}&offset={offset}"))["messages"]
    assert by_id == by_key == at
    (message,) = by_id
    assert message["msg_id"] == seeded.ids["order-7"]
    assert (message["topic"], message["queue"], message["queue_offset"]) == (
        "orders",
        queue,
        offset,
    )
    assert (message["keys"], message["tags"]) == ("order-7", "paid")
    assert message["properties"]["KEYS"] == "order-7"
    assert message["body"] == {
        "size": len('{"order": 7, "status": "paid"}'),
        "shown": len('{"order": 7, "status": "paid"}'),
        "kind": "text",
        "text": '{"order": 7, "status": "paid"}',
    }
    # nothing there: an empty answer, not an error
    empty = ok(api(base, f"/api/message?topic=orders&queue={queue}&offset=99999"))
    assert empty == {"messages": [], "more": False}
    assert ok(api(base, "/api/message?topic=orders&key=no-such-key"))["messages"] == []


def test_a_binary_body_is_shown_as_hex_and_text_as_text(open_broker):
    _broker, base, _seeded = open_broker
    (binary,) = ok(api(base, "/api/message?topic=orders&key=binary"))["messages"]
    assert binary["body"]["kind"] == "binary"
    assert binary["body"]["text"].startswith("00000000  00 01 fe ff 3c 73 63 72")
    assert "<script>" not in binary["body"]["text"].split("  ")[1]  # the hex column
    assert binary["body"]["size"] == len(BINARY_BODY)
    (markup,) = ok(api(base, "/api/message?topic=orders&key=markup"))["messages"]
    # text is text: the page puts it in as a text node (the browser test checks that)
    assert markup["body"]["kind"] == "text"
    assert markup["body"]["text"] == MARKUP_BODY.decode()


def test_status_shows_readiness_disk_flush_and_connections(open_broker):
    broker, base, _ = open_broker
    status = ok(api(base, "/api/status"))
    assert status["ready"] is True and status["reason"] == "ready"
    assert 0 < status["disk"]["free_bytes"] <= status["disk"]["total_bytes"]
    assert status["commitlog_bytes"] > 0
    assert status["flush"]["mode"] == "ASYNC" and status["flush"]["behind_bytes"] >= 0
    assert status["connections"]["remoting"] >= 1  # the remoting member's
    assert status["members"] == 3
    assert status["in_per_s"] >= 0 and status["out_per_s"] >= 0
    session = ok(api(base, "/api/session"))
    assert session == {
        "broker": broker.name,
        "version": session["version"],
        "acl": False,
        "user": None,
        "admin": True,
    }


def test_rates_are_points_of_in_and_out_per_second(open_broker):
    _, base, _ = open_broker
    rates = ok(api(base, "/api/rates?minutes=5"))
    assert rates["step_s"] == 10.0
    now = time.time()
    for at, rate_in, rate_out in rates["points"]:
        assert now - 400 < at <= now and rate_in >= 0 and rate_out >= 0


# -- changes -----------------------------------------------------------------------------


def test_a_reset_tells_the_groups_running_remoting_members(open_broker):
    """A running remoting consumer is sent RESET_CONSUMER_CLIENT_OFFSET with the new
    offsets, as after mqadmin's reset, so it does not commit its old position over them."""
    broker, base, _seeded = open_broker
    member = RemotingMember(broker.remoting_address, "resetters", "reset-member", broker.name)
    try:
        member.heartbeat("orders")
        body = {"group": "resetters", "topic": "orders", "to": "earliest"}
        answer = ok(api(base, "/api/groups/reset", body=body))
        assert answer["members_told"] == 1
        told = member.wait_request(RequestCode.RESET_CONSUMER_CLIENT_OFFSET, timeout_s=10)
        assert told is not None and told.is_oneway
        assert (told.ext["group"], told.ext["topic"]) == ("resetters", "orders")
        assert told.ext["isForce"] == "true"
        assert offset_table(told.body) == {int(q): o for q, o in answer["offsets"].items()}
    finally:
        member.close()


def test_an_admin_creates_a_topic_and_resets_a_groups_offsets(open_broker):
    _broker, base, _seeded = open_broker
    created = ok(api(base, "/api/topics", body={"topic": "made-here", "queues": 3}))
    assert created == {"topic": "made-here", "queues": 3}
    topics = {t["topic"]: t for t in ok(api(base, "/api/topics"))["topics"]}
    assert len(topics["made-here"]["queues"]) == 3

    ends = {str(q["queue"]): q["max"] for q in topics["audit"]["queues"]}
    assert sorted(ends.values()) == [0, 1]  # the one audit message
    reset = {"group": "auditors", "topic": "audit"}
    latest = ok(api(base, "/api/groups/reset", body={**reset, "to": "latest"}))
    assert latest["offsets"] == ends
    earliest = ok(api(base, "/api/groups/reset", body={**reset, "to": "earliest"}))
    assert earliest["offsets"] == {"0": 0, "1": 0}
    future = int(time.time() * 1000) + 3_600_000
    later = ok(api(base, "/api/groups/reset", body={**reset, "to": "time", "timestamp_ms": future}))
    assert later["offsets"] == ends  # nothing stored after it: the max
    past = ok(api(base, "/api/groups/reset", body={**reset, "to": "time", "timestamp_ms": 0}))
    assert past["offsets"] == {"0": 0, "1": 0}
    groups = {g["group"]: g for g in ok(api(base, "/api/groups"))["groups"]}
    committed = {str(q["queue"]): q["committed"] for q in groups["auditors"]["queues"]}
    assert committed == {"0": 0, "1": 0}


def test_a_post_must_be_json_and_carry_the_consoles_header(open_broker):
    _, base, _ = open_broker
    form = api(base, "/api/topics", body=b"topic=x", headers={"Content-Type": "text/plain"})
    assert form[0] == 400 and "application/json" in form[2]["error"]
    headerless = urllib.request.Request(
        base + "/api/topics", data=b'{"topic": "x"}', headers={"Content-Type": "application/json"}
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(headerless, timeout=10)
    assert refused.value.code == 400
    assert "x-rocketlite-console" in refused.value.read().decode()
    topics = {t["topic"] for t in ok(api(base, "/api/topics"))["topics"]}
    assert "x" not in topics
    assert api(base, "/api/status", body={})[0] == 405


@pytest.mark.parametrize(
    ("path", "body", "named"),
    [
        ("/api/message?topic=orders&queue=x&offset=1", None, "queue must be an integer, not 'x'"),
        ("/api/message?topic=orders&queue=1&offset=-5", None, "offset must be between"),
        ("/api/message?topic=orders&queue=70000&offset=0", None, "queue must be between 0"),
        ("/api/message?id=not-hex", None, "'not-hex' is not an offset message id"),
        ("/api/message?topic=bad%20topic&key=k", None, "'bad topic'"),
        ("/api/message?topic=orders", None, "give key, or queue and offset"),
        ("/api/message", None, "give id"),
        ("/api/rates?minutes=0", None, "minutes must be between 1 and 60, not 0"),
        ("/api/rates?minutes=soon", None, "minutes must be an integer, not 'soon'"),
        ("/api/topics", b"{not json", "not JSON"),
        ("/api/topics", [1, 2], "must be a JSON object, not list"),
        ("/api/topics", {"topic": ""}, "topic must be a non-empty string"),
        ("/api/topics", {"topic": "t<script>"}, "'t<script>'"),
        ("/api/topics", {"topic": "ok-name", "queues": "many"}, "queues must be an integer"),
        ("/api/topics", {"topic": "ok-name", "queues": 0}, "queues must be between 1 and 1024"),
        ("/api/groups/reset", {"group": "g", "topic": "audit", "to": "soon"}, "'soon'"),
        ("/api/groups/reset", {"group": "g", "topic": "audit", "to": "time"}, "timestamp_ms"),
        ("/api/groups/reset", {"topic": "audit", "to": "latest"}, "group must be"),
    ],
)
def test_bad_input_is_answered_400_naming_the_value(open_broker, path, body, named):
    _, base, _ = open_broker
    status, headers, value = api(base, path, body=body)
    assert status == 400, value
    assert headers["content-type"] == "application/json"
    assert named in value["error"]
    assert "Traceback" not in value["error"]


def test_unknown_things_are_404_not_errors(open_broker):
    _, base, _ = open_broker
    assert api(base, "/api/nothing")[0] == 404
    assert api(base, "/nothing.js")[0] == 404
    missing = api(base, "/api/groups/reset", body={"group": "g", "topic": "nope", "to": "latest"})
    assert missing[0] == 404 and "nope" in missing[2]["error"]
    earliest = {"group": "g", "topic": "nope", "to": "earliest"}
    missing = api(base, "/api/groups/reset", body=earliest)
    assert missing[0] == 404 and "'nope' does not exist" in missing[2]["error"]


def test_the_page_has_no_inline_script_and_strict_headers(open_broker):
    _, base, _ = open_broker
    for path in ("/", "/console.js", "/console.css", "/api/status"):
        status, headers, _body = api(base, path)
        assert status == 200, path
        policy = headers["content-security-policy"]
        assert "script-src 'self'" in policy and "unsafe-inline" not in policy, path
        assert "frame-ancestors 'none'" in policy
        assert headers["x-frame-options"] == "DENY"
        assert headers["x-content-type-options"] == "nosniff"
        assert headers["referrer-policy"] == "no-referrer"
    _, headers, page = api(base, "/")
    assert headers["content-type"].startswith("text/html")
    scripts = re.findall(r"<script\b[^>]*>", page)
    assert scripts == ['<script src="/console.js" defer>']
    assert " on" not in "".join(re.findall(r"<[^>]+>", page)).replace(" one", "")
    _, _, code = api(base, "/console.js")
    assert "innerHTML" not in code and "eval(" not in code and "insertAdjacentHTML" not in code


# -- ACL -----------------------------------------------------------------------------------


def test_with_acl_the_page_is_public_and_the_api_asks_for_keys(acl_broker):
    _, base, _ = acl_broker
    assert api(base, "/")[0] == 200
    status, headers, _ = api(base, "/api/session")
    assert status == 401 and "www-authenticate" not in headers  # no browser dialog
    bare = urllib.request.Request(base + "/api/session")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(bare, timeout=10)
    assert refused.value.code == 401 and "Basic" in refused.value.headers["www-authenticate"]
    assert api(base, "/api/session", "alice", secret="wrong")[0] == 401
    assert ok(api(base, "/api/session", "alice"))["admin"] is False
    root = ok(api(base, "/api/session", "root"))
    assert (root["user"], root["admin"], root["acl"]) == ("root", True, True)


def test_a_user_sees_only_what_its_policies_grant(acl_broker):
    _, base, seeded = acl_broker
    topics = {t["topic"] for t in ok(api(base, "/api/topics", "alice"))["topics"]}
    assert topics == {"orders"}
    assert {"orders", "audit"} <= {
        t["topic"] for t in ok(api(base, "/api/topics", "root"))["topics"]
    }
    groups = ok(api(base, "/api/groups", "alice"))["groups"]
    assert [g["group"] for g in groups] == ["billing"]
    assert groups[0]["lag"] == seeded.lag
    assert ok(api(base, "/api/topics", "bob"))["topics"] == []
    assert ok(api(base, "/api/groups", "bob"))["groups"] == []
    assert "in_per_s" not in ok(api(base, "/api/status", "alice"))  # broker-wide rates
    # messages of a topic the user may not see
    refused = api(base, "/api/message?topic=audit&key=audit-1", "alice")
    assert refused[0] == 403 and "alice" in refused[2]["error"]
    by_id = ok(api(base, f"/api/message?id={seeded.ids['audit-1']}", "alice"))
    assert by_id["messages"] == []  # as if there were none
    assert len(ok(api(base, f"/api/message?id={seeded.ids['audit-1']}", "root"))["messages"]) == 1
    assert len(ok(api(base, "/api/message?topic=orders&key=order-3", "alice"))["messages"]) == 1


def test_only_super_users_change_anything(acl_broker):
    _, base, _ = acl_broker
    for user in ("alice", "bob"):
        status, _, value = api(base, "/api/topics", user, body={"topic": "by-" + user})
        assert status == 403 and "only super users" in value["error"], value
        reset = {"group": "billing", "topic": "orders", "to": "earliest"}
        status, _, value = api(base, "/api/groups/reset", user, body=reset)
        assert status == 403, value
    assert "by-alice" not in {t["topic"] for t in ok(api(base, "/api/topics", "root"))["topics"]}
    assert ok(api(base, "/api/topics", "root", body={"topic": "by-root"}))["topic"] == "by-root"


def test_the_lag_shown_is_the_lag_metrics_export(open_broker):
    from prometheus_client.parser import text_string_to_metric_families

    _, base, _ = open_broker
    groups = ok(api(base, "/api/groups"))["groups"]
    shown = {
        (g["group"], q["topic"], str(q["queue"])): (q["lag"], q["inflight"], q["ready"])
        for g in groups
        for q in g["queues"]
    }
    with urllib.request.urlopen(base + "/metrics", timeout=10) as response:
        text = response.read().decode()
    exported: dict[tuple[str, str, str], list[float]] = {}
    names = ["rocketmq_consumer_lag_messages", "rocketmq_consumer_inflight_messages"]
    names.append("rocketmq_consumer_ready_messages")
    for family in text_string_to_metric_families(text):
        if family.name in names:
            for sample in family.samples:
                key = (sample.labels["consumer_group"], sample.labels["topic"])
                row = exported.setdefault((*key, sample.labels["queue_id"]), [0, 0, 0])
                row[names.index(family.name)] = int(sample.value)
    assert {k: tuple(v) for k, v in exported.items()} == shown
