"""The native engine's prepacking decision: one verdict per machine, cached, so seeded runs repeat exactly."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from agentrl_core.errors import ConfigError
from agentrl_core.rollout.native import prepack

ROOT = Path(__file__).resolve().parents[2]
CPU = torch.device("cpu")
needs_onednn = pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="needs a oneDNN build of torch")


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh AGENTRL_HOME (no verdict cached yet), a fresh per-process memo, and no override set."""
    monkeypatch.setenv("AGENTRL_HOME", str(tmp_path / "home"))
    monkeypatch.delenv(prepack.PREPACK_ENV, raising=False)
    monkeypatch.setattr(prepack, "_pack_decisions", {})
    return tmp_path / "home"


@pytest.fixture
def probes(monkeypatch: pytest.MonkeyPatch) -> list[tuple]:
    """Replaces the timing probe by one that records its calls and says "prepack"."""
    calls: list[tuple] = []

    def probe(dtype: torch.dtype, shape: tuple[int, int]) -> dict:
        calls.append((dtype, shape))
        return {"prepack": True, "reason": "test probe"}
    monkeypatch.setattr(prepack, "_probe", probe)
    return calls


@needs_onednn
def test_the_verdict_is_measured_once_per_machine_and_shape(home, probes, monkeypatch):
    assert prepack.prepack_pays(torch.float32, (64, 32), CPU) is True
    monkeypatch.setattr(prepack, "_pack_decisions", {})  # as a new process would start
    assert prepack.prepack_pays(torch.float32, (64, 32), CPU) is True
    assert probes == [(torch.float32, (64, 32))]  # the second read the file
    prepack.prepack_pays(torch.float32, (128, 64), CPU)  # another shape family: its own probe
    prepack.prepack_pays(torch.bfloat16, (64, 32), CPU)  # another dtype too
    assert len(probes) == 3
    entries = json.loads((home / "machine" / "prepack.json").read_text()).values()
    assert all(e["prepack"] is True and e["cpu"] and e["measured_at"] for e in entries) and len(entries) == 3
    assert prepack.prepack_pays(torch.float32, (64, 32), torch.device("meta")) is False  # not a CPU: never packed


@needs_onednn
def test_on_and_off_override_without_measuring(home, probes, monkeypatch):
    monkeypatch.setenv(prepack.PREPACK_ENV, "off")
    assert prepack.prepack_pays(torch.float32, (64, 32), CPU) is False
    monkeypatch.setattr(prepack, "_pack_decisions", {})
    monkeypatch.setenv(prepack.PREPACK_ENV, " ON ")
    assert prepack.prepack_pays(torch.float32, (64, 32), CPU) is True
    assert probes == [] and not (home / "machine" / "prepack.json").exists()


def test_a_bad_setting_names_the_valid_ones_when_the_engine_is_made(home, monkeypatch, tiny_model_path):
    from agentrl_core.models import load_model, load_tokenizer
    from agentrl_core.rollout.native import NativeEngine

    monkeypatch.setenv(prepack.PREPACK_ENV, "yes")
    with pytest.raises(ConfigError, match="AGENTRL_NATIVE_PREPACK='yes' is not a setting: use on, off or auto"):
        NativeEngine(load_model(tiny_model_path), load_tokenizer(tiny_model_path))


@needs_onednn
def test_on_where_onednn_cannot_pack_says_what_to_set(home, monkeypatch):
    monkeypatch.setenv(prepack.PREPACK_ENV, "on")
    monkeypatch.setattr(prepack, "_packs", lambda dtype, shape: False)
    with pytest.raises(ConfigError, match="cannot prepack torch.bfloat16 weights on this machine.*=auto or off"):
        prepack.prepack_pays(torch.bfloat16, (64, 32), CPU)


@needs_onednn
def test_the_real_probe_leaves_the_global_rng_and_threads_alone(home):
    torch.manual_seed(123)
    state, threads = torch.get_rng_state(), torch.get_num_threads()
    entry = prepack._probe(torch.float32, (64, 32))
    assert torch.equal(state, torch.get_rng_state()) and torch.get_num_threads() == threads
    assert isinstance(entry["prepack"], bool) and entry["seconds"]["plain"] > 0 and entry["seconds"]["packed"] > 0


ROLLOUT = textwrap.dedent("""
    import json, os, sys
    from agentrl_core.rollout.native import prepack

    probes = []
    def probe(dtype, shape):  # what this process's timing would say, were it asked
        probes.append(1)
        return {"prepack": os.environ["PROBE_SAYS"] == "on", "reason": "test probe"}
    prepack._probe = probe

    from agentrl_core.config import SamplingConfig
    from agentrl_core.models import load_model, load_tokenizer
    from agentrl_core.rollout.native import NativeEngine

    import torch
    torch.set_num_threads(1)  # the same in both processes; and fast on a CPU shared with other jobs
    model, tok = load_model(sys.argv[1]), load_tokenizer(sys.argv[1])
    prompts = [list(range(5, 45)), list(range(300, 321))]
    gens = NativeEngine(model, tok).generate(prompts, SamplingConfig(temperature=1.0, max_new_tokens=24), seed=11)
    print(json.dumps({"probes": len(probes), "tokens": [g.token_ids for g in gens],
                      "logprobs": [g.logprobs for g in gens]}))
""")


def _rollout(model: Path, home: Path, **env: str) -> subprocess.Popen:
    child = {**os.environ, "AGENTRL_HOME": str(home), **env}
    return subprocess.Popen([sys.executable, "-c", ROLLOUT, str(model)], cwd=ROOT, env=child, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _result(proc: subprocess.Popen) -> dict:
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    return json.loads(out.splitlines()[-1])


@pytest.mark.slow
@needs_onednn
def test_two_seeded_processes_roll_out_identically_with_the_verdict_cached(home, tiny_model_path):
    """The first process measures (its probe says "prepack"); the second would measure "don't" but reads the
    cached verdict instead, so token ids and log-probs agree to the bit."""
    first = _result(_rollout(tiny_model_path, home, PROBE_SAYS="on"))
    second = _result(_rollout(tiny_model_path, home, PROBE_SAYS="off"))
    assert (first["probes"], second["probes"]) == (1, 0)
    assert second["tokens"] == first["tokens"] and second["logprobs"] == first["logprobs"]


@needs_onednn
def test_the_verdict_changes_float32_results(home, tiny_model_path, monkeypatch):
    """Why it must be one verdict per machine: prepacked and plain float32 matmuls differ in the last bits."""
    from agentrl_core.config import SamplingConfig
    from agentrl_core.models import load_model, load_tokenizer
    from agentrl_core.rollout.native import NativeEngine

    model, tok = load_model(tiny_model_path), load_tokenizer(tiny_model_path)
    logprobs = {}
    for setting in ("on", "off"):
        monkeypatch.setenv(prepack.PREPACK_ENV, setting)
        monkeypatch.setattr(prepack, "_pack_decisions", {})
        gens = NativeEngine(model, tok).generate([list(range(5, 45))], SamplingConfig(max_new_tokens=8), seed=11)
        logprobs[setting] = gens[0].logprobs
    assert logprobs["on"] != logprobs["off"]
    assert max(abs(a - b) for a, b in zip(logprobs["on"], logprobs["off"])) < 1e-4  # only the last bits
