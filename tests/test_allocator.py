"""The tuned malloc reaches the training process (and the Ray trainer actor) and none of its children."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from agentrl_core.system import malloc_tuning
from agentrl_core.system.malloc_tuning import APPLIED_ENV, OPT_OUT, TUNED

ROOT = Path(__file__).resolve().parents[1]


def start_environ(pid: int) -> dict[str, str]:
    """The environment `pid` was started with (/proc/<pid>/environ: what glibc read), not what it set since."""
    raw = Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
    return dict(item.split("=", 1) for item in raw.split("\0") if "=" in item)


def malloc_vars(environ: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in environ.items() if k.startswith("MALLOC_")}


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing adopted yet in this process."""
    monkeypatch.setattr(malloc_tuning, "_adopted", {})


def test_adopt_takes_the_settings_out_of_the_environment_and_remembers_them(fresh):
    environ = {**TUNED, "PATH": "/bin"}
    assert malloc_tuning.adopt(environ) == TUNED
    assert environ == {"PATH": "/bin", APPLIED_ENV: str(os.getpid())}
    assert malloc_tuning.in_force() == TUNED and "tuned for this training process" in malloc_tuning.describe()
    assert malloc_tuning.adopt({}) == TUNED  # adopted once: still in force, nothing else touched


def test_adopt_leaves_a_partial_or_opted_out_environment_alone(fresh, monkeypatch):
    for key in TUNED:
        monkeypatch.delenv(key, raising=False)
    partial = {"MALLOC_TOP_PAD_": "1"}
    opted = {**TUNED, OPT_OUT: "1"}
    assert malloc_tuning.adopt(partial) == {} and partial == {"MALLOC_TOP_PAD_": "1"}
    assert malloc_tuning.adopt(opted) == {} and opted == {**TUNED, OPT_OUT: "1"}
    assert malloc_tuning.in_force() == {} and malloc_tuning.describe() == "glibc's default malloc"


def test_actor_options_carry_the_settings_unless_opted_out(monkeypatch):
    monkeypatch.delenv(OPT_OUT, raising=False)
    options = {"num_cpus": 1, "runtime_env": {"env_vars": {"A": "1"}}}
    got = malloc_tuning.actor_options(options)
    assert got == {"num_cpus": 1, "runtime_env": {"env_vars": {**TUNED, "A": "1"}}}
    assert options == {"num_cpus": 1, "runtime_env": {"env_vars": {"A": "1"}}}  # the caller's dict is not changed
    monkeypatch.setenv(OPT_OUT, "1")
    assert malloc_tuning.actor_options(options) is options


DRIVER = textwrap.dedent("""
    import json, os, sys, time
    from pathlib import Path
    sys.path.insert(0, sys.argv[1])
    from agentrl.allocator import reexec_script_with_tuned_malloc

    reexec_script_with_tuned_malloc()  # what `agentrl run` and the benchmarks do first
    from agentrl_core.env_service import launch_server
    from agentrl_core.system.malloc_tuning import APPLIED_ENV, in_force

    def children(pid):
        kids = []
        for status in Path("/proc").glob("[0-9]*/status"):
            try:
                if f"PPid:\\t{pid}\\n" in status.read_text():
                    kids.append(int(status.parent.name))
            except OSError:
                pass
        return kids

    with launch_server(["countdown"], workers=1) as server:  # an env server and its env worker process
        deadline = time.monotonic() + 30
        while not children(server.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        print(json.dumps({"pid": os.getpid(), "server": server.pid, "workers": children(server.pid),
                          "in_force": in_force(), "applied": os.environ.get(APPLIED_ENV),
                          "now": sorted(k for k in os.environ if k.startswith("MALLOC_"))}), flush=True)
        input()  # the test reads every /proc/<pid>/environ while all are alive
""")


