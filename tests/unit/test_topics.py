"""Topic configs and the persisted topics.json table."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from rmq_spark.durable_json import backup_path
from rmq_spark.errors import (
    AlreadyExistsError,
    CorruptDataError,
    InvalidArgumentError,
    InvalidNameError,
    NotFoundError,
    StoreError,
)
from rmq_spark.store import topics as topics_module
from rmq_spark.store.topics import MAX_QUEUES_PER_TOPIC, TopicConfig, TopicTable
from rmq_spark.structs import Permission


@pytest.fixture
def table(tmp_path: Path) -> TopicTable:
    return TopicTable.open(tmp_path)


def _reopen(table: TopicTable) -> TopicTable:
    return TopicTable.open(table.path.parent)


def test_create_uses_four_read_write_queues_by_default(table: TopicTable) -> None:
    config = table.create("TopicA")
    assert config == TopicConfig("TopicA", 4, 4, 6)
    assert config.is_readable and config.is_writable
    assert table.get("TopicA") == config


def test_created_topics_survive_a_restart_in_rocketmq_shape(table: TopicTable) -> None:
    table.create("TopicA", 8)
    table.create("TopicB", read_queues=2, write_queues=1, perm=4)

    assert _reopen(table).list() == [
        TopicConfig("TopicA", 8, 8, 6),
        TopicConfig("TopicB", 2, 1, 4),
    ]
    assert json.loads(table.path.read_text()) == {
        "topicConfigTable": {
            "TopicA": {"topicName": "TopicA", "readQueueNums": 8, "writeQueueNums": 8, "perm": 6},
            "TopicB": {"topicName": "TopicB", "readQueueNums": 2, "writeQueueNums": 1, "perm": 4},
        }
    }


def test_create_is_idempotent_for_an_identical_config(table: TopicTable) -> None:
    first = table.create("TopicA", 8)
    assert table.create("TopicA", 8) == first
    assert table.list() == [first]


def test_create_with_a_different_config_says_what_exists(table: TopicTable) -> None:
    table.create("TopicA", 8)
    with pytest.raises(AlreadyExistsError) as info:
        table.create("TopicA", 16)
    message = str(info.value)
    assert "read_queue_nums=8" in message and "read_queue_nums=16" in message
    assert "update()" in message
    assert table.get("TopicA").read_queue_nums == 8


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"queues": 0}, "queues=0"),
        ({"queues": MAX_QUEUES_PER_TOPIC + 1}, "queues=1025"),
        ({"queues": 2.0}, "queues=2.0"),
        ({"queues": True}, "queues=True"),
        ({"read_queues": -1}, "read_queue_nums=-1"),
        ({"write_queues": 5000}, "write_queue_nums=5000"),
    ],
)
def test_queue_counts_outside_the_range_are_refused(
    table: TopicTable, kwargs: dict, named: str
) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        table.create("TopicA", **kwargs)
    assert named in str(info.value)
    assert f"1..{MAX_QUEUES_PER_TOPIC}" in str(info.value)
    assert table.find("TopicA") is None


@pytest.mark.parametrize("perm", [0, 1, 3, 5, 7, 6.0, "6"])
def test_perm_must_be_2_4_or_6(table: TopicTable, perm: object) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        table.create("TopicA", perm=perm)  # type: ignore[arg-type]
    assert f"perm={perm!r}" in str(info.value)
    assert "2 (write only), 4 (read only) or 6" in str(info.value)


def test_a_permission_flag_is_stored_as_a_plain_number(table: TopicTable) -> None:
    config = table.create("TopicA", perm=Permission.READ)
    assert type(config.perm) is int and config.perm == 4
    assert json.loads(table.path.read_text())["topicConfigTable"]["TopicA"]["perm"] == 4


@pytest.mark.parametrize(
    ("perm", "readable", "writable"), [(2, False, True), (4, True, False), (6, True, True)]
)
def test_permissions(perm: int, readable: bool, writable: bool) -> None:
    config = TopicConfig("T", 1, 1, perm)
    assert (config.is_readable, config.is_writable) == (readable, writable)


@pytest.mark.parametrize("name", ["bad topic", "a/b", "a@b", "", "x" * 128])
def test_bad_names_are_refused(table: TopicTable, name: str) -> None:
    with pytest.raises(InvalidNameError):
        table.create(name)
    assert table.list() == []


def test_system_names_need_the_system_flag(table: TopicTable) -> None:
    with pytest.raises(InvalidNameError, match="reserved"):
        table.create("%RETRY%GroupA")
    assert table.create("%RETRY%GroupA", 1, system=True).name == "%RETRY%GroupA"


def test_ensure_system_topic_creates_once_with_one_queue(table: TopicTable) -> None:
    created = table.ensure_system_topic("%RETRY%GroupA")
    assert created == TopicConfig("%RETRY%GroupA", 1, 1, 6)
    table.update("%RETRY%GroupA", perm=4)
    # An existing topic is kept as is: an operator's change must not be undone.
    assert table.ensure_system_topic("%RETRY%GroupA").perm == 4
    assert table.ensure_system_topic("%DLQ%GroupA", perm=2).perm == 2
    assert [c.name for c in _reopen(table).list()] == ["%DLQ%GroupA", "%RETRY%GroupA"]


def test_ensure_system_topic_refuses_ordinary_names(table: TopicTable) -> None:
    with pytest.raises(InvalidNameError, match="'TopicA' is not a system topic"):
        table.ensure_system_topic("TopicA")


def test_update_grows_and_shrinks_queues_and_changes_perm(table: TopicTable) -> None:
    table.create("TopicA", 8)
    assert table.update("TopicA", queues=16) == TopicConfig("TopicA", 16, 16, 6)
    # Shrinking in two steps: writers first, readers once drained.
    assert table.update("TopicA", write_queues=4) == TopicConfig("TopicA", 16, 4, 6)
    assert table.update("TopicA", read_queues=4, perm=4) == TopicConfig("TopicA", 4, 4, 4)
    assert _reopen(table).get("TopicA") == TopicConfig("TopicA", 4, 4, 4)


def test_update_validates_like_create(table: TopicTable) -> None:
    table.create("TopicA")
    with pytest.raises(InvalidArgumentError, match="write_queue_nums=0"):
        table.update("TopicA", write_queues=0)
    with pytest.raises(InvalidArgumentError, match="perm=1"):
        table.update("TopicA", perm=1)
    assert table.get("TopicA") == TopicConfig("TopicA", 4, 4, 6)


def test_update_of_a_missing_topic_is_not_found(table: TopicTable) -> None:
    with pytest.raises(NotFoundError, match="'Nope'"):
        table.update("Nope", queues=2)


def test_delete_removes_the_topic_for_good(table: TopicTable) -> None:
    table.create("TopicA")
    table.create("TopicB")
    assert table.delete("TopicA") == TopicConfig("TopicA", 4, 4, 6)
    assert table.find("TopicA") is None
    assert [c.name for c in _reopen(table).list()] == ["TopicB"]
    with pytest.raises(NotFoundError):
        table.delete("TopicA")


def test_get_of_a_missing_topic_says_how_to_create_it(table: TopicTable) -> None:
    with pytest.raises(NotFoundError) as info:
        table.get("TopicA")
    assert "'TopicA'" in str(info.value) and "create" in str(info.value)
    assert table.find("TopicA") is None


def test_get_with_an_invalid_name_reports_the_name_problem(table: TopicTable) -> None:
    with pytest.raises(InvalidNameError, match="'a b'"):
        table.get("a b")


def test_list_is_sorted_by_name(table: TopicTable) -> None:
    for name in ("b", "C", "a"):
        table.create(name, 1)
    assert [c.name for c in table.list()] == ["C", "a", "b"]


def test_a_failed_write_leaves_the_table_unchanged(
    table: TopicTable, monkeypatch: pytest.MonkeyPatch
) -> None:
    table.create("TopicA")

    def full_disk(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(topics_module, "write_json_atomic", full_disk)
    with pytest.raises(OSError, match="No space"):
        table.create("TopicB")
    with pytest.raises(OSError, match="No space"):
        table.delete("TopicA")
    assert [c.name for c in table.list()] == ["TopicA"]


def test_to_json_and_from_json_round_trip() -> None:
    config = TopicConfig("%DLQ%G", 1, 1, 2)
    assert TopicConfig.from_json(config.to_json()) == config


def test_from_json_ignores_other_rocketmq_fields() -> None:
    entry = {
        "topicName": "TopicTest",
        "readQueueNums": 4,
        "writeQueueNums": 4,
        "perm": 6,
        "topicFilterType": "SINGLE_TAG",
        "topicSysFlag": 0,
        "order": False,
    }
    assert TopicConfig.from_json(entry) == TopicConfig("TopicTest", 4, 4, 6)


@pytest.mark.parametrize(
    ("entry", "named"),
    [
        ({"topicName": "T", "readQueueNums": 4, "perm": 6}, "writeQueueNums"),
        ({"topicName": "T", "readQueueNums": 4, "writeQueueNums": 0, "perm": 6}, "=0"),
        ({"topicName": "T", "readQueueNums": 4, "writeQueueNums": 4, "perm": 9}, "perm=9"),
        ({"topicName": "a b", "readQueueNums": 1, "writeQueueNums": 1, "perm": 6}, "'a b'"),
        ([1, 2], "[1, 2]"),
    ],
)
def test_from_json_rejects_bad_entries(entry: object, named: str) -> None:
    with pytest.raises(CorruptDataError) as info:
        TopicConfig.from_json(entry)
    assert named in str(info.value)


def test_open_reads_a_rocketmq_topics_file(tmp_path: Path) -> None:
    (tmp_path / "topics.json").write_text(
        json.dumps(
            {
                "dataVersion": {"counter": 3, "timestamp": 1700000000000},
                "topicConfigTable": {
                    "TopicTest": {
                        "topicName": "TopicTest",
                        "readQueueNums": 4,
                        "writeQueueNums": 4,
                        "perm": 6,
                        "topicFilterType": "SINGLE_TAG",
                        "topicSysFlag": 0,
                        "order": False,
                    }
                },
            }
        )
    )
    assert TopicTable.open(tmp_path).get("TopicTest") == TopicConfig("TopicTest", 4, 4, 6)


@pytest.mark.parametrize(
    "damage",
    [
        b'{"topicConfigTable": {"TopicA": {"topicName"',
        b"\x00" * 32,
        b'{"topicConfigTable": {"TopicA": {"topicName": "Other", "readQueueNums": 1, '
        b'"writeQueueNums": 1, "perm": 6}}}',
    ],
)
def test_damaged_main_file_falls_back_to_backup_and_is_repaired(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: bytes
) -> None:
    table = TopicTable.open(tmp_path)
    table.create("TopicA")
    table.create("TopicB")
    table.path.write_bytes(damage)

    with caplog.at_level(logging.WARNING, logger="rmq_spark.store"):
        reopened = TopicTable.open(tmp_path)

    assert [c.name for c in reopened.list()] == ["TopicA"]  # the backup is one change older
    assert str(table.path) in caplog.text
    assert json.loads(table.path.read_text())["topicConfigTable"].keys() == {"TopicA"}


def test_both_files_unreadable_refuses_to_start_unless_forced(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    table = TopicTable.open(tmp_path)
    table.create("TopicA")
    table.create("TopicB")
    table.path.write_text("{")
    backup_path(table.path).write_text("{")

    with pytest.raises(StoreError) as info:
        TopicTable.open(tmp_path)
    assert str(table.path) in str(info.value)
    assert str(backup_path(table.path)) in str(info.value)

    with caplog.at_level(logging.ERROR, logger="rmq_spark.store"):
        forced = TopicTable.open(tmp_path, force_empty=True)
    assert forced.list() == []
    assert "force_empty" in caplog.text
    assert len(list(tmp_path.glob("topics.json*.corrupt-*"))) == 2
    assert TopicTable.open(tmp_path).list() == []


def test_rocketmqs_inherit_and_priority_bits_are_kept_apart_and_written_back() -> None:
    entry = {"topicName": "TBW102", "readQueueNums": 8, "writeQueueNums": 8, "perm": 7}
    config = TopicConfig.from_json(entry)
    assert (config.perm, config.rocketmq_bits, config.is_readable, config.is_writable) == (
        6, 1, True, True,
    )  # fmt: skip
    assert config.to_json()["perm"] == 7
    read_only = TopicConfig.from_json({**entry, "perm": 4 | 8})
    assert (read_only.perm, read_only.is_writable, read_only.to_json()["perm"]) == (4, False, 12)
