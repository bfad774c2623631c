"""What the access check of the two gRPC protocols authorizes is what the handler does.

One broker process with ``--acl`` (and small limits). Users: ``writer`` may publish to
TopicA, ``writer_b`` to TopicB; ``reader`` may consume TopicA with GroupC or GroupD;
``member`` holds GroupC only; ``root`` is a super user. Each test asserts what a client
sees (the answer's code) and that nothing changed or leaked in the store.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import grpc
import pytest
from google.protobuf.timestamp_pb2 import Timestamp
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from rmq_spark.auth import signature
from rmq_spark.client import Admin, ClientConfig
from rmq_spark.codec.record import iter_records
from rmq_spark.names import SCHEDULE_TOPIC, TIMER_TOPIC, TRANS_HALF_TOPIC
from rmq_spark.wire.proto_gen.rocketlite.v1 import (
    admin_pb2,
    admin_pb2_grpc,
    common_pb2,
    messaging_pb2,
    messaging_pb2_grpc,
    offsets_pb2,
    offsets_pb2_grpc,
)
from tests.support.broker_harness import TEST_STORE_FLAGS, BrokerProcess
from tests.support.rocketmq5_harness import Code, RawV2

TOPIC_A, TOPIC_B, SECRET = "TopicA", "TopicB", "Secret"
GROUP_C, GROUP_D = "GroupC", "GroupD"
SECRETS = {
    "root": "root-s",
    "writer": "writer-s",
    "writer_b": "writer-b-s",
    "reader": "reader-s",
    "member": "member-s",
}
MAX_BATCH, MAX_SUBSCRIPTION, MAX_ITEMS, MAX_SELECTORS = 8, 64, 16, 2
MAX_REQUEST = 1 << 20


def _entry(resources, actions):
    return {"resource": resources, "actions": actions}


def _grant(user: str, entry: dict) -> dict:
    return {"subject": f"User:{user}", "policies": [{"entries": [entry]}]}


ACL = {
    "users": [
        {"username": "root", "password": SECRETS["root"], "userType": "Super"},
        *({"username": u, "password": SECRETS[u]} for u in SECRETS if u != "root"),
    ],
    "acls": [
        _grant("writer", _entry(f"Topic:{TOPIC_A}", ["Pub"])),
        _grant("writer_b", _entry(f"Topic:{TOPIC_B}", ["Pub"])),
        _grant("reader", _entry([f"Topic:{TOPIC_A}", f"Group:{GROUP_C}", f"Group:{GROUP_D}"],
                                ["Sub"])),
        _grant("member", _entry(f"Group:{GROUP_C}", ["Sub"])),
    ],
}  # fmt: skip


def signed(user: str) -> list[tuple[str, str]]:
    return signature.signed_metadata(user, SECRETS[user])


class V2(RawV2):
    """Raw RocketMQ 5 calls signed as ``user``."""

    def __init__(self, endpoint: str, user: str) -> None:
        super().__init__(endpoint)
        self.user = user

    def metadata(self, client_id: str | None = None):
        return (*signed(self.user), *super().metadata(client_id))

    def send_messages(self, *messages: pb.Message):
        request = spb.SendMessageRequest(messages=list(messages))
        return self.stub.SendMessage(request, metadata=self.metadata(), timeout=5)

    def end(self, topic: str, transaction_id: str, resolution=pb.COMMIT):
        request = spb.EndTransactionRequest(
            topic=pb.Resource(name=topic),
            message_id=transaction_id,
            transaction_id=transaction_id,
            resolution=resolution,
            source=pb.SOURCE_CLIENT,
        )
        return self.stub.EndTransaction(request, metadata=self.metadata(), timeout=5)


def message(topic: str, body: bytes, message_type=pb.NORMAL, **system) -> pb.Message:
    sp = pb.SystemProperties(
        message_id=uuid.uuid4().hex.upper(), message_type=message_type, **system
    )
    return pb.Message(topic=pb.Resource(name=topic), body=body, system_properties=sp)


class V1:
    """Raw rocketlite.v1 calls signed as ``user``."""

    def __init__(self, endpoint: str, user: str) -> None:
        self.channel = grpc.insecure_channel(endpoint)
        self.messaging = messaging_pb2_grpc.MessagingServiceStub(self.channel)
        self.offsets = offsets_pb2_grpc.OffsetServiceStub(self.channel)
        self.user = user

    def call(self, method, request):
        return method(request, metadata=signed(self.user), timeout=5)

    def send(self, topic: str, *bodies: bytes):
        request = messaging_pb2.SendMessagesRequest(
            topic=topic, messages=[messaging_pb2.Message(body=b) for b in bodies]
        )
        return self.call(self.messaging.SendMessages, request)

    def max_offset(self, topic: str) -> int | None:
        """The end of the topic's queue 0, or None when the topic is not there."""
        query = messaging_pb2.QueueOffsetsQuery(queue=common_pb2.MessageQueue(topic=topic))
        try:
            answer = self.call(
                self.messaging.QueryOffsets, messaging_pb2.QueryOffsetsRequest(queries=[query])
            )
        except grpc.RpcError as exc:
            assert exc.code() == grpc.StatusCode.NOT_FOUND, exc
            return None
        return answer.offsets[0].max_offset

    def records(self, topic: str) -> list:
        request = messaging_pb2.PullMessagesRequest(
            consumer_group="root-look",
            queue=common_pb2.MessageQueue(topic=topic),
            max_messages=1000,
        )
        return list(iter_records(self.call(self.messaging.PullMessages, request).records))

    def close(self) -> None:
        self.channel.close()


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    root = tmp_path_factory.mktemp("grpc-authz")
    acl = root / "acl.json"
    acl.write_text(json.dumps(ACL))
    limits = [
        *("--max-batch-messages", str(MAX_BATCH)),
        *("--max-subscription-chars", str(MAX_SUBSCRIPTION)),
        *("--max-request-items", str(MAX_ITEMS)),
        *("--max-heartbeat-selectors", str(MAX_SELECTORS)),
        *("--max-request-bytes", str(MAX_REQUEST)),
    ]
    process = BrokerProcess(
        "broker-authz",
        root / "store",
        root / "broker.log",
        [*TEST_STORE_FLAGS, "--acl", str(acl), *limits],
    )
    process.start()
    with Admin(process.endpoint, ClientConfig(access_key="root", secret_key=SECRETS["root"])) as a:
        for topic in (TOPIC_A, TOPIC_B):
            a.create_topic(topic, queues=1, message_type="MIXED")
        a.create_topic(SECRET, queues=1)
    yield process
    process.clean_up()