def _drive(tmp_path: Path, **env: str) -> tuple[dict, dict[str, dict[str, str]]]:
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != OPT_OUT}
    proc = subprocess.Popen([sys.executable, str(script), str(ROOT)], cwd=ROOT, env={**clean, **env}, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        line = proc.stdout.readline()
        assert line, proc.stderr.read()[-3000:] if proc.poll() is not None else "no report from the driver"
        report = json.loads(line)
        pids = {"training": report["pid"], "env server": report["server"]}
        pids.update({f"env worker {p}": p for p in report["workers"]})
        environs = {name: malloc_vars(start_environ(pid)) for name, pid in pids.items()}
    finally:
        proc.communicate("\n", timeout=60)
    return report, environs


def test_the_training_process_is_tuned_and_its_servers_are_not(tmp_path):
    report, environs = _drive(tmp_path)
    assert report["workers"], "the env server started no worker process"
    assert environs.pop("training") == TUNED  # glibc read them at the re-executed start
    assert report["in_force"] == TUNED and report["applied"] == str(report["pid"]) and report["now"] == []
    assert environs and all(found == {} for found in environs.values()), environs


def test_opting_out_keeps_the_default_everywhere(tmp_path):
    report, environs = _drive(tmp_path, **{OPT_OUT: "1"})
    assert report["in_force"] == {} and report["applied"] is None
    assert all(found == {} for found in environs.values()), environs


class EnvironProbe:
    """A Ray actor that reports the environment its process started with, then adopts as TrainerWorker does."""

    def __init__(self) -> None:
        self.started = malloc_vars(start_environ(os.getpid()))
        self.adopted = malloc_tuning.adopt()

    def report(self) -> dict:
        return {"started": self.started, "adopted": self.adopted, "now": malloc_vars(dict(os.environ))}


@pytest.mark.slow
@pytest.mark.ray
def test_the_ray_trainer_actor_is_tuned_and_a_rollout_actor_is_not(monkeypatch):
    """Through the actor's own runtime env, not the job's: Ray starts the trainer's process with the settings;
    other actors start with glibc's default."""
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # read by `import ray`: 127.0.0.1 only
    ray = pytest.importorskip("ray")
    from agentrl_core.config import DistributedConfig
    from agentrl_core.distributed.cluster import ray_runtime

    for key in (*TUNED, OPT_OUT):  # the actors start from this process's environment
        monkeypatch.delenv(key, raising=False)
    if ray.is_initialized():
        pytest.skip("another test's Ray is running in this process")
    with ray_runtime(DistributedConfig(backend="ray", object_store_mb=100), cpus_needed=1):
        probe = ray.remote(EnvironProbe)
        tuned = probe.options(**malloc_tuning.actor_options({"num_cpus": 0})).remote()
        plain = probe.options(num_cpus=0).remote()
        tuned, plain = ray.get([tuned.report.remote(), plain.report.remote()], timeout=120)
    assert tuned == {"started": TUNED, "adopted": TUNED, "now": {}}
    assert plain == {"started": {}, "adopted": {}, "now": {}}


FREED_THEN_PLANNED = textwrap.dedent("""
    import json, sys
    import torch
    from agentrl_core.system.machine_info import resident_bytes
    from agentrl_core.recipes import load_recipe
    from agentrl_core.training import memory_plan as mp

    def plan_persistent():
        cfg = load_recipe("household_grpo", ["trainer.memory_gb=12"])
        return mp.memory_plan_for(cfg, sys.argv[1], native_engine=True).persistent

    before = plan_persistent()
    buffers = [torch.ones(32 * 2**20) for _ in range(8)]  # 1 GiB, like the buffers of an earlier stage
    kept = torch.ones(2**20)  # allocated after them, so the freed ones sit below the heap's top
    del buffers
    freed = resident_bytes()
    after = plan_persistent()
    print(json.dumps({"before": before, "after": after, "freed": freed, "now": resident_bytes()}))
""")


@pytest.mark.slow
def test_a_stage_plans_without_the_memory_an_earlier_stage_freed(embedded_model_path):
    """With trimming off (the tuned training process) freed buffers stay resident; the next stage's plan must
    not count them as held: `memory_plan_for` hands the free heap back first."""
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}, **TUNED}
    env.pop(OPT_OUT, None)
    out = subprocess.run([sys.executable, "-c", FREED_THEN_PLANNED, str(embedded_model_path)], env=env, cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    gib = 2**30
    assert got["freed"] - got["now"] > 0.8 * gib  # the freed gigabyte went back to the OS
    assert abs(got["after"] - got["before"]) < 0.2 * gib  # and the plan did not count it
