"""The admin calls of RocketMQ's tools that change a broker or reach its consumers, sent as
raw remoting frames to a broker process: its settings (GET_BROKER_CONFIG,
UPDATE_BROKER_CONFIG), its consumer groups' settings (UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
DELETE_SUBSCRIPTIONGROUP), calls relayed to a live consumer (GET_CONSUMER_RUNNING_INFO,
CONSUME_MESSAGE_DIRECTLY) and a group's offsets reset by time (INVOKE_BROKER_TO_RESET_OFFSET,
which tells the group's remoting clients with RESET_CONSUMER_CLIENT_OFFSET).

The consumer is a raw connection too: it heartbeats into its group and answers the
broker's requests by hand, as a Java client's ClientRemotingProcessor would. What is
checked is what a user would notice: the answers, and what the broker does after a change.
"""

from __future__ import annotations

import json
import time

import grpc
import pytest

from rmq_spark.auth.remoting_signature import sign_request
from rmq_spark.client.groups import HeartbeatInfo, Subscription
from rmq_spark.codec.record import decode_record
from rmq_spark.wire.proto_gen.rocketlite.v1 import groups_pb2_grpc
from rmq_spark.wire.remoting import config_text, headers
from rmq_spark.wire.remoting.codes import RequestCode as C
from rmq_spark.wire.remoting.codes import ResponseCode as R
from rmq_spark.wire.remoting.frame import Command, encode
from tests.support.broker_harness import TEST_STORE_FLAGS, BrokerProcess
from tests.support.eventually import eventually
from tests.support.remoting_wire import Remoting, Wire, offset_table

BROKER = "broker-adm"
MAX_BATCH = 8


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    root = tmp_path_factory.mktemp("remoting-admin")
    flags = [*TEST_STORE_FLAGS, "--remoting-port", "0", "--max-batch-messages", str(MAX_BATCH)]
    process = BrokerProcess(BROKER, root / "store", root / "broker.log", flags).start()
    remoting = Remoting(process, process.remoting_address)
    with remoting.wire() as wire:
        for topic, queues in (("AdmT", 1), ("AdmReset", 1), ("AdmDirect", 1)):
            create_topic(wire, topic, queues)
    yield remoting
    process.clean_up()


def create_topic(wire: Wire, topic: str, queues: int, sign=dict) -> None:
    ext = {"topic": topic, "readQueueNums": str(queues), "writeQueueNums": str(queues)}
    answer = wire.call(C.UPDATE_AND_CREATE_TOPIC, sign(ext))
    assert answer.code == R.SUCCESS, answer.remark


def send(wire: Wire, topic: str, body: bytes = b"payload", **more: str) -> Command:
    ext = {"a": "pg", "b": topic, "c": "TBW102", "d": "4", "e": "0", "f": "0", "g": "1"}
    return wire.call(C.SEND_MESSAGE_V2, {**ext, "h": "0", "i": "", **more}, body)


def config_of(wire: Wire) -> dict[str, str]:
    answer = wire.call(C.GET_BROKER_CONFIG)
    assert answer.code == R.SUCCESS, answer.remark
    assert json.loads(answer.ext["version"])["counter"] >= 0
    return config_text.read_properties(answer.body)


def update_config(wire: Wire, text: str) -> Command:
    return wire.call(C.UPDATE_BROKER_CONFIG, body=text.encode())


def refused(answer: Command, code: int, *words: str) -> None:
    assert answer.code == code, (answer.code, answer.remark)
    for word in words:
        assert word in (answer.remark or ""), answer.remark