@pytest.fixture(scope="module")
def clients(broker):
    made: dict = {}

    def get(kind, user: str):
        key = (kind, user)
        if key not in made:
            made[key] = kind(broker.endpoint, user)
        return made[key]

    yield get
    for client in made.values():
        client.close()


@pytest.fixture
def root(clients) -> V1:
    return clients(V1, "root")


def one_in_flight(clients, body: bytes) -> str:
    """Send ``body`` to TopicA and receive it with GroupC (30 s invisible) after taking
    whatever GroupC had not taken yet; its receipt handle."""
    reader = clients(V2, "reader")
    while True:
        _, old = reader.receive(GROUP_C, TOPIC_A, wait_s=0)
        if not old:
            break
        for m in old:
            reader.ack(GROUP_C, TOPIC_A, m.system_properties.receipt_handle)
    assert clients(V2, "writer").send(TOPIC_A, body).status.code == Code.OK
    status, got = reader.receive(GROUP_C, TOPIC_A, invisible_s=30, wait_s=2)
    assert status.code == Code.OK and [m.body for m in got] == [body]
    return got[0].system_properties.receipt_handle


def prepared(clients, topic: str, body: bytes) -> str:
    """A transaction's half message on ``topic``, sent by root; its transaction id."""
    half = message(topic, body, pb.TRANSACTION)
    answer = clients(V2, "root").send_messages(half)
    assert answer.status.code == Code.OK, answer.status
    return answer.entries[0].transaction_id


# -- 1. EndTransaction ends only a transaction of the authorized topic ------------------


