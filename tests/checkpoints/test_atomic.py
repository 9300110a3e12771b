"""Atomic folder writes: marker last, safe replace, and cleanup of what crashed writers left."""

from __future__ import annotations

import os

import pytest

from agentrl_core.checkpoints import atomic
from agentrl_core.checkpoints.atomic import MARKER, atomic_dir, cleanup_stale, is_complete, remove_dir


def _write(folder, name: str, text: str) -> None:
    (folder / name).write_text(text, encoding="utf-8")


def test_atomic_dir_publishes_complete_folder_and_leaves_no_temp(tmp_path):
    final = tmp_path / "out"
    with atomic_dir(final, {"step": 3}) as tmp:
        assert tmp.parent == tmp_path and tmp.name.startswith(".out.tmp-")
        assert not final.exists()  # nothing visible under the final name while writing
        _write(tmp, "a.txt", "hello")
    assert is_complete(final)
    assert (final / "a.txt").read_text() == "hello"
    assert '"step": 3' in (final / MARKER).read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_marker_is_written_after_the_payload(tmp_path, monkeypatch):
    order = []
    real_marker = atomic.write_marker

    def marker(folder, info):
        order.append("marker")
        real_marker(folder, info)

    monkeypatch.setattr(atomic, "write_marker", marker)
    with atomic_dir(tmp_path / "out") as tmp:
        _write(tmp, "a.txt", "x")
        order.append("payload")
    assert order == ["payload", "marker"]


def test_exception_inside_leaves_old_folder_untouched(tmp_path):
    final = tmp_path / "out"
    with atomic_dir(final) as tmp:
        _write(tmp, "a.txt", "old")
    with pytest.raises(RuntimeError, match="boom"):
        with atomic_dir(final) as tmp:
            _write(tmp, "a.txt", "new")
            raise RuntimeError("boom")
    assert (final / "a.txt").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_replace_swaps_contents(tmp_path):
    final = tmp_path / "out"
    for text in ("one", "two"):
        with atomic_dir(final) as tmp:
            _write(tmp, "a.txt", text)
    assert (final / "a.txt").read_text() == "two"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_failed_rename_in_puts_old_folder_back(tmp_path, monkeypatch):
    final = tmp_path / "out"
    with atomic_dir(final) as tmp:
        _write(tmp, "a.txt", "old")
    real_replace = os.replace

    def replace(src, dst):  # the old folder moves aside, the new one fails to move in
        if ".tmp-" in os.fspath(src):
            raise OSError("disk full")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(OSError, match="disk full"):
        with atomic_dir(final) as tmp:
            _write(tmp, "a.txt", "new")
    assert is_complete(final) and (final / "a.txt").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_cleanup_removes_temps_of_dead_and_earlier_processes_only(tmp_path, dead_pid):
    dead = tmp_path / f".step_000002.tmp-{dead_pid}-ab12"
    ours_earlier = tmp_path / f".step_000003.tmp-{os.getpid()}-cd34"  # same pid, not being written
    live_other = tmp_path / f".step_000004.tmp-{os.getppid()}-ef56"  # a live writer elsewhere
    unrelated = tmp_path / ".notes.tmp-keep"
    for folder in (dead, ours_earlier, live_other, unrelated):
        folder.mkdir()
    removed = cleanup_stale(tmp_path)
    assert sorted(removed) == sorted([dead, ours_earlier])
    assert live_other.exists() and unrelated.exists()


def test_cleanup_restores_an_old_folder_whose_replacement_never_arrived(tmp_path, dead_pid):
    final = tmp_path / "step_000005"
    with atomic_dir(final) as tmp:
        _write(tmp, "a.txt", "kept")
    os.replace(final, tmp_path / f".step_000005.old-{dead_pid}-0a0b")  # crash mid-replace
    cleanup_stale(tmp_path)
    assert is_complete(final) and (final / "a.txt").read_text() == "kept"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_000005"]


def test_remove_dir_never_leaves_a_partial_folder_under_its_name(tmp_path, monkeypatch):
    final = tmp_path / "out"
    with atomic_dir(final) as tmp:
        _write(tmp, "a.txt", "x")
    monkeypatch.setattr(atomic.shutil, "rmtree", lambda *a, **k: None)  # a crash during deletion
    remove_dir(final)
    assert not final.exists()
