"""Durable JSON files: atomic replace, .bak fallback, and the crash windows in between."""

from __future__ import annotations

import json
import logging
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rmq_spark.durable_json import (
    backup_path,
    read_json_with_backup,
    set_aside,
    write_json_atomic,
)
from rmq_spark.errors import StoreError
from tests.support.eventually import eventually


def _require_version(obj: object) -> None:
    if not (isinstance(obj, dict) and isinstance(obj.get("version"), int)):
        raise ValueError(f"expected {{'version': int}}, got {obj!r}")


def _state(path: Path) -> dict[str, object]:
    """What a reader finds in each file: the parsed document, or None if not a valid one."""
    found: dict[str, object] = {}
    for label, file in (("main", path), ("bak", backup_path(path))):
        try:
            found[label] = json.loads(file.read_text())
        except (OSError, ValueError):
            found[label] = None
    return found


def test_write_then_read_returns_the_document_from_main(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    write_json_atomic(path, {"b": 1, "a": [1, 2]})
    assert read_json_with_backup(path) == ({"b": 1, "a": [1, 2]}, "main")
    # Key order is the caller's: stable output is the caller's job (it sorts).
    assert path.read_text().index('"b"') < path.read_text().index('"a"')


def test_first_write_has_no_backup_and_second_keeps_the_previous_version(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    write_json_atomic(path, {"version": 1})
    assert not backup_path(path).exists()
    write_json_atomic(path, {"version": 2})
    assert _state(path) == {"main": {"version": 2}, "bak": {"version": 1}}


def test_no_files_reads_as_none(tmp_path: Path) -> None:
    assert read_json_with_backup(tmp_path / "absent.json") == (None, "none")


def test_temp_files_do_not_pile_up(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    for version in range(5):
        write_json_atomic(path, {"version": version})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.json", "t.json.bak"]


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (b'{"version": 2', "Expecting"),  # truncated mid-write by something else
        (b"", "empty"),
        (b"\x00\x00\x00\x00", "Expecting value"),  # zero-filled block after an OS crash
        (b"\xff\xfe garbage", "UnicodeDecodeError"),
        (b'{"version": "two"}', "expected {'version': int}"),  # JSON, but the wrong shape
        (b'{"version": NaN}', "NaN is not valid JSON"),
    ],
)
def test_damaged_main_falls_back_to_backup_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: bytes, reason: str
) -> None:
    path = tmp_path / "t.json"
    write_json_atomic(path, {"version": 1})
    write_json_atomic(path, {"version": 2})
    path.write_bytes(damage)

    with caplog.at_level(logging.WARNING, logger="rmq_spark.store"):
        obj, source = read_json_with_backup(path, validate=_require_version)

    assert (obj, source) == ({"version": 1}, "backup")
    [record] = caplog.records
    assert record.name == "rmq_spark.store"
    assert str(path) in record.getMessage()
    assert reason in record.getMessage()