def test_end_transaction_names_the_topic_it_is_authorized_for(clients, root):
    tx = prepared(clients, TOPIC_A, b"half of A")
    before = root.max_offset(TOPIC_A)
    writer_b = clients(V2, "writer_b")
    # writer_b may publish to TopicB only: naming TopicB does not reach TopicA's transaction
    other = writer_b.end(TOPIC_B, tx)
    assert other.status.code == Code.INVALID_TRANSACTION_ID
    assert "belongs to topic 'TopicA'" in other.status.message
    # no topic: nothing would be authorized, so the request is refused
    empty = writer_b.end("", tx, pb.ROLLBACK)
    assert empty.status.code == Code.ILLEGAL_TOPIC
    # a topic writer_b may not publish to: the access check refuses it
    assert writer_b.end(TOPIC_A, tx).status.code == Code.FORBIDDEN
    assert root.max_offset(TOPIC_A) == before  # still pending: nothing committed
    # the producer that may publish to TopicA ends it
    assert clients(V2, "writer").end(TOPIC_A, tx).status.code == Code.OK
    assert root.max_offset(TOPIC_A) == before + 1


# -- 2. ConsumerSendBack copies only records the group may give back --------------------


def _send_back(client: V1, ref: messaging_pb2.MessageRef, original_topic: str = ""):
    request = messaging_pb2.ConsumerSendBackRequest(
        consumer_group=GROUP_C, message=ref, original_topic=original_topic
    )
    with pytest.raises(grpc.RpcError) as err:
        client.call(client.messaging.ConsumerSendBack, request)
    return err.value


def test_send_back_without_original_topic_does_not_copy_another_topics_record(clients, root):
    secret = root.send(SECRET, b"not for the reader").entries[0].offset_msg_id
    reader = clients(V1, "reader")
    retry, dlq = f"%RETRY%{GROUP_C}", f"%DLQ%{GROUP_C}"
    retry_before, dlq_before = root.max_offset(retry), root.max_offset(dlq)

    refused = _send_back(reader, messaging_pb2.MessageRef(offset_msg_id=secret))

    assert refused.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "belongs to topic 'Secret'" in refused.details()
    # also when it names a topic it may read
    named = _send_back(reader, messaging_pb2.MessageRef(offset_msg_id=secret), TOPIC_A)
    assert named.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (root.max_offset(retry), root.max_offset(dlq)) == (retry_before, dlq_before)


def test_send_back_of_a_broker_topics_record_is_denied(clients, root):
    prepared(clients, TOPIC_B, b"half never committed")
    half = next(r for r in root.records(TRANS_HALF_TOPIC) if r.body == b"half never committed")
    retry = f"%RETRY%{GROUP_C}"
    before = root.max_offset(retry)

    refused = _send_back(
        clients(V1, "reader"), messaging_pb2.MessageRef(physical_offset=half.physical_offset)
    )

    assert refused.code() == grpc.StatusCode.PERMISSION_DENIED
    assert TRANS_HALF_TOPIC in refused.details()
    assert root.max_offset(retry) == before


# -- 3. receipt handles act only inside the authorized group and topic ------------------


def test_change_invisible_duration_needs_the_topic_it_acts_on(clients):
    handle = one_in_flight(clients, b"in flight")
    reader = clients(V2, "reader")

    # member holds GroupC but may not read TopicA: it cannot show TopicA's message again
    answer = clients(V2, "member").change_invisible(GROUP_C, TOPIC_A, handle, 0)
    assert answer.status.code == Code.FORBIDDEN
    _, again = reader.receive(GROUP_C, TOPIC_A, wait_s=0)
    assert again == []  # still invisible
    assert reader.ack(GROUP_C, TOPIC_A, handle).status.code == Code.OK


