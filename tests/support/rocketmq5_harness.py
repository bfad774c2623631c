"""Helpers for tests that drive the official RocketMQ 5 Python client
(``rocketmq-python-client``) and raw ``apache.rocketmq.v2`` stubs against a real broker."""

from __future__ import annotations

import contextlib
import uuid

import grpc

# The official client is part of the pinned development environment (./dev installs the
# rocketmq5 extra), so these tests run everywhere the suite runs.
from rocketmq import ClientConfiguration, Credentials, Message
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol import service_pb2_grpc

from rmq_spark.broker.v2.codes import Code  # noqa: F401 (tests import it from here)


def config(endpoint: str) -> ClientConfiguration:
    return ClientConfiguration(endpoint, Credentials(), request_timeout=5)


def make_message(topic: str, body: bytes, *, tag=None, keys=(), group=None, props=None):
    """An official client's Message with these fields set."""
    message = Message()
    message.topic = topic
    message.body = body
    if tag:
        message.tag = tag
    for key in keys:  # the client's setter adds one key per assignment
        message.keys = key
    if group:
        message.message_group = group
    for name, value in (props or {}).items():
        message.add_property(name, value)
    return message


@contextlib.contextmanager
def running(client):
    """Start an official client; shut it down afterwards (also when the test fails)."""
    client.startup()
    try:
        yield client
    finally:
        with contextlib.suppress(Exception):
            client.shutdown()


class RawV2:
    """Direct calls of the v2 service, as any client may make them (for bad input)."""

    def __init__(self, endpoint: str) -> None:
        self.channel = grpc.insecure_channel(endpoint)
        self.stub = service_pb2_grpc.MessagingServiceStub(self.channel)
        self.client_id = f"raw-test@{uuid.uuid4().hex[:8]}"

    def metadata(self, client_id: str | None = None):
        return (("x-mq-client-id", self.client_id if client_id is None else client_id),)

    def route(self, topic: str, client_id: str | None = None):
        request = spb.QueryRouteRequest(topic=pb.Resource(name=topic))
        return self.stub.QueryRoute(request, metadata=self.metadata(client_id), timeout=5)

    def send(self, topic: str, body: bytes, **system):
        system.setdefault("message_id", uuid.uuid4().hex.upper())
        message = pb.Message(
            topic=pb.Resource(name=topic),
            body=body,
            system_properties=pb.SystemProperties(**system),
        )
        request = spb.SendMessageRequest(messages=[message])
        return self.stub.SendMessage(request, metadata=self.metadata(), timeout=5)

    def receive(self, group: str, topic: str, *, invisible_s: float = 10, wait_s: float = 1):
        request = spb.ReceiveMessageRequest(
            group=pb.Resource(name=group),
            message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=-1),
            filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
            batch_size=32,
        )
        request.invisible_duration.FromMilliseconds(int(invisible_s * 1000))
        request.long_polling_timeout.FromMilliseconds(int(wait_s * 1000))
        frames = list(
            self.stub.ReceiveMessage(request, metadata=self.metadata(), timeout=wait_s + 5)
        )
        status = next(f.status for f in frames if f.HasField("status"))
        return status, [f.message for f in frames if f.HasField("message")]

    def ack(self, group: str, topic: str, handle: str, message_id: str = "m"):
        request = spb.AckMessageRequest(
            group=pb.Resource(name=group),
            topic=pb.Resource(name=topic),
            entries=[spb.AckMessageEntry(message_id=message_id, receipt_handle=handle)],
        )
        return self.stub.AckMessage(request, metadata=self.metadata(), timeout=5)

    def change_invisible(self, group: str, topic: str, handle: str, seconds: float):
        request = spb.ChangeInvisibleDurationRequest(
            group=pb.Resource(name=group),
            topic=pb.Resource(name=topic),
            receipt_handle=handle,
            message_id="m",
        )
        request.invisible_duration.FromMilliseconds(int(seconds * 1000))
        return self.stub.ChangeInvisibleDuration(request, metadata=self.metadata(), timeout=5)

    def close(self) -> None:
        self.channel.close()
