"""DedupWindow: membership, LRU eviction, the journal across reopen, compaction, bad files."""

from __future__ import annotations

import errno
import logging
import os
import tempfile
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmq_spark.client.dedup import DedupWindow
from rmq_spark.errors import InvalidArgumentError, RocketliteError

IDS = [f"{i:032X}" for i in range(8)]  # UNIQ_KEY-shaped ids


def journal_lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def members(window: DedupWindow, keys: list[str]) -> list[str]:
    return [key for key in keys if key in window]


# -- membership and eviction ---------------------------------------------------------------


def test_marked_ids_are_duplicates_and_others_are_not(tmp_path):
    with DedupWindow(tmp_path / "d.journal") as window:
        window.mark_consumed(IDS[0])
        window.mark_consumed([IDS[1], IDS[2]])
        assert IDS[0] in window
        assert window.is_duplicate(IDS[1])
        assert window.is_duplicate(IDS[2])
        assert not window.is_duplicate(IDS[3])
        assert IDS[3] not in window
        assert len(window) == 3


def test_oldest_id_is_evicted_at_capacity(tmp_path):
    with DedupWindow(tmp_path / "d.journal", capacity=3) as window:
        for key in "abcd":
            window.mark_consumed(key)
        assert "a" not in window
        assert members(window, list("bcd")) == ["b", "c", "d"]
        assert len(window) == 3


def test_remarking_an_id_refreshes_it_as_newest(tmp_path):
    with DedupWindow(tmp_path / "d.journal", capacity=3) as window:
        window.mark_consumed(["a", "b", "c"])
        window.mark_consumed("a")  # a is now newest, b the oldest
        window.mark_consumed("d")
        assert members(window, list("abcd")) == ["a", "c", "d"]


def test_filter_new_reports_repeats_within_one_call_and_marks_nothing(tmp_path):
    with DedupWindow(tmp_path / "d.journal") as window:
        window.mark_consumed("old")
        assert window.filter_new(["x", "old", "y", "x", "y", "z"]) == [
            True,
            False,
            True,
            False,
            False,
            True,
        ]
        assert window.filter_new(iter(["x"])) == [True]  # the previous call marked nothing
        assert window.filter_new([]) == []
        assert len(window) == 1


def test_memory_only_window_works_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with DedupWindow(None, capacity=2) as window:
        window.mark_consumed(["a", "b", "c"])
        window.flush()
        assert members(window, list("abc")) == ["b", "c"]
        assert window.filter_new(["a", "b"]) == [True, False]
    assert list(tmp_path.iterdir()) == []


# -- persistence -----------------------------------------------------------------------------


def test_reopen_gives_the_same_answers(tmp_path):
    path = tmp_path / "d.journal"
    with DedupWindow(path, capacity=4) as window:
        for key in ["a", "b", "c", "a", "d", "e"]:
            window.mark_consumed(key)
        before = [key in window for key in "abcdef"]
    with DedupWindow(path, capacity=4) as reopened:
        assert (
            [key in reopened for key in "abcdef"]
            == before
            == [
                True,
                False,
                True,
                True,
                True,
                False,
            ]
        )
        reopened.mark_consumed("f")  # the order survived too: c is now the oldest
        assert members(reopened, list("acdef")) == ["a", "d", "e", "f"]


def test_mark_is_in_the_file_before_it_returns(tmp_path):
    path = tmp_path / "d.journal"
    window = DedupWindow(path)
    window.mark_consumed([IDS[0], IDS[1]])
    assert journal_lines(path) == [IDS[0], IDS[1]]
    with DedupWindow(path, fsync=False) as other:  # e.g. a new process after a crash
        assert IDS[1] in other
    window.close()


def test_parent_directories_are_created(tmp_path):
    path = tmp_path / "a" / "b" / "d.journal"
    with DedupWindow(path) as window:
        window.mark_consumed("x")
    assert journal_lines(path) == ["x"]


def test_journal_is_compacted_and_stays_bounded(tmp_path):
    path = tmp_path / "d.journal"
    keys = [f"{i:032X}" for i in range(1000)]
    longest = 0
    with DedupWindow(path, capacity=10, fsync=False) as window:
        for key in keys:
            window.mark_consumed(key)
            longest = max(longest, len(journal_lines(path)))
    assert longest <= 20
    assert not Path(str(path) + ".tmp").exists()
    with DedupWindow(path, capacity=10) as reopened:
        assert len(reopened) == 10
        assert members(reopened, keys) == keys[-10:]


def test_a_batch_larger_than_the_journal_limit_is_kept(tmp_path):
    path = tmp_path / "d.journal"
    keys = [f"k{i}" for i in range(50)]
    with DedupWindow(path, capacity=10) as window:
        window.mark_consumed(keys)
        assert members(window, keys) == keys[-10:]
    assert journal_lines(path) == keys[-10:]