def test_handles_of_no_delivery_here_change_nothing(broker, clients):
    handle = one_in_flight(clients, b"for C")
    reader = clients(V2, "reader")
    journal = Path(broker.store_dir) / "config" / "popState.journal"
    size = journal.stat().st_size

    # GroupC's handle under GroupD (which received nothing), and handles of queues that
    # were never delivered from: refused, and no state is made for them
    forged = [handle, "7.0.1", "123456.99.abc"]
    for group, h in [(GROUP_D, handle), *((GROUP_C, f) for f in forged[1:])]:
        assert reader.ack(group, TOPIC_A, h).status.code == Code.INVALID_RECEIPT_HANDLE
        changed = reader.change_invisible(group, TOPIC_A, h, 0)
        assert changed.status.code == Code.INVALID_RECEIPT_HANDLE
        request = spb.ForwardMessageToDeadLetterQueueRequest(
            group=pb.Resource(name=group), topic=pb.Resource(name=TOPIC_A),
            receipt_handle=h, message_id="m",
        )  # fmt: skip
        forward = reader.stub.ForwardMessageToDeadLetterQueue(
            request, metadata=reader.metadata(), timeout=5
        )
        assert forward.status.code == Code.INVALID_RECEIPT_HANDLE
    assert journal.stat().st_size == size
    assert reader.ack(GROUP_C, TOPIC_A, handle).status.code == Code.OK


# -- 4. sends to the broker's own topics -------------------------------------------------


@pytest.mark.parametrize(
    ("topic", "code"),
    [
        (TRANS_HALF_TOPIC, grpc.StatusCode.PERMISSION_DENIED),
        (TIMER_TOPIC, grpc.StatusCode.PERMISSION_DENIED),
        ("rmq_sys_other", grpc.StatusCode.PERMISSION_DENIED),
        # names no client topic may have: refused by the naming rule
        ("%DLQ%GroupC", grpc.StatusCode.INVALID_ARGUMENT),
        (SCHEDULE_TOPIC, grpc.StatusCode.INVALID_ARGUMENT),
    ],
)
def test_v1_sends_to_broker_topics_are_refused_naming_the_topic(root, topic, code):
    before = root.max_offset(topic)
    with pytest.raises(grpc.RpcError) as err:
        root.send(topic, b"forged")  # a super user's send
    assert err.value.code() == code
    assert topic in err.value.details()
    assert root.max_offset(topic) == before


@pytest.mark.parametrize("kind", ["NORMAL", "TRANSACTION", "DELAY"])
@pytest.mark.parametrize("topic", [TRANS_HALF_TOPIC, TIMER_TOPIC, "%DLQ%GroupC", SCHEDULE_TOPIC])
def test_v2_sends_to_broker_topics_are_illegal_topics(clients, root, topic, kind):
    prepared(clients, TOPIC_B, b"so the half topic exists")
    before = root.max_offset(topic)
    extra = {}
    if kind == "DELAY":
        extra["delivery_timestamp"] = Timestamp(seconds=int(time.time()) + 60)
    answer = clients(V2, "root").send_messages(
        message(topic, b"forged", getattr(pb, kind), **extra)
    )
    assert answer.status.code == Code.ILLEGAL_TOPIC, answer.status
    assert topic in answer.status.message
    assert root.max_offset(topic) == before


# -- 5. every message of a send is authorized ---------------------------------------------


def test_a_v2_send_is_authorized_for_each_message_topic(clients, root):
    before = root.max_offset(TOPIC_B)
    answer = clients(V2, "writer").send_messages(
        message(TOPIC_A, b"mine"), message(TOPIC_B, b"not mine")
    )
    assert answer.status.code == Code.FORBIDDEN
    assert root.max_offset(TOPIC_B) == before


def test_progress_and_offsets_of_every_topic_need_every_topic(clients, root):
    commit = offsets_pb2.UpdateConsumerOffsetsRequest(
        consumer_group=GROUP_C,
        offsets=[offsets_pb2.QueueOffset(queue=common_pb2.MessageQueue(topic=SECRET), offset=0)],
    )
    root.call(root.offsets.UpdateConsumerOffsets, commit)
    reader = clients(V1, "reader")
    for method, request in [
        (reader.offsets.GetConsumerProgress, offsets_pb2.GetConsumerProgressRequest),
        (reader.offsets.QueryConsumerOffsets, offsets_pb2.QueryConsumerOffsetsRequest),
    ]:
        with pytest.raises(grpc.RpcError) as err:
            reader.call(method, request(consumer_group=GROUP_C))
        assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert SECRET not in err.value.details()
    # naming its topic, the reader gets its progress
    progress = reader.call(
        reader.offsets.GetConsumerProgress,
        offsets_pb2.GetConsumerProgressRequest(consumer_group=GROUP_C, topic=TOPIC_A),
    )
    assert {q.queue.topic for q in progress.queues} == {TOPIC_A}
    everything = root.call(
        root.offsets.GetConsumerProgress,
        offsets_pb2.GetConsumerProgressRequest(consumer_group=GROUP_C),
    )
    assert SECRET in {q.queue.topic for q in everything.queues}