def route_perm(wire: Wire, topic: str) -> int:
    answer = wire.call(C.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
    assert answer.code == R.SUCCESS, answer.remark
    return json.loads(answer.body)["queueDatas"][0]["perm"]


def max_offset(wire: Wire, topic: str, queue_id: int = 0) -> int:
    answer = wire.call(C.GET_MAX_OFFSET, {"topic": topic, "queueId": str(queue_id)})
    assert answer.code == R.SUCCESS, answer.remark
    return int(answer.ext["offset"])


def committed(wire: Wire, group: str, topic: str) -> int | None:
    ext = {"consumerGroup": group, "topic": topic, "queueId": "0", "setZeroIfNotFound": "false"}
    answer = wire.call(C.QUERY_CONSUMER_OFFSET, ext)
    if answer.code == R.QUERY_NOT_FOUND:
        return None
    assert answer.code == R.SUCCESS, answer.remark
    return int(answer.ext["offset"])


# -- the broker's settings ---------------------------------------------------------------------


def test_the_broker_config_holds_the_settings_it_runs_with(broker):
    with broker.wire() as wire:
        config = config_of(wire)
    assert config["brokerName"] == BROKER
    assert config["listenPort"] == broker.address.rsplit(":", 1)[1]
    assert config["brokerPermission"] == "6"
    assert config["maxBatchMessages"] == str(MAX_BATCH)
    assert config["flushDiskType"] in ("ASYNC_FLUSH", "SYNC_FLUSH")
    assert config["storePathRootDir"] == str(broker.process.store_dir)


def test_a_permission_change_holds_from_the_next_request(broker):
    with broker.wire() as wire:
        assert send(wire, "AdmT").code == R.SUCCESS
        assert update_config(wire, "brokerPermission=4\n").code == R.SUCCESS
        try:
            assert config_of(wire)["brokerPermission"] == "4"
            refused(send(wire, "AdmT"), R.NO_PERMISSION, "read-only")
            assert route_perm(wire, "AdmT") == 4  # routes announce it: producers go elsewhere
        finally:
            assert update_config(wire, "brokerPermission=6").code == R.SUCCESS
        assert send(wire, "AdmT").code == R.SUCCESS
        assert route_perm(wire, "AdmT") == 6


def test_auto_creation_and_its_queue_count_change_while_running(broker):
    with broker.wire() as wire:
        refused(send(wire, "AdmAuto"), R.TOPIC_NOT_EXIST)
        changed = update_config(wire, "autoCreateTopicEnable=true\ndefaultTopicQueueNums=2\n")
        assert changed.code == R.SUCCESS, changed.remark
        try:
            assert send(wire, "AdmAuto").code == R.SUCCESS
            answer = wire.call(C.GET_ROUTEINFO_BY_TOPIC, {"topic": "AdmAuto"})
            assert json.loads(answer.body)["queueDatas"][0]["readQueueNums"] == 2
        finally:
            update_config(wire, "autoCreateTopicEnable=false\ndefaultTopicQueueNums=4\n")
        refused(send(wire, "AdmAuto2"), R.TOPIC_NOT_EXIST)


def test_a_send_limit_change_holds_for_the_next_send(broker):
    def batch(count: int) -> bytes:
        return headers.encode_batch([0] * count, [b"m"] * count, [b"UNIQ_KEY\x01k\x02"] * count)

    def send_batch(wire: Wire, count: int) -> Command:
        ext = {"a": "pg", "b": "AdmT", "c": "TBW102", "d": "4", "e": "0", "f": "0", "g": "1"}
        return wire.call(C.SEND_BATCH_MESSAGE, {**ext, "h": "0", "m": "true"}, batch(count))

    with broker.wire() as wire:
        assert send_batch(wire, 3).code == R.SUCCESS
        assert update_config(wire, "maxBatchMessages=2").code == R.SUCCESS
        try:
            refused(send_batch(wire, 3), R.MESSAGE_ILLEGAL, "--max-batch-messages")
        finally:
            assert update_config(wire, f"maxBatchMessages={MAX_BATCH}").code == R.SUCCESS
        assert send_batch(wire, 3).code == R.SUCCESS


def test_settings_fixed_while_running_unknown_names_and_bad_values_are_refused(broker):
    with broker.wire() as wire:
        before = config_of(wire)
        refused(
            update_config(wire, "brokerName=other"), R.INVALID_PARAMETER, "brokerName", "--name"
        )
        refused(
            update_config(wire, "mappedFileSizeCommitLog=1024"),
            R.INVALID_PARAMETER,
            "mappedFileSizeCommitLog",
            "--commitlog-segment-bytes",
        )
        refused(update_config(wire, "noSuchSetting=1"), R.INVALID_PARAMETER, "noSuchSetting")
        refused(
            update_config(wire, "brokerPermission=5"), R.INVALID_PARAMETER, "brokerPermission=5"
        )
        refused(
            update_config(wire, "autoCreateTopicEnable=yes"),
            R.INVALID_PARAMETER,
            "autoCreateTopicEnable='yes'",
        )
        refused(update_config(wire, "maxPullBytes=lots"), R.INVALID_PARAMETER, "maxPullBytes")
        refused(update_config(wire, ""), R.INVALID_PARAMETER, "names no setting")
        # all or nothing: the good change of a refused update is not made
        refused(
            update_config(wire, "brokerPermission=4\nbrokerId=3"), R.INVALID_PARAMETER, "brokerId"
        )
        refused(
            update_config(wire, "maxPullBytes=999999999999"),
            R.INVALID_PARAMETER,
            "max_pull_bytes",
            "nothing was changed",
        )
        refused(wire.call(C.UPDATE_BROKER_CONFIG, body=b"\xff=1"), R.INVALID_PARAMETER, "UTF-8")
        assert config_of(wire) == before


# -- subscription groups ----------------------------------------------------------------------


def group_table(wire: Wire) -> dict:
    answer = wire.call(C.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
    assert answer.code == R.SUCCESS, answer.remark
    return json.loads(answer.body)["subscriptionGroupTable"]


def update_group(wire: Wire, **entry) -> Command:
    return wire.call(C.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=json.dumps(entry).encode())


def test_a_groups_retry_limit_decides_when_a_message_goes_to_its_dead_letter_queue(broker):
    group = "g-sub-limit"
    with broker.wire() as wire:
        created = update_group(wire, groupName=group, retryMaxTimes=1, consumeEnable=True)
        assert created.code == R.SUCCESS, created.remark
        entry = group_table(wire)[group]
        assert entry["retryMaxTimes"] == 1 and entry["retryQueueNums"] == 1  # defaults filled
        # a message redelivered once already (in the group's retry topic), failed again
        retry = f"%RETRY%{group}"
        stored = send(wire, retry, b"failed twice", j="1")
        assert stored.code == R.SUCCESS, stored.remark
        back = {
            "offset": str(int(stored.ext["msgId"][-16:], 16)),
            "group": group,
            "delayLevel": "0",
            "originTopic": "AdmT",
        }
        answer = wire.call(C.CONSUMER_SEND_MSG_BACK, back)
        assert answer.code == R.SUCCESS, answer.remark
        assert max_offset(wire, f"%DLQ%{group}") == 1  # the group allows one redelivery


def test_a_deleted_group_is_gone_and_its_offsets_with_it_when_asked(broker):
    with broker.wire() as wire:
        for group in ("g-del-keep", "g-del-drop"):
            assert update_group(wire, groupName=group).code == R.SUCCESS
            commit = {"consumerGroup": group, "topic": "AdmT", "queueId": "0", "commitOffset": "1"}
            assert wire.call(C.UPDATE_CONSUMER_OFFSET, commit).code == R.SUCCESS
        assert {"g-del-keep", "g-del-drop"} <= set(group_table(wire))
        kept = wire.call(C.DELETE_SUBSCRIPTIONGROUP, {"groupName": "g-del-keep"})
        dropped = wire.call(
            C.DELETE_SUBSCRIPTIONGROUP, {"groupName": "g-del-drop", "removeOffset": "true"}
        )
        assert kept.code == dropped.code == R.SUCCESS
        table = group_table(wire)
        assert "g-del-keep" not in table and "g-del-drop" not in table
        assert committed(wire, "g-del-keep", "AdmT") == 1
        assert committed(wire, "g-del-drop", "AdmT") is None
        # created again, it is listed again
        assert update_group(wire, groupName="g-del-keep").code == R.SUCCESS
        assert "g-del-keep" in group_table(wire)


def test_bad_subscription_groups_are_refused_naming_the_field(broker):
    with broker.wire() as wire:
        refused(update_group(wire, groupName="g-bad", retryMaxTimes="3"), R.INVALID_PARAMETER,
                "retryMaxTimes")  # fmt: skip
        refused(update_group(wire, groupName="g-bad", retryMaxTimes=0), R.INVALID_PARAMETER,
                "retryMaxTimes 0")  # fmt: skip
        refused(update_group(wire, groupName="g-bad", consumeEnable="no"), R.INVALID_PARAMETER,
                "consumeEnable")  # fmt: skip
        refused(update_group(wire, groupName="bad group!"), R.INVALID_PARAMETER, "bad group!")
        refused(update_group(wire, retryMaxTimes=3), R.INVALID_PARAMETER)
        refused(wire.call(C.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=b"[1]"), R.INVALID_PARAMETER)
        refused(wire.call(C.DELETE_SUBSCRIPTIONGROUP, {}), R.SYSTEM_ERROR, "groupName")
        assert "g-bad" not in group_table(wire)


# -- calls relayed to a consumer ----------------------------------------------------------------


class Consumer:
    """A remoting member of ``group`` that answers the broker's requests by hand."""

    def __init__(
        self, remoting: Remoting, group: str, topic: str, client_id: str, language: str = "JAVA"
    ) -> None:
        self.wire = remoting.wire()
        self.client_id = client_id
        heartbeat = {
            "clientID": client_id,
            "consumerDataSet": [
                {
                    "groupName": group,
                    "consumeType": "CONSUME_PASSIVELY",
                    "messageModel": "CLUSTERING",
                    "subscriptionDataSet": [{"topic": topic, "subString": "*"}],
                }
            ],
        }
        body = json.dumps(heartbeat).encode()
        answer = self.wire.call(C.HEART_BEAT, body=body, language=language)
        assert answer.code == R.SUCCESS, answer.remark

    def next_request(self, code: int, timeout_s: float = 5.0) -> Command:
        """The next request of the broker's with ``code`` (membership notices skipped)."""
        deadline = time.monotonic() + timeout_s
        while True:
            command = self.wire.read_frame(deadline)
            if not command.is_response and command.code == code:
                return command

    def answer(self, request: Command, code: int, body: bytes, remark: str | None = None):
        reply = request.reply(code, remark)
        reply.body = body
        self.wire.send_bytes(encode(reply))

    def close(self) -> None:
        self.wire.close()


def ask(wire: Wire, code: int, ext: dict) -> int:
    """Send a request without waiting; its opaque."""
    opaque = wire.next_opaque
    wire.next_opaque += 1
    wire.send_bytes(encode(Command(code=code, ext=ext, opaque=opaque)))
    return opaque


def test_running_info_comes_from_the_consumer_itself(broker):
    consumer = Consumer(broker, "g-info", "AdmT", "10.0.0.9@info-1")
    try:
        with broker.wire() as admin:
            ext = {
                "consumerGroup": "g-info",
                "clientId": consumer.client_id,
                "jstackEnable": "true",
            }
            opaque = ask(admin, C.GET_CONSUMER_RUNNING_INFO, ext)
            asked = consumer.next_request(C.GET_CONSUMER_RUNNING_INFO)
            assert asked.ext["consumerGroup"] == "g-info" and asked.ext["jstackEnable"] == "true"
            info = b'{"properties":{"PROP_CONSUME_TYPE":"CONSUME_PASSIVELY"}}'
            consumer.answer(asked, R.SUCCESS, info)
            answer = admin.response(opaque)
            assert answer.code == R.SUCCESS and bytes(answer.body) == info
            # the consumer's own refusal comes back as it said it
            opaque = ask(admin, C.GET_CONSUMER_RUNNING_INFO, ext)
            asked = consumer.next_request(C.GET_CONSUMER_RUNNING_INFO)
            consumer.answer(asked, R.SYSTEM_ERROR, b"", "The Consumer Group <g-info> not exist")
            answer = admin.response(opaque)
            refused(answer, R.SYSTEM_ERROR, "The Consumer Group <g-info> not exist")
    finally:
        consumer.close()


def test_a_message_consumed_directly_is_the_stored_one(broker):
    consumer = Consumer(broker, "g-direct", "AdmDirect", "10.0.0.9@direct-1")
    try:
        with broker.wire() as admin:
            stored = send(admin, "AdmDirect", b"consume me")
            msg_id = stored.ext["msgId"]
            ext = {"consumerGroup": "g-direct", "clientId": consumer.client_id, "msgId": msg_id}
            opaque = ask(admin, C.CONSUME_MESSAGE_DIRECTLY, ext)
            asked = consumer.next_request(C.CONSUME_MESSAGE_DIRECTLY)
            assert asked.ext["brokerName"] == BROKER and asked.ext["msgId"] == msg_id
            record = decode_record(bytes(asked.body))
            assert (record.topic, record.body) == ("AdmDirect", b"consume me")
            result = b'{"autoCommit":true,"consumeResult":"CR_SUCCESS","order":false}'
            consumer.answer(asked, R.SUCCESS, result)
            answer = admin.response(opaque)
            assert answer.code == R.SUCCESS and bytes(answer.body) == result
            # an id that names no message of this broker is refused before the consumer
            other = msg_id[:16] + f"{int(msg_id[16:], 16) + 1:016X}"
            refused(
                admin.call(C.CONSUME_MESSAGE_DIRECTLY, {**ext, "msgId": other}), R.TOPIC_NOT_EXIST
            )
            refused(
                admin.call(C.CONSUME_MESSAGE_DIRECTLY, {**ext, "msgId": "nothex"}),
                R.INVALID_PARAMETER,
                "nothex",
            )
    finally:
        consumer.close()


def test_a_client_that_is_not_there_or_does_not_answer(broker):
    consumer = Consumer(broker, "g-silent", "AdmT", "10.0.0.9@silent-1")
    try:
        with broker.wire() as admin:
            ext = {"consumerGroup": "g-silent", "clientId": "10.0.0.9@nobody"}
            refused(admin.call(C.GET_CONSUMER_RUNNING_INFO, ext), R.SYSTEM_ERROR, "not online")
            refused(
                admin.call(C.GET_CONSUMER_RUNNING_INFO, {"consumerGroup": "g-silent"}),
                R.SYSTEM_ERROR,
                "clientId",
            )
            ext["clientId"] = consumer.client_id
            opaque = ask(admin, C.GET_CONSUMER_RUNNING_INFO, ext)
            consumer.next_request(C.GET_CONSUMER_RUNNING_INFO)  # and never answered
            answer = admin.response(opaque, timeout_s=20)
            refused(answer, R.CONSUME_MSG_TIMEOUT, consumer.client_id, "Timeout")
            # a consumer that hangs up while asked: the tool hears so at once
            opaque = ask(admin, C.GET_CONSUMER_RUNNING_INFO, ext)
            consumer.next_request(C.GET_CONSUMER_RUNNING_INFO)
            consumer.close()
            refused(admin.response(opaque), R.SYSTEM_ERROR, "closed its connection")
            # and after: not online (it leaves the group a moment after its connection)
            refused(admin.call(C.GET_CONSUMER_RUNNING_INFO, ext), R.SYSTEM_ERROR, "not online")
    finally:
        consumer.close()


def test_a_member_over_grpc_cannot_be_asked(broker):
    info = HeartbeatInfo("10.0.0.9@grpc-1", "g-grpc", (Subscription("AdmT", "*"),))
    with grpc.insecure_channel(broker.process.endpoint) as channel:
        groups_pb2_grpc.GroupServiceStub(channel).Heartbeat(info.to_pb(), timeout=10)
    with broker.wire() as admin:
        ext = {"consumerGroup": "g-grpc", "clientId": "10.0.0.9@grpc-1"}
        refused(
            admin.call(C.GET_CONSUMER_RUNNING_INFO, ext),
            R.SYSTEM_ERROR,
            "member over rocketlite.v1 or RocketMQ 5",
            "its running info",
        )


# -- offsets reset by time ------------------------------------------------------------------------


def reset(wire: Wire, group: str, topic: str, timestamp: int | str, force: str = "true") -> Command:
    ext = {"topic": topic, "group": group, "timestamp": str(timestamp), "isForce": force}
    return wire.call(C.INVOKE_BROKER_TO_RESET_OFFSET, ext)


def test_a_reset_by_time_commits_the_offsets_and_tells_the_groups_consumers(broker):
    group, topic = "g-reset", "AdmReset"
    with broker.wire() as wire:
        for i in range(3):
            assert send(wire, topic, f"old-{i}".encode()).code == R.SUCCESS
        time.sleep(0.05)
        between = int(time.time() * 1000)
        time.sleep(0.05)
        for i in range(3):
            assert send(wire, topic, f"new-{i}".encode()).code == R.SUCCESS
        commit = {"consumerGroup": group, "topic": topic, "queueId": "0", "commitOffset": "6"}
        assert wire.call(C.UPDATE_CONSUMER_OFFSET, commit).code == R.SUCCESS
        # nobody of the group is online: the tool is told so, and nothing moves
        refused(reset(wire, group, topic, between), R.CONSUMER_NOT_ONLINE, "not online")
        assert committed(wire, group, topic) == 6

        consumer = Consumer(broker, group, topic, "10.0.0.9@reset-1")
        cpp = Consumer(broker, group, topic, "10.0.0.9@reset-cpp", language="CPP")
        try:
            answer = reset(wire, group, topic, between)
            assert answer.code == R.SUCCESS, answer.remark
            assert offset_table(answer.body) == {0: 3}  # the first message stored after
            assert committed(wire, group, topic) == 3
            told = consumer.next_request(C.RESET_CONSUMER_CLIENT_OFFSET)
            assert told.is_oneway
            assert (told.ext["topic"], told.ext["group"]) == (topic, group)
            assert told.ext["timestamp"] == str(between) and told.ext["isForce"] == "true"
            assert offset_table(told.body) == {0: 3}
            assert f'"brokerName":"{BROKER}"' in bytes(told.body).decode()
            # the C++ client reads the offsets as a list (RocketMQ's ResetOffsetBodyForC)
            told_cpp = cpp.next_request(C.RESET_CONSUMER_CLIENT_OFFSET)
            assert json.loads(bytes(told_cpp.body)) == {
                "offsetTable": [{"brokerName": BROKER, "offset": 3, "queueId": 0, "topic": topic}]
            }

            # without force a group already further back stays there
            commit["commitOffset"] = "1"
            assert wire.call(C.UPDATE_CONSUMER_OFFSET, commit).code == R.SUCCESS
            answer = reset(wire, group, topic, between, force="false")
            assert offset_table(answer.body) == {0: 1} and committed(wire, group, topic) == 1
            # "now": every queue at its end
            answer = reset(wire, group, topic, -1)
            assert offset_table(answer.body) == {0: 6} and committed(wire, group, topic) == 6
        finally:
            consumer.close()
            cpp.close()


def test_a_reset_of_something_that_is_not_there_is_refused(broker):
    consumer = Consumer(broker, "g-reset-bad", "AdmT", "10.0.0.9@reset-bad")
    try:
        with broker.wire() as wire:
            refused(reset(wire, "g-reset-bad", "NoSuchTopic", 0), R.TOPIC_NOT_EXIST, "NoSuchTopic")
            refused(reset(wire, "g-reset-bad", "AdmT", -5), R.INVALID_PARAMETER, "timestamp=-5")
            refused(reset(wire, "g-reset-bad", "AdmT", "yesterday"), R.INVALID_PARAMETER,
                    "yesterday")  # fmt: skip
            refused(reset(wire, "bad group!", "AdmT", 0), R.INVALID_PARAMETER, "bad group!")
            refused(
                wire.call(C.INVOKE_BROKER_TO_RESET_OFFSET, {"topic": "AdmT"}),
                R.SYSTEM_ERROR,
                "group",
            )
    finally:
        consumer.close()


# -- access control -------------------------------------------------------------------------------

SECRETS = {"root": "root-secret", "app": "app-secret"}
ACL = {
    "users": [
        {"username": "root", "password": SECRETS["root"], "userType": "Super"},
        {"username": "app", "password": SECRETS["app"]},
    ],
    "acls": [
        {"subject": "User:app", "policies": [{"entries": [
            {"resource": ["Topic:AclT", "Group:g-acl"], "actions": ["All"]}]}]},
    ],
}  # fmt: skip


def test_only_a_super_user_changes_or_reaches_into_what_these_calls_touch(tmp_path):
    (tmp_path / "acl.json").write_text(json.dumps(ACL))
    flags = [*TEST_STORE_FLAGS, "--remoting-port", "0", "--acl", str(tmp_path / "acl.json")]
    process = BrokerProcess("broker-acl", tmp_path / "store", tmp_path / "log", flags).start()
    try:
        remoting = Remoting(process, process.remoting_address)

        def signed(user: str, ext: dict, body: bytes = b"") -> dict:
            return sign_request(ext, body, user, SECRETS[user])

        with remoting.wire() as wire:
            create_topic(wire, "AclT", 1, sign=lambda ext: signed("root", ext))
            group = json.dumps({"groupName": "g-acl", "retryMaxTimes": 2}).encode()
            calls = [
                (C.GET_BROKER_CONFIG, {}, b""),
                (C.UPDATE_BROKER_CONFIG, {}, b"brokerPermission=4"),
                (C.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, group),
                (C.DELETE_SUBSCRIPTIONGROUP, {"groupName": "g-acl"}, b""),
                (C.GET_CONSUMER_RUNNING_INFO, {"consumerGroup": "g-acl", "clientId": "c"}, b""),
                (
                    C.CONSUME_MESSAGE_DIRECTLY,
                    {"consumerGroup": "g-acl", "clientId": "c", "msgId": "7F000001" + "0" * 24},
                    b"",
                ),
                (
                    C.INVOKE_BROKER_TO_RESET_OFFSET,
                    {"topic": "AclT", "group": "g-acl", "timestamp": "0", "isForce": "true"},
                    b"",
                ),
            ]
            for code, ext, body in calls:
                answer = wire.call(code, signed("app", ext, body), body)
                refused(answer, R.NO_PERMISSION, "super")
                unsigned = wire.call(code, ext, body)
                refused(unsigned, R.NO_PERMISSION)
            # nothing changed: the permission, and no group was created
            config = wire.call(C.GET_BROKER_CONFIG, signed("root", {}))
            assert config_text.read_properties(config.body)["brokerPermission"] == "6"
            groups = wire.call(C.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, signed("root", {}))
            assert "g-acl" not in json.loads(groups.body)["subscriptionGroupTable"]
            # the super user may
            body = b"maxPullMessages=64"
            answer = wire.call(C.UPDATE_BROKER_CONFIG, signed("root", {}, body), body)
            assert answer.code == R.SUCCESS, answer.remark
    finally:
        process.clean_up()


def test_a_permission_change_reaches_the_name_servers_the_broker_registers_with(broker, tmp_path):
    """A broker registered with another's name server (--namesrv-addr): the name server's
    route for its topic says read-only soon after the change, and read-write after the
    change back (each change moves the broker's data version, or a name server would keep
    the queues it has)."""
    flags = [*TEST_STORE_FLAGS, "--remoting-port", "0", "--namesrv-addr", broker.address]
    other = BrokerProcess("broker-reg", tmp_path / "store", tmp_path / "log", flags).start()
    try:
        with Wire(other.remoting_address) as own, broker.wire() as name_server:
            create_topic(own, "AdmRegistered", 1)

            def announced() -> int | None:
                answer = name_server.call(C.GET_ROUTEINFO_BY_TOPIC, {"topic": "AdmRegistered"})
                if answer.code != R.SUCCESS:
                    return None
                return json.loads(answer.body)["queueDatas"][0]["perm"]

            eventually(lambda: announced() == 6, what="the topic registered read-write")
            assert update_config(own, "brokerPermission=4").code == R.SUCCESS
            eventually(lambda: announced() == 4, what="the name server told: read-only")
            assert update_config(own, "brokerPermission=6").code == R.SUCCESS
            eventually(lambda: announced() == 6, what="the name server told: read-write")
    finally:
        other.clean_up()
