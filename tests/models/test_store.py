"""Tests of the model cache on disk: home folder, completion marker, atomic install, import lock."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from agentrl_core.errors import AgentRLError
from agentrl_core.models import model_cache


def test_home_defaults_to_user_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("AGENTRL_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert model_cache.agentrl_home() == tmp_path / ".cache" / "agentrl"
    assert model_cache.model_dir("m") == tmp_path / ".cache" / "agentrl" / "models" / "m"


def test_home_follows_env(home: Path) -> None:
    assert model_cache.agentrl_home() == home
    assert model_cache.models_dir() == home / "models"


def test_marker_decides_completeness(tmp_path: Path) -> None:
    assert not model_cache.is_complete(tmp_path)
    (tmp_path / model_cache.MARKER).write_text("{not json")
    assert not model_cache.is_complete(tmp_path)
    model_cache.write_marker(tmp_path, {"n_params": 3})
    assert model_cache.is_complete(tmp_path)
    assert model_cache.read_marker(tmp_path) == {"n_params": 3}


def test_install_refuses_unfinished_folder(home: Path) -> None:
    temp = model_cache.new_temp_dir("m")
    with pytest.raises(AgentRLError, match=model_cache.MARKER):
        model_cache.install(temp, "m")
    assert not model_cache.model_dir("m").exists()


def test_install_replaces_existing_folder_and_leaves_nothing_behind(home: Path) -> None:
    old = model_cache.model_dir("m")
    old.mkdir(parents=True)
    (old / "stale.txt").write_text("half an old import")
    temp = model_cache.new_temp_dir("m")
    (temp / "config.json").write_text("{}")
    model_cache.write_marker(temp, {"v": 2})
    assert model_cache.install(temp, "m") == old
    assert sorted(p.name for p in old.iterdir()) == sorted(["config.json", model_cache.MARKER])
    assert [p.name for p in model_cache.models_dir().iterdir()] == ["m"]


def test_stale_temp_dirs_are_removed(home: Path) -> None:
    a, b = model_cache.new_temp_dir("m"), model_cache.new_temp_dir("other")
    model_cache.remove_stale_temp_dirs("m")
    assert not a.exists() and b.exists()


def test_lock_excludes_a_second_holder_and_reports_the_wait(home: Path) -> None:
    waited = []
    with model_cache.model_lock("m"):
        with pytest.raises(model_cache.ModelLockTimeout, match="still held"):
            with model_cache.model_lock("m", timeout_s=0.3, on_wait=lambda: waited.append(True)):
                pass
    assert waited == [True]
    with model_cache.model_lock("m", timeout_s=0.3):  # released: free again
        pass


def test_lock_waiter_proceeds_once_released(home: Path) -> None:
    order: list[str] = []
    with model_cache.model_lock("m"):
        waiter = threading.Thread(target=lambda: _take(order))
        waiter.start()
        time.sleep(0.3)
        order.append("holder releases")
    waiter.join(5)
    assert order == ["holder releases", "waiter got it"]


def _take(order: list[str]) -> None:
    with model_cache.model_lock("m", timeout_s=5):
        order.append("waiter got it")


def test_lock_holds_across_processes(home: Path) -> None:
    code = (
        "import sys\nfrom agentrl_core.models import model_cache\n"
        "try:\n    with model_cache.model_lock('m', timeout_s=0.3): print('got')\n"
        "except model_cache.ModelLockTimeout: print('timeout')\n"
    )
    def other_process() -> str:
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60).stdout.strip()

    with model_cache.model_lock("m"):
        assert other_process() == "timeout"
    assert other_process() == "got"