def test_admin_calls_leave_the_broker_topics_alone(clients, root):
    prepared(clients, TOPIC_B, b"pending while an admin tries")
    before = root.max_offset(TRANS_HALF_TOPIC)
    admin = admin_pb2_grpc.AdminServiceStub(root.channel)
    calls = [
        (admin.DeleteTopic, admin_pb2.DeleteTopicRequest(topic=TRANS_HALF_TOPIC)),
        (admin.UpdateTopic, admin_pb2.UpdateTopicRequest(topic=TRANS_HALF_TOPIC, perm=4)),
        (admin.CreateTopic, admin_pb2.CreateTopicRequest(topic="rmq_sys_mine")),
    ]
    for method, request in calls:
        with pytest.raises(grpc.RpcError) as err:
            root.call(method, request)  # a super user's call
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "is the broker's own" in err.value.details()
    assert root.max_offset(TRANS_HALF_TOPIC) == before
    assert root.max_offset("rmq_sys_mine") is None


# -- 6. malformed request frames -----------------------------------------------------------

GARBAGE = b"\xff\xff\xff\xff\x0f"
V1_SEND = "/rocketlite.v1.MessagingService/SendMessages"
V2_SEND = "/apache.rocketmq.v2.MessagingService/SendMessage"
V2_RECEIVE = "/apache.rocketmq.v2.MessagingService/ReceiveMessage"
V2_TELEMETRY = "/apache.rocketmq.v2.MessagingService/Telemetry"


def _bytes(data: bytes) -> bytes:
    return data


def test_malformed_requests_are_invalid_arguments_logged_once(broker):
    with grpc.insecure_channel(broker.endpoint) as channel:
        answers = []
        for _ in range(3):
            for method in (V1_SEND, V2_SEND):
                call = channel.unary_unary(method, _bytes, _bytes)
                with pytest.raises(grpc.RpcError) as err:
                    call(GARBAGE, metadata=signed("root"), timeout=5)
                answers.append(err.value)
        stream = channel.unary_stream(V2_RECEIVE, _bytes, _bytes)
        with pytest.raises(grpc.RpcError) as err:
            list(stream(GARBAGE, timeout=5))
        answers.append(err.value)
        telemetry = channel.stream_stream(V2_TELEMETRY, _bytes, _bytes)
        with pytest.raises(grpc.RpcError) as err:
            metadata = [*signed("root"), ("x-mq-client-id", "bad-frames")]
            list(telemetry(iter([GARBAGE]), metadata=metadata, timeout=5))
        answers.append(err.value)
    for answer in answers:
        assert answer.code() == grpc.StatusCode.INVALID_ARGUMENT, answer
        assert "is not a valid" in answer.details()
    assert "apache.rocketmq.v2.SendMessageRequest" in answers[1].details()
    log = broker.log_text()
    assert "Traceback" not in log and "Unexpected" not in log
    assert log.count(f"malformed request to {V1_SEND}") == 1  # rate-limited: once a minute
    assert log.count(f"malformed request to {V2_TELEMETRY}") == 1


def test_refusals_of_unsigned_calls_are_logged_by_kind_not_by_their_text(broker):
    """An unauthenticated client sending a new malformed date in every call cannot write a
    log line per text it chose: refusals are rate-limited by their kind."""
    v1 = V1(broker.endpoint, "root")
    before = broker.log_text().count(f"refused {V1_SEND}")
    request = messaging_pb2.SendMessagesRequest(
        topic="TopicA", messages=[messaging_pb2.Message(body=b"x")]
    )
    for n in range(60):
        metadata = [
            (key, f"bad-date-{n:03d}" if key == signature.DATE_TIME_HEADER else value)
            for key, value in signature.signed_metadata("nobody", "secret")
        ]
        with pytest.raises(grpc.RpcError) as err:
            v1.messaging.SendMessages(request, metadata=metadata, timeout=5)
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    v1.channel.close()
    assert broker.log_text().count(f"refused {V1_SEND}") - before <= 1