def test_flush_rewrites_the_journal_to_the_window(tmp_path):
    path = tmp_path / "d.journal"
    with DedupWindow(path, capacity=3) as window:
        for key in ["a", "b", "a", "c", "d"]:
            window.mark_consumed(key)
        assert len(journal_lines(path)) == 5
        window.flush()
        assert journal_lines(path) == ["a", "c", "d"]


def test_reopen_with_smaller_capacity_keeps_the_newest(tmp_path):
    path = tmp_path / "d.journal"
    with DedupWindow(path, capacity=100) as window:
        window.mark_consumed([f"k{i}" for i in range(30)])
    with DedupWindow(path, capacity=5) as smaller:
        assert members(smaller, [f"k{i}" for i in range(30)]) == [f"k{i}" for i in range(25, 30)]
    assert len(journal_lines(path)) <= 10


def test_leftover_tmp_file_of_an_interrupted_compaction_is_ignored(tmp_path):
    path = tmp_path / "d.journal"
    path.write_text("a\nb\n", encoding="utf-8")
    tmp = Path(str(path) + ".tmp")
    tmp.write_text("zzz\n", encoding="utf-8")
    with DedupWindow(path) as window:
        assert members(window, ["a", "b", "zzz"]) == ["a", "b"]
    assert not tmp.exists()


# -- damaged files ---------------------------------------------------------------------------


def test_torn_last_line_is_skipped_with_a_warning(tmp_path, caplog):
    path = tmp_path / "d.journal"
    path.write_bytes(f"{IDS[0]}\n{IDS[1]}\n{IDS[2][:7]}".encode())
    with caplog.at_level(logging.WARNING, logger="rmq_spark.client"):
        window = DedupWindow(path)
    assert members(window, IDS) == [IDS[0], IDS[1]]
    assert IDS[2][:7] not in window
    assert str(path) in caplog.text and "skipped 1 " in caplog.text
    # The next id is not glued onto the torn fragment.
    window.mark_consumed(IDS[3])
    window.close()
    assert journal_lines(path) == [IDS[0], IDS[1], IDS[3]]
    with DedupWindow(path) as reopened:
        assert members(reopened, IDS) == [IDS[0], IDS[1], IDS[3]]


def test_garbage_binary_file_keeps_the_readable_ids(tmp_path, caplog):
    path = tmp_path / "d.journal"
    garbage = b"\xff\xfe\x00\x81\n\r\n\n\xc3\x28junk\n"
    path.write_bytes(f"{IDS[0]}\n".encode() + garbage + f"{IDS[1]}\n".encode() + b"\x9f\x00")
    with caplog.at_level(logging.WARNING, logger="rmq_spark.client"):
        window = DedupWindow(path, capacity=10)
    with window:
        assert members(window, IDS) == [IDS[0], IDS[1]]
        assert len(window) == 2
        assert str(path) in caplog.text and "skipped 5 " in caplog.text
        window.mark_consumed(IDS[2])
    with DedupWindow(path, capacity=10) as reopened:
        assert members(reopened, IDS) == [IDS[0], IDS[1], IDS[2]]


def test_a_clean_journal_logs_no_warning(tmp_path, caplog):
    path = tmp_path / "d.journal"
    path.write_text("a\nb\n", encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="rmq_spark.client"), DedupWindow(path):
        pass
    assert caplog.records == []


def test_failed_append_leaves_no_fragment_for_later_marks(tmp_path, monkeypatch):
    path = tmp_path / "d.journal"
    real_write = os.write

    def disk_full_midway(fd, data):
        real_write(fd, bytes(data[:5]))  # a torn write, then the error
        raise OSError(errno.ENOSPC, "No space left on device")

    with DedupWindow(path) as window:
        window.mark_consumed(IDS[0])
        monkeypatch.setattr(os, "write", disk_full_midway)
        with pytest.raises(OSError, match="No space"):
            window.mark_consumed(IDS[1])
        monkeypatch.setattr(os, "write", real_write)
        assert IDS[1] not in window
        window.mark_consumed(IDS[2])
    assert journal_lines(path) == [IDS[0], IDS[2]]
    with DedupWindow(path) as reopened:
        assert members(reopened, IDS) == [IDS[0], IDS[2]]


# -- errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [123, None, "", "ab\ncd", "ab\rcd", "\ud800"])
def test_bad_keys_are_refused_naming_the_key(tmp_path, bad):
    with DedupWindow(tmp_path / "d.journal") as window:
        for call in (
            lambda: window.mark_consumed(bad),
            lambda: window.mark_consumed(["ok", bad]),
            lambda: window.is_duplicate(bad),
            lambda: bad in window,
            lambda: window.filter_new(["ok", bad]),
        ):
            with pytest.raises(InvalidArgumentError) as info:
                call()
            assert repr(bad) in str(info.value)
            assert "non-empty str" in str(info.value)
        assert "ok" not in window  # a batch with a bad key marks nothing
    assert journal_lines(tmp_path / "d.journal") == []


