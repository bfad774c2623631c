"""The gRPC protocol: generated code in sync with proto/, and the wire shapes others rely on."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import descriptor_pb2

from rmq_spark import structs
from rmq_spark.wire.proto_gen.rocketlite.v1 import (
    admin_pb2,
    admin_pb2_grpc,
    common_pb2,
    groups_pb2,
    groups_pb2_grpc,
    messaging_pb2,
    messaging_pb2_grpc,
    offsets_pb2,
    offsets_pb2_grpc,
)

ROOT = Path(__file__).resolve().parents[2]
GEN_SCRIPT = ROOT / "scripts" / "gen_proto.py"
PROTO_DIR = ROOT / "proto"

EXPECTED_RPCS = {
    "MessagingService": (
        messaging_pb2,
        messaging_pb2_grpc,
        {
            "SendMessages",
            "PullMessages",
            "QueryOffsets",
            "ViewMessage",
            "QueryMessagesByKey",
            "ConsumerSendBack",
            "EndSinkBatch",
        },
    ),
    "OffsetService": (
        offsets_pb2,
        offsets_pb2_grpc,
        {
            "UpdateConsumerOffsets",
            "QueryConsumerOffsets",
            "GetConsumerProgress",
        },
    ),
    "GroupService": (
        groups_pb2,
        groups_pb2_grpc,
        {
            "Heartbeat",
            "Unregister",
            "GetConsumerList",
            "WatchConsumerChanges",
            "LockQueues",
            "UnlockQueues",
        },
    ),
    "AdminService": (
        admin_pb2,
        admin_pb2_grpc,
        {
            "CreateTopic",
            "UpdateTopic",
            "DeleteTopic",
            "GetTopicRoute",
            "ListTopics",
            "GetBrokerInfo",
            "CreateUser",
            "DeleteUser",
            "ListUsers",
            "GrantAcl",
            "RevokeAcl",
            "ListAcls",
        },
    ),
}
SERVER_STREAMING = {"WatchConsumerChanges"}


def test_generated_code_matches_proto_files():
    result = subprocess.run(
        [sys.executable, str(GEN_SCRIPT), "--check"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr + result.stdout


def test_pull_response_carries_1_mib_of_records_and_a_raw_little_endian_index():
    rng = np.random.default_rng(7)
    sizes = rng.integers(60, 150, size=10_000)
    sizes[-1] += (1 << 20) - int(sizes.sum())  # the records fill exactly 1 MiB
    first_offset = 5_000_000
    queue_offsets = first_offset + np.arange(10_000) * 2  # a tag filter left gaps
    records = rng.integers(0, 256, size=1 << 20, dtype=np.uint8).tobytes()
    sent = messaging_pb2.PullMessagesResponse(
        status=messaging_pb2.PULL_STATUS_FOUND,
        next_begin_offset=int(queue_offsets[-1]) + 1,
        min_offset=0,
        max_offset=first_offset + 50_000,
        records=records,
        record_sizes_i32le=sizes.astype("<i4").tobytes(),
        queue_offsets_i64le=queue_offsets.astype("<i8").tobytes(),
    )

    wire = sent.SerializeToString()
    received = messaging_pb2.PullMessagesResponse.FromString(wire)

    assert received == sent
    assert received.records == records
    got_sizes = np.frombuffer(received.record_sizes_i32le, dtype="<i4")
    np.testing.assert_array_equal(got_sizes, sizes)
    got_offsets = np.frombuffer(received.queue_offsets_i64le, dtype="<i8")
    np.testing.assert_array_equal(got_offsets, queue_offsets)
    assert int(got_sizes.sum()) == len(received.records)
    # Raw integers: exactly 4 + 8 bytes a record, plus a few tags and lengths.
    index_bytes = len(wire) - len(records)
    assert 10_000 * (4 + 8) <= index_bytes < 10_000 * (4 + 8) + 64


def test_the_old_packed_index_fields_stay_reserved():
    # 6 and 7 held the index as packed varints: a peer of that time would misread them.
    declared = descriptor_pb2.DescriptorProto()
    messaging_pb2.PullMessagesResponse.DESCRIPTOR.CopyToProto(declared)
    reserved = {n for r in declared.reserved_range for n in range(r.start, r.end)}
    assert reserved == {6, 7}
    assert set(declared.reserved_name) == {"record_sizes", "queue_offsets"}
    assert not {f.number for f in declared.field} & reserved


@pytest.mark.parametrize("service_name", sorted(EXPECTED_RPCS))
def test_services_expose_the_expected_rpcs(service_name):
    pb2, pb2_grpc, expected = EXPECTED_RPCS[service_name]
    service = pb2.DESCRIPTOR.services_by_name[service_name]

    assert service.full_name == f"rocketlite.v1.{service_name}"
    assert set(service.methods_by_name) == expected
    for method in service.methods:
        assert not method.client_streaming, method.name
        assert method.server_streaming == (method.name in SERVER_STREAMING), method.name
    assert hasattr(pb2_grpc, f"{service_name}Stub")
    assert hasattr(pb2_grpc, f"add_{service_name}Servicer_to_server")


def test_wire_types_map_one_to_one_onto_structs():
    mq_fields = [f.name for f in common_pb2.MessageQueue.DESCRIPTOR.fields]
    assert mq_fields == list(structs.MessageQueue._fields)
    for member in structs.Permission:
        assert common_pb2.Permission.Value(f"PERMISSION_{member.name}") == member.value
    wire_statuses = {
        name.removeprefix("PULL_STATUS_")
        for name in messaging_pb2.PullStatus.keys()  # noqa: SIM118 (an enum wrapper)
        if name != "PULL_STATUS_UNSPECIFIED"
    }
    assert wire_statuses == {status.name for status in structs.PullStatus}


def _compiled_with_comments(tmp_path: Path) -> descriptor_pb2.FileDescriptorSet:
    from grpc_tools import protoc

    out = tmp_path / "descriptors.pb"
    files = sorted(str(p) for p in PROTO_DIR.rglob("*.proto"))
    args = ["protoc", f"-I{PROTO_DIR}", "--include_source_info", f"-o{out}", *files]
    assert protoc.main(args) == 0
    return descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())


def _commented_paths(file: descriptor_pb2.FileDescriptorProto) -> set[tuple[int, ...]]:
    return {
        tuple(loc.path)
        for loc in file.source_code_info.location
        if loc.leading_comments.strip() or loc.trailing_comments.strip()
    }


def _declarations(file: descriptor_pb2.FileDescriptorProto):
    """(source path, name, field or None) of every field, enum value, service and rpc."""

    def message(msg, path):
        for i, field in enumerate(msg.field):
            yield (*path, 2, i), f"{msg.name}.{field.name}", field
        for i, nested in enumerate(msg.nested_type):
            if not nested.options.map_entry:  # synthetic key/value type of a map field
                yield from message(nested, (*path, 3, i))
        for i, enum in enumerate(msg.enum_type):
            yield from enum_values(enum, (*path, 4, i))

    def enum_values(enum, path):
        for i, value in enumerate(enum.value):
            yield (*path, 2, i), f"{enum.name}.{value.name}", None

    # Field numbers of FileDescriptorProto: message_type 4, enum_type 5, service 6.
    for i, msg in enumerate(file.message_type):
        yield from message(msg, (4, i))
    for i, enum in enumerate(file.enum_type):
        yield from enum_values(enum, (5, i))
    for i, service in enumerate(file.service):
        yield (6, i), service.name, None
        for j, method in enumerate(service.method):
            yield (6, i, 2, j), f"{service.name}.{method.name}", None


_TIME_WORDS = re.compile(r"timeout|timestamp|lease|interval|delay|duration")


def _is_unitless_time(name: str) -> bool:
    # `timestamp_offset` is a queue offset, not a time.
    return bool(_TIME_WORDS.search(name)) and not name.endswith(("_ms", "_offset"))


def test_every_declaration_is_commented_and_times_carry_units(tmp_path):
    int64 = descriptor_pb2.FieldDescriptorProto.TYPE_INT64
    uncommented, unitless = [], []
    for file in _compiled_with_comments(tmp_path).file:
        commented = _commented_paths(file)
        for path, name, field in _declarations(file):
            if path not in commented:
                uncommented.append(f"{file.name}: {name}")
            if field is not None and field.type == int64 and _is_unitless_time(field.name):
                unitless.append(f"{file.name}: {name}")
    assert uncommented == [], "add a comment to each of these in proto/"
    assert unitless == [], "times and durations are int64 milliseconds named *_ms"
