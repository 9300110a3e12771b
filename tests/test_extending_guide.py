"""docs/extending.md runs as written: its code blocks become a temporary plugin package, loaded through
AGENTRL_PLUGINS, and each part is found in its registry and works on a small input.

Each block of the guide is preceded by `<!-- guide:KIND PATH -->`; the test writes the block to PATH under a
temporary folder (the repository's own guide code, written to files and imported: nothing is exec'd) and runs
one checking script in a fresh process, so the plugin's registrations never reach this test process.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.prefect_home import seed_home

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "extending.md"
BLOCK = re.compile(r"<!-- guide:(?P<kind>[\w-]+) (?P<path>\S+) -->\n```\w+\n(?P<code>.*?)```", re.S)
PLUGIN = "my_agentrl_plugin"

# Run in a fresh process with the guide's files on the path: each check's outcome, as JSON on the last line.
CHECKS = r'''
import contextlib, io, json, runpy, sys, traceback
from pathlib import Path

here = Path(sys.argv[1])
results = {}

def check(name):
    def run(fn):
        try:
            results[name] = {"ok": True, "value": fn()}
        except Exception:
            results[name] = {"ok": False, "error": traceback.format_exc()[-3000:]}
    return run

def script(path):  # the guide's check block, run as a script; what it printed
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        runpy.run_path(str(here / path), run_name="__main__")
    return out.getvalue().strip().splitlines()

@check("loaded")
def _():
    from agentrl_core.plugins import load_plugins
    return load_plugins()

@check("env")
def _():
    return script("check_guess_number.py")

@check("env_expert_and_invalid")
def _():
    from agentrl_core.envs import make
    env = make("guess-number")
    obs, _ = env.reset(task_id=1000)
    first = env.step("banana")
    steps, result = 1, first
    while not (result.terminated or result.truncated):
        result = env.step(env.expert_action())
        steps += 1
    return [first.observation, first.reward, result.info["success"], steps]

@check("algorithms")
def _():
    from agentrl_core import algorithms
    return {"printed": script("check_algorithms.py"),
            "baseline": algorithms.advantage_baseline("positive_only"),
            "listed": ["positive_only" in algorithms.advantage_names(), "capped_pg" in algorithms.POLICY_LOSSES]}

@check("engine")
def _():
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    from agentrl_core.config import EngineConfig, SamplingConfig
    from agentrl_core.engine_registry import engine_kinds
    from agentrl_core.rollout.engine_factory import make_engine
    printed = script("check_engine.py")
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=2)).eval()
    engine = make_engine(EngineConfig(kind="plain"), model, None, stop_token_ids=[])
    greedy = engine.generate([[1, 5, 9]], SamplingConfig(temperature=0.0, max_new_tokens=4), seed=0)[0]
    reference = model.generate(torch.tensor([[1, 5, 9]]), do_sample=False, max_new_tokens=4, min_new_tokens=4,
                               pad_token_id=0)[0, 3:].tolist()
    sampled = engine.generate([[1, 5, 9]], SamplingConfig(temperature=1.0, max_new_tokens=6), seed=3)[0]
    again = engine.generate([[1, 5, 9]], SamplingConfig(temperature=1.0, max_new_tokens=6), seed=3)[0]
    with torch.no_grad():  # the reported log-prob of the first sampled token: log_softmax of the logits
        first = torch.log_softmax(model(torch.tensor([[1, 5, 9]])).logits[0, -1].float(), -1)[sampled.token_ids[0]]
    return {"printed": printed, "kind_listed": "plain" in engine_kinds(), "type": type(engine).__name__,
            "greedy": greedy.token_ids, "reference": reference, "repeatable": sampled == again,
            "logprob_gap": abs(float(first) - sampled.logprobs[0]), "n": len(sampled.logprobs)}

@check("recipe")
def _():
    from agentrl_core.recipes import load_recipe
    cfg = load_recipe(str(here / "guess_number_grpo.yaml"))
    return [cfg.env.name, cfg.algorithm.advantage, cfg.algorithm.policy_loss, cfg.rollout.engine.kind]

@check("flow")
def _():
    import tasks
    import flows
    tasks.__path__.append(str(here / "tasks"))  # the guide's tasks/ and flows/ files beside the repository's
    flows.__path__.append(str(here / "flows"))
    from prefect import Flow
    from flows.check_envs import check_envs
    from tasks.check_envs import check_one_env
    return {"is_flow": isinstance(check_envs, Flow), "name": check_envs.name,
            "task": check_one_env.fn("guess-number")}

print(json.dumps(results))
'''


def guide_blocks() -> list[tuple[str, str, str]]:
    return [(m["kind"], m["path"], m["code"]) for m in BLOCK.finditer(GUIDE.read_text())]


@pytest.fixture(scope="module")
def checked(tmp_path_factory, prefect_database) -> tuple[dict, Path]:
    """The guide's files written out, and what the checking script found."""
    here = tmp_path_factory.mktemp("guide")
    for _, path, code in guide_blocks():
        target = here / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(code)
    (here / "checks.py").write_text(CHECKS)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(AGENTRL_PLUGINS=PLUGIN, PYTHONPATH=os.pathsep.join([str(here), str(ROOT)]), OMP_NUM_THREADS="1",
               PREFECT_HOME=str(seed_home(here / "prefect-home", prefect_database)))
    out = subprocess.run([sys.executable, str(here / "checks.py"), str(here)], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1]), here


