"""Client-side offset stores: the memory table and LocalFileOffsetStore.

RemoteBrokerOffsetStore is tested against brokers in tests/integration.
"""

from __future__ import annotations

import json
import logging

import pytest

from rmq_spark.durable_json import backup_path
from rmq_spark.errors import InvalidArgumentError, StoreError
from rmq_spark.offsets.local_file import DIRECTORY_ENV, LocalFileOffsetStore, default_directory
from rmq_spark.offsets.store import UNKNOWN_OFFSET, ReadOffsetType
from rmq_spark.structs import MessageQueue

MQ0 = MessageQueue("TopicA", "broker-a", 0)
MQ1 = MessageQueue("TopicA", "broker-a", 1)
MQB = MessageQueue("TopicA", "broker-b", 0)
OTHER = MessageQueue("TopicB", "broker-a", 3)
CLIENT = "10.0.0.7@4242"


def store(tmp_path, **kwargs) -> LocalFileOffsetStore:
    return LocalFileOffsetStore(tmp_path, CLIENT, "GroupA", **kwargs)


def test_unknown_queue_reads_minus_one_everywhere(tmp_path):
    s = store(tmp_path)
    s.load()  # no file yet: empty, no error
    for read_type in ReadOffsetType:
        assert s.read_offset(MQ0, read_type) == UNKNOWN_OFFSET == -1


def test_update_is_increase_only_unless_asked(tmp_path):
    s = store(tmp_path)
    assert s.update_offset(MQ0, 10) == 10
    assert s.update_offset(MQ0, 5, increase_only=True) == 10
    assert s.read_offset(MQ0, ReadOffsetType.READ_FROM_MEMORY) == 10
    assert s.update_offset(MQ0, 12, increase_only=True) == 12
    assert s.update_offset(MQ0, 3, increase_only=False) == 3  # an explicit reset
    assert s.read_offset(MQ0, ReadOffsetType.READ_FROM_MEMORY) == 3


@pytest.mark.parametrize("bad", [-1, 1.5, True, "3", None, 2**63])
def test_update_rejects_bad_offsets(tmp_path, bad):
    with pytest.raises(InvalidArgumentError, match="offset"):
        store(tmp_path).update_offset(MQ0, bad)


def test_rejects_non_queue(tmp_path):
    with pytest.raises(InvalidArgumentError, match="MessageQueue"):
        store(tmp_path).update_offset(("TopicA", "broker-a", 0, "x"), 1)


def test_round_trip_across_instances_and_file_shape(tmp_path):
    first = store(tmp_path)
    first.update_offset(MQ0, 42)
    first.update_offset(MQ1, 17)
    first.update_offset(MQB, 5)
    first.update_offset(OTHER, 9)
    assert first.persist_all() == {MQ0: 42, MQ1: 17, MQB: 5, OTHER: 9}

    path = tmp_path / CLIENT / "GroupA" / "offsets.json"
    assert first.path == path
    assert json.loads(path.read_text()) == {
        "version": 1,
        "clientId": CLIENT,
        "group": "GroupA",
        "offsetTable": {
            "TopicA": {"broker-a": {"0": 42, "1": 17}, "broker-b": {"0": 5}},
            "TopicB": {"broker-a": {"3": 9}},
        },
    }

    second = store(tmp_path)
    assert second.read_offset(MQ0, ReadOffsetType.READ_FROM_MEMORY) == -1  # not loaded yet
    assert second.read_offset(MQ1, ReadOffsetType.READ_FROM_STORE) == 17
    assert second.read_offset(MQ1, ReadOffsetType.READ_FROM_MEMORY) == 17  # cached
    second.load()
    assert second.clone_offset_table() == {MQ0: 42, MQ1: 17, MQB: 5, OTHER: 9}
    assert second.clone_offset_table("TopicB") == {OTHER: 9}
    # another group or client id has its own file
    assert LocalFileOffsetStore(tmp_path, CLIENT, "GroupB").read_offset(MQ0) == -1
    assert LocalFileOffsetStore(tmp_path, "other", "GroupA").read_offset(MQ0) == -1


def test_memory_first_then_store(tmp_path):
    s = store(tmp_path)
    s.update_offset(MQ0, 7)
    s.persist(MQ0)
    s.update_offset(MQ0, 9)  # not persisted
    assert s.read_offset(MQ0, ReadOffsetType.MEMORY_FIRST_THEN_STORE) == 9
    assert s.read_offset(MQ0, ReadOffsetType.READ_FROM_STORE) == 7  # the store wins when asked
    s.remove_offset(MQ0)
    assert s.read_offset(MQ0, ReadOffsetType.READ_FROM_MEMORY) == -1
    assert s.read_offset(MQ0, ReadOffsetType.MEMORY_FIRST_THEN_STORE) == 7