# -- 7. limits -------------------------------------------------------------------------


def test_v2_sends_take_at_most_the_batch_limit(clients, root):
    before = root.max_offset(TOPIC_A)
    batch = [message(TOPIC_A, b"m%d" % i) for i in range(MAX_BATCH + 1)]
    answer = clients(V2, "writer").send_messages(*batch)
    assert answer.status.code == Code.BAD_REQUEST
    assert "--max-batch-messages" in answer.status.message
    assert root.max_offset(TOPIC_A) == before


def test_v2_requests_take_at_most_the_request_limit(clients, root):
    before = root.max_offset(TOPIC_A)
    with pytest.raises(grpc.RpcError) as err:
        clients(V2, "writer").send_messages(message(TOPIC_A, b"x" * MAX_REQUEST))
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert root.max_offset(TOPIC_A) == before
    assert clients(V2, "writer").send(TOPIC_A, b"small").status.code == Code.OK


def test_v2_filters_take_at_most_the_subscription_limit(clients):
    reader = clients(V2, "reader")
    expression = "||".join(f"tag{i}" for i in range(20))
    assert len(expression) > MAX_SUBSCRIPTION
    request = spb.ReceiveMessageRequest(
        group=pb.Resource(name=GROUP_C),
        message_queue=pb.MessageQueue(topic=pb.Resource(name=TOPIC_A), id=-1),
        filter_expression=pb.FilterExpression(type=pb.TAG, expression=expression),
        batch_size=1,
    )
    request.invisible_duration.FromSeconds(30)
    request.long_polling_timeout.FromSeconds(0)
    frames = list(reader.stub.ReceiveMessage(request, metadata=reader.metadata(), timeout=5))
    assert frames[0].status.code == Code.ILLEGAL_FILTER_EXPRESSION
    assert "--max-subscription-chars" in frames[0].status.message

    settings = spb.TelemetryCommand(
        settings=pb.Settings(
            client_type=pb.SIMPLE_CONSUMER,
            subscription=pb.Subscription(
                group=pb.Resource(name=GROUP_C),
                subscriptions=[
                    pb.SubscriptionEntry(
                        topic=pb.Resource(name=TOPIC_A),
                        expression=pb.FilterExpression(type=pb.TAG, expression=expression),
                    )
                ],
            ),
        )
    )
    with pytest.raises(grpc.RpcError) as err:
        list(reader.stub.Telemetry(iter([settings]), metadata=reader.metadata(), timeout=5))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "--max-subscription-chars" in err.value.details()


def test_v2_acks_take_at_most_the_request_item_limit(clients):
    reader = clients(V2, "reader")
    request = spb.AckMessageRequest(
        group=pb.Resource(name=GROUP_C),
        topic=pb.Resource(name=TOPIC_A),
        entries=[
            spb.AckMessageEntry(message_id="m", receipt_handle=f"0.{i}.1")
            for i in range(MAX_ITEMS + 1)
        ],
    )
    answer = reader.stub.AckMessage(request, metadata=reader.metadata(), timeout=5)
    assert answer.status.code == Code.BAD_REQUEST
    assert "--max-request-items" in answer.status.message


def test_v2_settings_compile_at_most_the_selector_limit(clients):
    reader = clients(V2, "reader")
    entries = [
        pb.SubscriptionEntry(
            topic=pb.Resource(name=TOPIC_A),
            expression=pb.FilterExpression(type=pb.SQL, expression=f"n = {i}"),
        )
        for i in range(MAX_SELECTORS + 1)
    ]
    settings = spb.TelemetryCommand(
        settings=pb.Settings(
            client_type=pb.SIMPLE_CONSUMER,
            subscription=pb.Subscription(group=pb.Resource(name=GROUP_C), subscriptions=entries),
        )
    )
    with pytest.raises(grpc.RpcError) as err:
        list(reader.stub.Telemetry(iter([settings]), metadata=reader.metadata(), timeout=5))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert f"{MAX_SELECTORS + 1} different SQL92 selectors" in err.value.details()
    assert "--max-heartbeat-selectors" in err.value.details()