def test_missing_main_falls_back_to_backup(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    write_json_atomic(path, {"version": 1})
    write_json_atomic(path, {"version": 2})
    path.unlink()
    assert read_json_with_backup(path) == ({"version": 1}, "backup")


def test_both_corrupt_raises_naming_both_files_and_the_way_out(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text('{"version": ')
    backup_path(path).write_text("not json")

    with pytest.raises(StoreError) as info:
        read_json_with_backup(path)

    message = str(info.value)
    assert str(path) in message and str(backup_path(path)) in message
    assert "restore" in message and "force_empty" in message


def test_corrupt_main_without_backup_raises(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text("{")
    with pytest.raises(StoreError, match="missing"):
        read_json_with_backup(path)


def test_writing_over_a_corrupt_main_keeps_the_good_backup(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "t.json"
    write_json_atomic(path, {"version": 1})
    write_json_atomic(path, {"version": 2})
    path.write_text("garbage")

    with caplog.at_level(logging.WARNING, logger="rmq_spark.store"):
        write_json_atomic(path, {"version": 3}, validate=_require_version)

    # The garbage must not replace version 1, which was the only good copy left.
    assert _state(path) == {"main": {"version": 3}, "bak": {"version": 1}}
    assert "keeping the existing backup" in caplog.text


@pytest.mark.parametrize("failing_call", [1, 2])
def test_crash_at_either_rename_leaves_a_complete_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing_call: int
) -> None:
    path = tmp_path / "t.json"
    write_json_atomic(path, {"version": 1})
    write_json_atomic(path, {"version": 2})
    real_replace = os.replace
    calls = []

    def crashing_replace(src: str, dst: str) -> None:
        calls.append(dst)
        if len(calls) == failing_call:
            raise OSError("simulated crash")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", crashing_replace)
    with pytest.raises(OSError, match="simulated crash"):
        write_json_atomic(path, {"version": 3})
    monkeypatch.undo()

    # Call 1 rotates the backup, call 2 installs the new main; either way the old main stands.
    assert _state(path)["main"] == {"version": 2}
    assert _state(path)["bak"] in ({"version": 1}, {"version": 2})
    assert read_json_with_backup(path) == ({"version": 2}, "main")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.json", "t.json.bak"]


def test_a_valid_version_exists_at_every_instant(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "t.json"
    real_replace = os.replace
    seen = []

    def checking_replace(src: str, dst: str) -> None:
        before = _state(path)
        real_replace(src, dst)
        after = _state(path)
        seen.append((before, after))

    monkeypatch.setattr(os, "replace", checking_replace)
    write_json_atomic(path, {"version": 0})
    for version in range(1, 6):
        write_json_atomic(path, {"version": version})

    assert len(seen) == 11  # one rename for the first write, two for each later one
    for before, after in seen[1:]:
        assert before["main"] is not None and after["main"] is not None


def test_data_is_fsynced_before_rename_and_directory_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "t.json"
    write_json_atomic(path, {"version": 1})
    events: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        events.append("fsync-dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "fsync-file")
        real_fsync(fd)

    def replace(src: str, dst: str) -> None:
        events.append("replace")
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    write_json_atomic(path, {"version": 2})

    assert events == ["fsync-file", "replace", "fsync-file", "replace", "fsync-dir"]


def test_nan_is_refused_on_write(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        write_json_atomic(tmp_path / "t.json", {"x": float("nan")})
    assert not (tmp_path / "t.json").exists()


def test_set_aside_moves_both_files_and_keeps_their_bytes(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text("{broken")
    backup_path(path).write_text("{also broken")

    moved = set_aside(path)

    assert not path.exists() and not backup_path(path).exists()
    assert sorted(p.read_text() for p in moved) == ["{also broken", "{broken"]
    assert all(".corrupt-" in p.name for p in moved)
    assert read_json_with_backup(path) == (None, "none")


_WRITER = """
import sys
from rmq_spark.durable_json import write_json_atomic
version = 0
while True:
    version += 1
    write_json_atomic(sys.argv[1], {"version": version, "pad": "x" * 20000})
"""


@pytest.mark.slow
def test_killed_writer_always_leaves_a_readable_main_file(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    for attempt in range(5):
        child = subprocess.Popen([sys.executable, "-c", _WRITER, str(path)])
        eventually(backup_path(path).exists, what="the first backup", interval=0.01)
        time.sleep(0.01 * attempt)  # kill at a different point of the write loop each time
        child.send_signal(signal.SIGKILL)
        child.wait()
        obj, source = read_json_with_backup(path)
        # A process crash loses nothing already renamed, so main must always be whole.
        assert source == "main"
        assert obj["version"] >= 1


def test_fastjsons_bare_number_keys_are_read(tmp_path):
    # Apache RocketMQ's broker writes consumerOffset.json with fastjson: {0:213664} is not JSON
    path = tmp_path / "consumerOffset.json"
    path.write_text('{"offsetTable":{"T@g":{0:213664,1:5}}}')
    obj, source = read_json_with_backup(path)
    assert (obj, source) == ({"offsetTable": {"T@g": {0: 213664, 1: 5}}}, "main")
    path.write_text('{"offsetTable":{"T@g":{0:}}}')  # broken either way: the JSON error
    with pytest.raises(StoreError, match=r"not valid|Expecting value"):
        read_json_with_backup(path)
