"""Access control end to end: a broker process started with ``--acl FILE``.

Every RPC of both protocols (enumerated from the permission table) is called with no
credentials, a wrong secret, an expired timestamp, a user without the permission and a
user with it: only the last gets past the auth check. Then the official RocketMQ 5 client
with Credentials, rocketlite's own clients with keys, and a reload of the file.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import time
from datetime import UTC, datetime, timedelta

import grpc
import pytest
from google.protobuf.descriptor import FieldDescriptor

from rmq_spark.auth import signature
from rmq_spark.auth.interceptor import REFUSED_PREFIX, V2_FORBIDDEN, V2_UNAUTHORIZED
from rmq_spark.auth.permissions import RULES, served_methods
from rmq_spark.client import Admin, ClientConfig, Producer, PullConsumer
from rmq_spark.client.consumer import ConsumerConfig
from rmq_spark.client.producer import ProducerConfig
from rmq_spark.errors import PermissionDeniedError, UnauthenticatedError
from rmq_spark.structs import MessageQueue
from rmq_spark.wire.proto_gen.rocketlite.v1 import messaging_pb2, messaging_pb2_grpc
from tests.support.broker_harness import TEST_STORE_FLAGS, BrokerProcess
from tests.support.eventually import eventually

TOPIC = "acl-t"
GROUP = "acl-g"
CLIENT = "acl-client-1"
#: what the broker logs when it refuses a changed ACL file
STAYS_IN_FORCE = "the previous ACL stays in force"
SECRETS = {"root": "root-secret", "good": "good-secret", "weak": "weak-secret", "late": "late-s"}


def acl_data(late_entries=()):
    return {
        "users": [
            {"username": "root", "password": SECRETS["root"], "userType": "Super"},
            {"username": "good", "password": SECRETS["good"]},
            {"username": "weak", "password": SECRETS["weak"]},
            {"username": "late", "password": SECRETS["late"]},
        ],
        "acls": [
            {
                "subject": "User:good",
                "policies": [
                    {
                        "entries": [
                            {"resource": [f"Topic:{TOPIC}", f"Group:{GROUP}"], "actions": ["All"]},
                            {"resource": "Topic:*", "actions": ["List"]},
                        ]
                    }
                ],
            },
            {"subject": "User:weak", "policies": [{"entries": [
                {"resource": "Topic:other", "actions": ["All"]}]}]},
            {"subject": "User:late", "policies": [{"entries": list(late_entries)}]},
        ],
    }  # fmt: skip


def write_acl(path, data) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def keys(user: str) -> dict:
    return {"access_key": user, "secret_key": SECRETS[user]}


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    root = tmp_path_factory.mktemp("acl")
    acl = root / "acl.json"
    write_acl(acl, acl_data())
    process = BrokerProcess(
        "broker-acl", root / "store", root / "broker.log", [*TEST_STORE_FLAGS, "--acl", str(acl)]
    )
    process.start()
    process.acl_path = acl
    with Admin(process.endpoint, ClientConfig(**keys("root"))) as admin:
        admin.create_topic(TOPIC, queues=2)
    yield process
    process.clean_up()


# -- every RPC, five callers ------------------------------------------------------------


def request_class(method: str):
    from google.protobuf import descriptor_pool, message_factory

    service, name = method.strip("/").split("/")
    desc = descriptor_pool.Default().FindServiceByName(service).FindMethodByName(name)
    return desc, message_factory.GetMessageClass(desc.input_type)


def fill(message, hint: str = "", depth: int = 0) -> None:
    """Names the permission table reads: topics, groups, client ids, Resource names."""
    for field in message.DESCRIPTOR.fields:
        if field.type == FieldDescriptor.TYPE_STRING and not field.is_repeated:
            value = {
                "topic": TOPIC,
                "original_topic": TOPIC,
                "consumer_group": GROUP,
                "client_id": CLIENT,
                "name": {"topic": TOPIC, "group": GROUP}.get(hint, TOPIC),
            }.get(field.name)
            if value is not None:
                setattr(message, field.name, value)
        elif field.type == FieldDescriptor.TYPE_MESSAGE and depth < 4:
            if field.message_type.full_name.startswith("google.protobuf"):
                continue
            oneof = field.containing_oneof
            if oneof is not None and len(oneof.fields) > 1:  # a real oneof, not `optional`
                continue
            if field.is_repeated:
                if field.message_type.GetOptions().map_entry:
                    continue
                fill(getattr(message, field.name).add(), field.name, depth + 1)
            else:
                fill(getattr(message, field.name), field.name, depth + 1)


def sample(method: str):
    desc, cls = request_class(method)
    request = cls()
    fill(request)
    if method.endswith("/Telemetry"):
        from rocketmq.grpc_protocol import definition_pb2 as pb

        request.settings.publishing.topics.add(name=TOPIC)
        request.settings.client_type = pb.PRODUCER
    if method.endswith("/PullMessages"):
        request.suspend_timeout_ms = 0
    return desc, request


def signed(user: str | None, secret: str | None = None, when=None):
    if user is None:
        return []
    return signature.signed_metadata(user, secret or SECRETS[user], when)


_CALLS = itertools.count()


def call(channel, method: str, metadata):
    """('refused-authn' | 'refused-authz' | 'passed', detail) for one call."""
    desc, request = sample(method)
    v2 = method.startswith("/apache.rocketmq.v2.")
    # a client id of its own per call: ids are owned by the first user who uses them
    metadata = [*metadata, ("x-mq-client-id", f"client-{next(_CALLS)}")]
    ser = type(request).SerializeToString
    from google.protobuf import message_factory

    out = message_factory.GetMessageClass(desc.output_type)
    kind = (desc.client_streaming, desc.server_streaming)
    try:
        if kind == (False, False):
            answer = channel.unary_unary(method, ser, out.FromString)(
                request, metadata=metadata, timeout=5
            )
        elif kind == (False, True):
            stream = channel.unary_stream(method, ser, out.FromString)(
                request, metadata=metadata, timeout=3
            )
            answer = next(stream, None)
            stream.cancel()
        else:
            stream = channel.stream_stream(method, ser, out.FromString)(
                iter([request]), metadata=metadata, timeout=3
            )
            answer = next(stream, None)
            stream.cancel()
    except grpc.RpcError as exc:
        details = exc.details() or ""
        if details.startswith(REFUSED_PREFIX):
            if exc.code() == grpc.StatusCode.UNAUTHENTICATED:
                return "refused-authn", details
            assert exc.code() == grpc.StatusCode.PERMISSION_DENIED, (exc.code(), details)
            return "refused-authz", details
        return "passed", f"{exc.code()}: {details}"
    if v2 and answer is not None and answer.HasField("status"):
        code = answer.status.code
        if code == V2_UNAUTHORIZED:
            return "refused-authn", answer.status.message
        if code == V2_FORBIDDEN and answer.status.message.startswith(REFUSED_PREFIX):
            return "refused-authz", answer.status.message
        return "passed", f"status {code}: {answer.status.message}"
    return "passed", "ok"


def test_every_rpc_with_every_kind_of_caller(broker):
    methods = served_methods()
    assert set(methods) == set(RULES)
    old = datetime.now(UTC) - timedelta(hours=3)
    problems = []
    with grpc.insecure_channel(broker.endpoint) as channel:
        for method in methods:
            rule = RULES[method]
            permitted = "root" if rule.super_only else "good"
            cases = [
                ("no credentials", [], "refused-authn"),
                ("wrong secret", signed("good", "not-the-secret"), "refused-authn"),
                ("expired", signed(permitted, when=old), "refused-authn"),
            ]
            if rule.super_only or rule.needs is not None or rule.message_needs is not None:
                cases.append(("without permission", signed("weak"), "refused-authz"))
            cases.append(("with permission", signed(permitted), "passed"))
            for label, metadata, expected in cases:
                outcome, detail = call(channel, method, metadata)
                if outcome != expected:
                    problems.append(f"{method} {label}: {outcome} ({detail})")
    # DeleteTopic passed too: put the topic back for the next tests
    with Admin(broker.endpoint, ClientConfig(**keys("root"))) as admin:
        if TOPIC not in admin.list_topics():
            admin.create_topic(TOPIC, queues=2)
    assert not problems, "\n".join(problems)


# -- clients ------------------------------------------------------------------------------


def test_rocketlite_clients_with_keys(broker):
    with Producer(broker.endpoint, config=ProducerConfig(**keys("good"))) as producer:
        sent = producer.send(TOPIC, b"signed hello")
    config = ConsumerConfig(**keys("good"))
    with PullConsumer(broker.endpoint, group=GROUP, config=config) as consumer:
        mq = MessageQueue(TOPIC, sent.message_queue.broker_name, sent.message_queue.queue_id)
        consumer.assign([mq])
        consumer.seek(mq, 0)
        result = consumer.pull(mq, max_messages=64)
        assert b"signed hello" in [row["body"] for row in result.batch.to_pylist()]
        consumer.commit()
    anonymous = ProducerConfig(access_key=None, secret_key=None)
    with pytest.raises(UnauthenticatedError), Producer(broker.endpoint, config=anonymous) as p:
        p.send(TOPIC, b"anonymous")
    weak = ProducerConfig(**keys("weak"))
    with pytest.raises(PermissionDeniedError, match="access control"):  # noqa: SIM117
        with Producer(broker.endpoint, config=weak) as p:
            p.send(TOPIC, b"not allowed")
    assert "weak-secret" not in repr(ProducerConfig(**keys("weak")))


def test_finding_messages_by_key_needs_a_right_on_the_topic(broker):
    with Producer(broker.endpoint, config=ProducerConfig(**keys("good"))) as producer:
        sent = producer.send(TOPIC, b"keyed", keys="acl-key")
    with Admin(broker.endpoint, ClientConfig(**keys("good"))) as admin:
        eventually(lambda: admin.query_messages(TOPIC, "acl-key"), what="the key in the index")
        [(batch, _)] = admin.query_messages(TOPIC, sent.msg_id)
        assert batch.column("body").to_pylist() == [b"keyed"]
    with grpc.insecure_channel(broker.endpoint) as channel:
        stub = messaging_pb2_grpc.MessagingServiceStub(channel)
        request = messaging_pb2.QueryMessagesByKeyRequest(topic=TOPIC, key="acl-key")
        with pytest.raises(grpc.RpcError) as refused:
            stub.QueryMessagesByKey(request, metadata=signed("weak"), timeout=5)
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert refused.value.details().startswith(REFUSED_PREFIX) and TOPIC in refused.value.details()


def test_official_client_with_credentials(broker, caplog):
    from rocketmq import ClientConfiguration, Credentials, FilterExpression, SimpleConsumer
    from rocketmq import Producer as OfficialProducer

    from tests.support.rocketmq5_harness import make_message, running

    def conf(user):
        return ClientConfiguration(
            broker.endpoint, Credentials(user, SECRETS[user]), request_timeout=5
        )

    with running(OfficialProducer(conf("good"), (TOPIC,))) as producer:
        receipt = producer.send(make_message(TOPIC, b"from the official client"))
        assert receipt.message_id
    consumer = SimpleConsumer(conf("good"), GROUP, {TOPIC: FilterExpression("*")}, await_duration=2)
    with running(consumer):
        got = []
        deadline = time.monotonic() + 20
        while b"from the official client" not in got and time.monotonic() < deadline:
            for message in consumer.receive(16, 15):
                got.append(message.body)
                consumer.ack(message)
    assert b"from the official client" in got
    # its route query is refused (FORBIDDEN, logged by the client), so the send fails
    with (
        caplog.at_level(logging.ERROR),
        pytest.raises(Exception, match="failed to fetch topic:acl-t route"),
        running(OfficialProducer(conf("weak"), (TOPIC,))) as producer,
    ):
        producer.send(make_message(TOPIC, b"refused"))
    assert (
        "40300, access control: user weak: no policy grants Pub|Sub on Topic:acl-t" in caplog.text
    )


def test_reload_grants_within_two_seconds(broker):
    config = ProducerConfig(**keys("late"))
    with Producer(broker.endpoint, config=config) as producer:
        with pytest.raises(PermissionDeniedError):
            producer.send(TOPIC, b"too early")
        grant = [{"resource": f"Topic:{TOPIC}", "actions": ["Pub"], "decision": "Allow"}]
        write_acl(broker.acl_path, acl_data(grant))

        def send_granted() -> bool:
            try:
                producer.send(TOPIC, b"granted")
            except PermissionDeniedError as refused:
                raise AssertionError(f"still refused: {refused}") from refused
            return True

        # the broker looks at the file every second
        eventually(send_granted, what="the new ACL to be applied", timeout=3, interval=0.1)
    # a broken file keeps the ACL in force: wait for the reload thread to refuse it
    refusals = broker.log_text().count(STAYS_IN_FORCE)
    broker.acl_path.write_text("{not json")
    eventually(
        lambda: broker.log_text().count(STAYS_IN_FORCE) > refusals,
        what="the broken ACL file to be refused",
    )
    with Producer(broker.endpoint, config=config) as producer:
        producer.send(TOPIC, b"still granted")


def test_a_bad_acl_file_stops_the_broker_at_start(tmp_path):
    import subprocess
    import sys

    bad = tmp_path / "acl.json"
    write_acl(bad, {"users": [{"username": "a", "password": "x", "userType": "Root"}]})
    result = subprocess.run(
        [sys.executable, "-m", "rmq_spark.broker", "--store", str(tmp_path / "s"), "--port", "0",
         "--acl", str(bad)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 1
    assert "users[0] (a): userType 'Root' must be Super or Normal" in result.stderr


def test_signed_streams_of_the_rocketlite_client(broker):
    from rmq_spark.client.connection import Connection
    from rmq_spark.wire.proto_gen.rocketlite.v1 import groups_pb2

    conn = Connection(broker.endpoint, ClientConfig(**keys("good")))
    try:
        request = groups_pb2.WatchConsumerChangesRequest(consumer_group=GROUP)
        stream = conn.groups.WatchConsumerChanges(request, timeout=5)
        first = next(stream)
        stream.cancel()
        assert first.consumer_group == GROUP
        assert conn.wait_ready(5)
    finally:
        conn.close()


def test_push_consumer_with_keys_consumes_and_commits(broker):
    """A push consumer signing with keys consumes what its group has left in the topic and
    commits all of it at shutdown.

    Besides the 20 messages sent here (one batch, so one queue), the topic holds what the
    module's earlier tests sent and one message put into each queue first, so that every
    queue has something to read whatever ran before. The wait is for the last message of
    every queue: waiting for the 20 alone let the consumer shut down before it had pulled
    the other queue, whose messages, never consumed, stayed uncommitted (lag 1 or 2 now and
    then under load).
    """
    from rmq_spark.client import ConsumeStatus, PushConsumer
    from rmq_spark.client.push import PushConsumerConfig

    got: list[tuple[int, int, bytes]] = []  # queue id, queue offset, body

    def listener(messages, context):
        got.extend((m.message_queue.queue_id, m.queue_offset, m.body) for m in messages)
        return ConsumeStatus.CONSUME_SUCCESS

    producer_config = ProducerConfig(**keys("good"))
    with Producer(broker.endpoint, config=producer_config) as producer:
        for queue_id in (0, 1):
            producer.send(TOPIC, f"waiting in queue {queue_id}".encode(), queue=queue_id)
    config = PushConsumerConfig(consume_from="FIRST_OFFSET", **keys("good"))
    consumer = PushConsumer(GROUP, broker.endpoint, config=config)
    consumer.subscribe(TOPIC, "*")
    consumer.register_listener(listener)
    consumer.start()
    try:
        wanted = [f"push-{i}".encode() for i in range(20)]
        with Producer(broker.endpoint, config=producer_config) as producer:
            producer.send_batch(TOPIC, wanted)
        with Admin(broker.endpoint, ClientConfig(**keys("root"))) as admin:
            progress = admin.consumer_progress(GROUP, TOPIC)
        # the last message of each queue the group has not committed to the end
        last = {(p.message_queue.queue_id, p.broker_max_offset - 1) for p in progress if p.lag}

        def all_consumed() -> bool:
            assert set(wanted) <= {body for _, _, body in got}, "not every message pushed"
            missing = last - {(queue_id, offset) for queue_id, offset, _ in got}
            assert not missing, f"the last messages of queues not consumed yet: {missing}"
            return True

        eventually(all_consumed, what="every message of the topic consumed", timeout=20)
    finally:
        consumer.shutdown()
    # the consumer's commits (signed, Sub on the group) reached the broker: nothing left
    with Admin(broker.endpoint, ClientConfig(**keys("root"))) as admin:
        assert sum(p.lag for p in admin.consumer_progress(GROUP, TOPIC)) == 0