def value(checked: tuple[dict, Path], name: str):
    result = checked[0][name]
    assert result["ok"], f"the guide's {name} example failed:\n{result['error']}"
    return result["value"]


def test_the_guide_has_every_part():
    kinds = [kind for kind, _, _ in guide_blocks()]
    for kind in ("plugin", "pyproject", "env", "env-check", "algorithm", "algorithm-check", "engine", "engine-check",
                 "recipe", "task", "flow", "deployment"):
        assert kinds.count(kind) == 1, f"docs/extending.md should have one `<!-- guide:{kind} PATH -->` block"


def test_the_plugin_loads_through_agentrl_plugins(checked):
    assert value(checked, "loaded") == [PLUGIN]


def test_the_pyproject_names_the_plugin_as_an_entry_point(checked):
    tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from Python 3.11")
    project = tomllib.loads((checked[1] / "pyproject.toml").read_text())
    assert project["project"]["entry-points"]["agentrl.plugins"] == {"my_plugin": PLUGIN}


def test_the_environment_passes_check_env_and_plays(checked):
    assert value(checked, "env") == []  # check_env raised nothing, the asserts held
    invalid_obs, invalid_reward, expert_won, steps = value(checked, "env_expert_and_invalid")
    assert invalid_obs.startswith("Nothing happens") and invalid_reward == 0.0
    assert expert_won and steps <= 6


def test_the_estimator_and_the_loss_are_registered_and_compute(checked):
    got = value(checked, "algorithms")
    assert got["printed"] == ["tensor([0.5000, 0.0000, 0.0000, 0.0000])", "1.0 1.0"]
    assert got["baseline"] == "group" and got["listed"] == [True, True]


def test_the_engine_is_built_by_the_factory_and_samples(checked):
    got = value(checked, "engine")
    assert got["kind_listed"] and got["type"] == "PlainEngine"
    assert len(got["printed"]) == 1 and "'length', 'length'" in got["printed"][0]
    assert got["greedy"] == got["reference"]  # greedy = transformers' generate on the same model
    assert got["repeatable"] and got["n"] == 6 and got["logprob_gap"] < 1e-4


def test_the_recipe_names_the_plugins_parts_and_validates(checked):
    assert value(checked, "recipe") == ["guess-number", "positive_only", "capped_pg", "plain"]


def test_the_flow_is_a_prefect_flow_and_its_deployment_points_at_it(checked):
    got = value(checked, "flow")
    assert got["is_flow"] and got["task"] == {"env": "guess-number", "conforms": True}
    deployment = yaml.safe_load((checked[1] / "prefect.yaml").read_text())["deployments"][0]
    path, function = deployment["entrypoint"].split(":")
    assert (checked[1] / path).exists() and function == "check_envs"
    assert f"{got['name']}/{deployment['name']}" == "check-envs/check-envs"
    assert deployment["parameters"]["envs"] == ["household", "guess-number"]
