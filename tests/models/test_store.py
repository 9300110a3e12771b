"""Tests of the model cache on disk: home folder, completion marker, atomic install, import lock."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from agentrl_core.errors import AgentRLError
from agentrl_core.models import store


def test_home_defaults_to_user_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("AGENTRL_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert store.agentrl_home() == tmp_path / ".cache" / "agentrl"
    assert store.model_dir("m") == tmp_path / ".cache" / "agentrl" / "models" / "m"


def test_home_follows_env(home: Path) -> None:
    assert store.agentrl_home() == home
    assert store.models_dir() == home / "models"


def test_marker_decides_completeness(tmp_path: Path) -> None:
    assert not store.is_complete(tmp_path)
    (tmp_path / store.MARKER).write_text("{not json")
    assert not store.is_complete(tmp_path)
    store.write_marker(tmp_path, {"n_params": 3})
    assert store.is_complete(tmp_path)
    assert store.read_marker(tmp_path) == {"n_params": 3}


def test_install_refuses_unfinished_folder(home: Path) -> None:
    temp = store.new_temp_dir("m")
    with pytest.raises(AgentRLError, match=store.MARKER):
        store.install(temp, "m")
    assert not store.model_dir("m").exists()


def test_install_replaces_existing_folder_and_leaves_nothing_behind(home: Path) -> None:
    old = store.model_dir("m")
    old.mkdir(parents=True)
    (old / "stale.txt").write_text("half an old import")
    temp = store.new_temp_dir("m")
    (temp / "config.json").write_text("{}")
    store.write_marker(temp, {"v": 2})
    assert store.install(temp, "m") == old
    assert sorted(p.name for p in old.iterdir()) == sorted(["config.json", store.MARKER])
    assert [p.name for p in store.models_dir().iterdir()] == ["m"]


def test_stale_temp_dirs_are_removed(home: Path) -> None:
    a, b = store.new_temp_dir("m"), store.new_temp_dir("other")
    store.remove_stale_temp_dirs("m")
    assert not a.exists() and b.exists()


def test_lock_excludes_a_second_holder_and_reports_the_wait(home: Path) -> None:
    waited = []
    with store.model_lock("m"):
        with pytest.raises(store.ModelLockTimeout, match="still held"):
            with store.model_lock("m", timeout_s=0.3, on_wait=lambda: waited.append(True)):
                pass
    assert waited == [True]
    with store.model_lock("m", timeout_s=0.3):  # released: free again
        pass


def test_lock_waiter_proceeds_once_released(home: Path) -> None:
    order: list[str] = []
    with store.model_lock("m"):
        waiter = threading.Thread(target=lambda: _take(order))
        waiter.start()
        time.sleep(0.3)
        order.append("holder releases")
    waiter.join(5)
    assert order == ["holder releases", "waiter got it"]


def _take(order: list[str]) -> None:
    with store.model_lock("m", timeout_s=5):
        order.append("waiter got it")


def test_lock_holds_across_processes(home: Path) -> None:
    code = (
        "import sys\nfrom agentrl_core.models import store\n"
        "try:\n    with store.model_lock('m', timeout_s=0.3): print('got')\n"
        "except store.ModelLockTimeout: print('timeout')\n"
    )
    def other_process() -> str:
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60).stdout.strip()

    with store.model_lock("m"):
        assert other_process() == "timeout"
    assert other_process() == "got"
