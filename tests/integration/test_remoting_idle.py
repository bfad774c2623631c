"""A remoting connection silent for the idle time is closed, as RocketMQ's broker closes
it, and the member it stood for leaves its group; one that keeps talking stays."""

from __future__ import annotations

import json
import socket

from rmq_spark.broker.remoting import service
from rmq_spark.wire.remoting.codes import RequestCode
from rmq_spark.wire.remoting.frame import Command, encode
from tests.support.broker_harness import start_in_process_broker
from tests.support.eventually import eventually


def _heartbeat(client_id: str) -> bytes:
    body = {
        "clientID": client_id,
        "consumerDataSet": [
            {"groupName": "idle-g", "messageModel": "CLUSTERING", "subscriptionDataSet": []}
        ],
        "producerDataSet": [],
    }
    return encode(Command(RequestCode.HEART_BEAT, {}, json.dumps(body).encode(), opaque=1))


def test_a_silent_connection_is_closed_and_its_member_leaves(tmp_path, monkeypatch):
    monkeypatch.setattr(service, "IDLE_S", 1.0)
    monkeypatch.setattr(service, "IDLE_CHECK_S", 0.2)
    local = start_in_process_broker(tmp_path, remoting_port=0)
    try:
        port = local.server.remoting_port
        silent = socket.create_connection(("127.0.0.1", port))
        talking = socket.create_connection(("127.0.0.1", port))
        silent.sendall(_heartbeat("silent@1"))
        talking.sendall(_heartbeat("talking@1"))
        registry = local.broker.consumers
        eventually(
            lambda: registry.members("idle-g") == ["silent@1", "talking@1"],
            what="both members to join",
        )
        silent.recv(65536)  # its heartbeat's answer

        def talk_and_look() -> bool:
            talking.sendall(_heartbeat("talking@1"))  # keeps it alive
            return registry.members("idle-g") == ["talking@1"]

        # a heartbeat every 0.3 s, well inside the 1 s idle time, until the silent one left
        eventually(talk_and_look, what="the silent member to leave", interval=0.3)
        silent.settimeout(2)
        assert silent.recv(65536) == b""  # closed by the broker
        assert registry.members("idle-g") == ["talking@1"]
        talking.sendall(_heartbeat("talking@1"))
        talking.settimeout(2)
        assert talking.recv(65536)  # still answered
        silent.close()
        talking.close()
    finally:
        local.stop()
