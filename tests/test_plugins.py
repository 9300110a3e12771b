"""Plugins, the Python way (agentrl_core/plugins.py): a package installed into a temporary folder brings an
environment, an advantage estimator, a policy loss and a rollout engine through the `agentrl.plugins` entry point,
and they work where agentrl's own do: `check_env`, recipes, the env server's process, the trainer, on Ray workers.
A broken plugin stops with an error naming it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "tests" / "plugin_package"
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def plugin_site(tmp_path_factory) -> Path:
    """The plugin package installed by pip into a folder of its own (nothing added to the project's venv)."""
    site = tmp_path_factory.mktemp("plugin-site")
    build = tmp_path_factory.mktemp("plugin-build")
    source = shutil.copytree(PACKAGE, build / "source")  # setuptools builds in the source tree: not in ours
    out = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                          "--no-index", "--target", str(site), str(source)], capture_output=True, text=True,
                         timeout=300, env={**os.environ, "TMPDIR": str(build)})
    assert out.returncode == 0, out.stdout + out.stderr
    assert list(site.glob("agentrl_echo_plugin-*.dist-info/entry_points.txt"))
    return site


def plugin_env(site: Path, calls: Path | None = None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_") and k != "AGENTRL_PLUGINS"}
    env.update(PYTHONPATH=os.pathsep.join([str(site), str(ROOT)]), **extra)
    if calls is not None:
        env["ECHO_PLUGIN_CALLS"] = str(calls)
    return env


def python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_without_the_plugin_its_names_are_unknown(tmp_path):
    out = python("from agentrl_core.envs import names; print('echo-word' in names())", plugin_env(tmp_path))
    assert out.returncode == 0 and out.stdout.strip() == "False", out.stderr


def test_check_env_and_the_registries_see_the_plugin(plugin_site):
    code = ("from agentrl_core.envs import check_env, make; from agentrl_core import algorithms; "
            "from agentrl_core.engine_registry import engine_kinds; from agentrl_core.plugins import load_plugins; "
            "check_env(make('echo-word')); "
            "print(load_plugins(), 'echo_centered' in algorithms.advantage_names(), "
            "'echo_pg' in algorithms.POLICY_LOSSES, 'echo-hf' in engine_kinds())")
    out = python(code, plugin_env(plugin_site))
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == "['agentrl_echo_plugin'] True True True"


def recipe(tmp_path: Path, model: Path, *, ray: bool) -> Path:
    path = tmp_path / "echo.yaml"
    path.write_text(yaml.safe_dump({
        "run": {"name": "echo", "root": str(tmp_path / "runs")},
        "model": {"name": str(model), "compute_dtype": "float32"},
        "env": {"name": "echo-word", "max_turns": 1, "train_tasks": 8, "test_tasks": 2},
        "rollout": {"group_size": 2, "tasks_per_step": 2, "sampling": {"max_new_tokens": 4},
                    "engine": {"kind": "echo-hf"}},
        "algorithm": {"advantage": "echo_centered", "policy_loss": "echo_pg", "entropy_coef": 0.01},
        "trainer": {"steps": 1, "memory_gb": None},
        "sft": {"enabled": False},
        "eval": {"sampling": {"max_new_tokens": 4}},
        **({"distributed": {"backend": "ray"}} if ray else {}),
    }))
    return path


@pytest.mark.parametrize("ray", [False, pytest.param(True, marks=pytest.mark.ray)], ids=["in-process", "ray"])
def test_a_one_step_recipe_trains_on_the_plugins_env_estimator_loss_and_engine(plugin_site, tiny_model_path,
                                                                                tmp_path, prefect_home, ray):
    if ray:
        pytest.importorskip("ray")
    calls = tmp_path / "calls.txt"
    env = plugin_env(plugin_site, calls, PREFECT_HOME=str(prefect_home), PREFECT_SERVER_ANALYTICS_ENABLED="false",
                     DO_NOT_TRACK="1", RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0")
    run = subprocess.run([str(Path(sys.executable).with_name("agentrl")), "run", str(recipe(tmp_path, tiny_model_path,
                                                                                             ray=ray))],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-5000:]
    seen: dict[str, set[int]] = {}
    for line in calls.read_text().splitlines():
        what, pid = line.split()
        seen.setdefault(what, set()).add(int(pid))
    assert {"env", "estimator", "loss", "engine"} <= set(seen), seen
    assert seen["env"].isdisjoint(seen["estimator"])  # the env ran in the env server's processes, not the trainer's
    if ray:  # the engine was built in a rollout worker and the estimator ran in the trainer actor: other processes
        assert not seen["engine"] & seen["estimator"]
    metrics = (tmp_path / "runs" / "echo" / "grpo" / "metrics.jsonl").read_text().splitlines()
    assert len(metrics) == 1


def test_a_broken_plugin_stops_with_its_name(plugin_site, tmp_path):
    broken = tmp_path / "broken_plugin.py"
    broken.write_text("raise ImportError('no module named numpyy')\n")
    env = plugin_env(plugin_site, AGENTRL_PLUGINS="broken_plugin")
    env["PYTHONPATH"] += os.pathsep + str(tmp_path)
    out = python("import agentrl_core.envs", env)
    assert out.returncode != 0
    assert "the agentrl plugin 'broken_plugin' (AGENTRL_PLUGINS) failed to import" in out.stderr
    assert "no module named numpyy" in out.stderr
