"""The ``rocketlite`` command against a RocketMQ name server (``--namesrv``): topic list and
describe, send, consume with a group, and offsets, over the remoting protocol (here the
broker's own remoting port; the same calls an Apache RocketMQ name server answers)."""

from __future__ import annotations

import pytest

from tests.support.broker_harness import TEST_STORE_FLAGS, BrokerProcess
from tests.support.cli import Cli


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli-namesrv")
    flags = [*TEST_STORE_FLAGS, "--remoting-port", "0"]
    process = BrokerProcess("broker-a", root / "store", root / "broker.log", flags).start()
    yield process
    process.clean_up()


def test_topics_send_consume_and_offsets_through_a_name_server(broker):
    cli = Cli(broker.endpoint)
    ns = ["--namesrv", broker.remoting_address]
    cli.run("topic", "create", "NsOrders", "--queues", "2").ok()

    listed = cli.run("topic", "list", *ns).ok().table()
    assert {
        "topic": "NsOrders",
        "broker": "broker-a",
        "readQueues": "2",
        "writeQueues": "2",
    } in listed
    described = cli.run("topic", "describe", "NsOrders", *ns).ok().table()
    assert [(r["queueId"], r["address"]) for r in described] == [
        ("0", broker.remoting_address),
        ("1", broker.remoting_address),
    ]

    sent = cli.run("send", "NsOrders", "paid-1", "paid-2", "--tag", "Paid", "--queue", "1", *ns)
    assert [r["queueOffset"] for r in sent.ok().table()] == ["0", "1"]
    consumed = cli.run(
        "consume", "NsOrders", "--group", "ns-billing", "--max", "2", "--json", *ns
    ).ok()
    rows = consumed.json_lines()
    assert [(r["body"], r["tags"], r["queueId"]) for r in rows] == [
        ("paid-1", "Paid", 1),
        ("paid-2", "Paid", 1),
    ]
    offsets = cli.run("offsets", "ns-billing", "--topic", "NsOrders", *ns).ok().table()
    by_queue = {r["queueId"]: (r["committed"], r["lag"]) for r in offsets}
    assert by_queue["1"] == ("2", "0")  # committed past what was printed
    # the same offsets over gRPC: one offset table for both protocols
    grpc = cli.run("offsets", "ns-billing", "--topic", "NsOrders").ok().table()
    assert {r["queueId"]: r["committed"] for r in grpc}["1"] == "2"


def test_commands_a_name_server_cannot_serve_say_so(broker):
    cli = Cli(broker.endpoint)
    ns = ["--namesrv", broker.remoting_address]
    cli.run("topic", "delete", "NsOrders", *ns).failed("not available with --namesrv")
    cli.run("offsets", "ns-billing", *ns).failed("needs --topic")
    cli.run("user", "list", *ns).failed("does not take --namesrv", code=2, prefix="rocketlite")