def test_bytes_and_a_bare_str_batch_are_refused(tmp_path):
    with DedupWindow(None) as window:
        with pytest.raises(InvalidArgumentError, match="b'abc'"):
            window.mark_consumed(b"abc")  # type: ignore[arg-type]
        with pytest.raises(InvalidArgumentError, match=r"'abc'.*wrap it in a list"):
            window.filter_new("abc")


@pytest.mark.parametrize("capacity", [0, -1])
def test_capacity_below_one_is_refused(tmp_path, capacity):
    with pytest.raises(InvalidArgumentError, match=f"capacity.*{capacity}"):
        DedupWindow(tmp_path / "d.journal", capacity=capacity)


def test_closed_window_refuses_every_call(tmp_path):
    window = DedupWindow(tmp_path / "d.journal")
    window.mark_consumed("a")
    window.close()
    window.close()  # idempotent
    for call in (
        lambda: "a" in window,
        lambda: len(window),
        lambda: window.is_duplicate("a"),
        lambda: window.filter_new(["a"]),
        lambda: window.mark_consumed("b"),
        window.flush,
    ):
        with pytest.raises(RocketliteError, match="closed"):
            call()
    assert journal_lines(tmp_path / "d.journal") == ["a"]


def test_context_manager_closes(tmp_path):
    with DedupWindow(tmp_path / "d.journal") as window:
        window.mark_consumed("a")
    with pytest.raises(RocketliteError, match="closed"):
        window.mark_consumed("b")


def test_concurrent_marks_are_all_kept(tmp_path):
    path = tmp_path / "d.journal"
    per_thread = 200
    with DedupWindow(path, capacity=10_000, fsync=False) as window:

        def mark(prefix: str) -> None:
            for i in range(per_thread):
                window.mark_consumed(f"{prefix}-{i}")

        threads = [threading.Thread(target=mark, args=(f"t{n}",)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(window) == 4 * per_thread
    lines = journal_lines(path)
    assert len(lines) == len(set(lines)) == 4 * per_thread
    with DedupWindow(path, capacity=10_000) as reopened:
        assert len(reopened) == 4 * per_thread


# -- against a reference model ---------------------------------------------------------------


class ModelWindow:
    """The specification as a list: oldest first, re-marking moves to the end."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.keys: list[str] = []

    def mark(self, keys: list[str]) -> None:
        for key in keys:
            if key in self.keys:
                self.keys.remove(key)
            self.keys.append(key)
            del self.keys[: max(0, len(self.keys) - self.capacity)]

    def filter_new(self, keys: list[str]) -> list[bool]:
        seen: set[str] = set()
        answers = []
        for key in keys:
            answers.append(key not in self.keys and key not in seen)
            seen.add(key)
        return answers


KEYS = st.sampled_from(list("abcdefg"))
OPERATIONS = st.lists(
    st.one_of(
        st.tuples(st.just("mark"), st.lists(KEYS, max_size=4)),
        st.tuples(st.just("mark1"), KEYS),
        st.tuples(st.just("check"), st.lists(KEYS, max_size=4)),
        st.tuples(st.just("flush"), st.none()),
        st.tuples(st.just("reopen"), st.none()),
    ),
    max_size=25,
)


@settings(max_examples=75, deadline=None)
@given(capacity=st.integers(1, 5), operations=OPERATIONS)
def test_window_matches_the_reference_model(capacity, operations):
    model = ModelWindow(capacity)
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "d.journal"
        window = DedupWindow(path, capacity=capacity, fsync=False)
        try:
            for op, arg in operations:
                if op == "mark":
                    window.mark_consumed(arg)
                    model.mark(arg)
                elif op == "mark1":
                    window.mark_consumed(arg)
                    model.mark([arg])
                elif op == "check":
                    assert window.filter_new(arg) == model.filter_new(arg)
                elif op == "flush":
                    window.flush()
                else:
                    window.close()
                    window = DedupWindow(path, capacity=capacity, fsync=False)
                assert members(window, list("abcdefg")) == sorted(model.keys)
                assert len(window) == len(model.keys)
        finally:
            window.close()
        with DedupWindow(path, capacity=capacity) as reopened:
            assert len(reopened) == len(model.keys)
            # Marking fresh ids evicts the window's contents in its stored order, so the order
            # after reopen must equal the model's order, oldest first.
            free = capacity - len(model.keys)
            for i in range(1, capacity + 1):
                reopened.mark_consumed(f"fresh{i}")
                gone = max(0, i - free)
                assert [key for key in model.keys if key in reopened] == model.keys[gone:]