def test_remove_forgets_in_memory_but_the_file_keeps_the_offset(tmp_path):
    s = store(tmp_path)
    s.update_offset(MQ0, 1)
    s.update_offset(MQ1, 2)
    s.persist_all()
    s.remove_offset(MQ0)
    s.remove_offset(MQ0)  # removing twice is fine
    assert s.clone_offset_table() == {MQ1: 2}
    s.update_offset(MQ1, 3)
    s.persist_all([MQ1])  # a later persist must not drop what the file had for MQ0
    fresh = store(tmp_path)
    fresh.load()
    assert fresh.clone_offset_table() == {MQ0: 1, MQ1: 3}


def test_reset_moves_the_file_offset_backwards(tmp_path):
    s = store(tmp_path)
    s.update_offset(MQ0, 9)
    s.persist_all()
    s.reset_offset(MQ0, 4)
    fresh = store(tmp_path)
    fresh.load()
    assert fresh.clone_offset_table() == {MQ0: 4}


def test_backup_keeps_previous_version(tmp_path):
    s = store(tmp_path)
    s.update_offset(MQ0, 1)
    s.persist_all()
    s.update_offset(MQ0, 2)
    s.persist_all()
    backup = json.loads(backup_path(s.path).read_text())
    assert backup["offsetTable"]["TopicA"]["broker-a"]["0"] == 1


def test_corrupt_main_falls_back_to_backup_with_warning(tmp_path, caplog):
    s = store(tmp_path)
    s.update_offset(MQ0, 1)
    s.persist_all()
    s.update_offset(MQ0, 2)
    s.persist_all()
    s.path.write_text('{"offsetTable": {"TopicA": ')  # torn write
    fresh = store(tmp_path)
    with caplog.at_level(logging.WARNING):
        fresh.load()
    assert fresh.read_offset(MQ0, ReadOffsetType.READ_FROM_MEMORY) == 1
    assert any(
        r.levelno == logging.WARNING
        and "backup" in r.getMessage()
        and str(s.path) in r.getMessage()
        for r in caplog.records
    )


@pytest.mark.parametrize(
    "document",
    [
        {"version": 1, "offsetTable": {"TopicA": {"broker-a": {"0": -5}}}},
        {"version": 1, "offsetTable": {"TopicA": {"broker-a": {"x": 5}}}},
        {"version": 1, "offsetTable": {"TopicA": {"broker-a": {"01": 5}}}},
        {"version": 1, "offsetTable": {"TopicA": {"broker-a": [5]}}},
        {"version": 1, "offsetTable": {"TopicA": 5}},
        {"version": 2, "offsetTable": {}},
        {"offsetTable": {}},
        [],
    ],
)
def test_wrong_shape_counts_as_corrupt(tmp_path, document):
    s = store(tmp_path)
    s.path.parent.mkdir(parents=True)
    s.path.write_text(json.dumps(document))
    with pytest.raises(StoreError):
        s.load()


def test_both_corrupt_raises_naming_the_files(tmp_path):
    s = store(tmp_path)
    s.update_offset(MQ0, 1)
    s.persist_all()
    s.persist_all()
    s.path.write_text("garbage")
    backup_path(s.path).write_text("")
    with pytest.raises(StoreError) as info:
        store(tmp_path).load()
    message = str(info.value)
    assert str(s.path) in message and str(backup_path(s.path)) in message
    assert "force_empty" in message


def test_both_corrupt_with_force_empty_starts_empty_and_keeps_the_files(tmp_path, caplog):
    s = store(tmp_path)
    s.update_offset(MQ0, 1)
    s.persist_all()
    s.persist_all()
    s.path.write_text("garbage")
    backup_path(s.path).write_text("garbage too")
    forced = store(tmp_path, force_empty=True)
    with caplog.at_level(logging.ERROR):
        forced.load()
    assert forced.clone_offset_table() == {}
    assert len(list(s.path.parent.glob("offsets.json*.corrupt-*"))) == 2
    assert any(r.levelno == logging.ERROR for r in caplog.records)
    forced.update_offset(MQ0, 3)
    forced.persist_all()
    again = store(tmp_path)
    again.load()
    assert again.clone_offset_table() == {MQ0: 3}


def test_default_directory(monkeypatch, tmp_path):
    monkeypatch.setenv(DIRECTORY_ENV, str(tmp_path / "custom"))
    assert default_directory() == tmp_path / "custom"
    s = LocalFileOffsetStore(None, CLIENT, "GroupA")
    assert s.path == tmp_path / "custom" / CLIENT / "GroupA" / "offsets.json"
    monkeypatch.delenv(DIRECTORY_ENV)
    assert default_directory().name == ".rocketlite_offsets"


@pytest.mark.parametrize("client_id", ["", ".", "..", "a/b", "a\\b", 7])
def test_client_id_must_be_one_path_component(tmp_path, client_id):
    with pytest.raises(InvalidArgumentError, match="client_id"):
        LocalFileOffsetStore(tmp_path, client_id, "GroupA")


def test_bad_group_rejected(tmp_path):
    with pytest.raises(InvalidArgumentError):
        LocalFileOffsetStore(tmp_path, CLIENT, "bad/group")


def test_read_type_must_be_the_enum(tmp_path):
    with pytest.raises(InvalidArgumentError, match="ReadOffsetType"):
        store(tmp_path).read_offset(MQ0, "READ_FROM_MEMORY")
