"""Saving and loading checkpoints: round trips, pruning, crashes, and strict weight loading."""

from __future__ import annotations

import json
import logging
import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM

from agentrl_core.checkpoints import (
    MARKER,
    latest_checkpoint,
    list_checkpoints,
    load_checkpoint,
    load_model_weights,
    resolve_resume,
    save_checkpoint,
    step_dir,
)
from agentrl_core.errors import CheckpointError


def _names(root) -> list[str]:
    return sorted(p.name for p in root.iterdir())


def _assert_same_weights(a, b) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for key in sa:
        assert torch.equal(sa[key], sb[key]), key


def _assert_same_optimizer_state(a: dict, b: dict) -> None:
    assert a["param_groups"] == b["param_groups"]
    assert a["state"].keys() == b["state"].keys()
    for index, slots in a["state"].items():
        for name, value in slots.items():
            assert torch.equal(torch.as_tensor(value), torch.as_tensor(b["state"][index][name]))


def _draw() -> tuple:
    return random.random(), float(np.random.rand()), np.random.randn(), torch.rand(3)


def test_layout_of_a_checkpoint(tmp_path, trained, tokenizer):
    model, optimizer, scheduler = trained
    path = save_checkpoint(tmp_path, 10, model=model, tokenizer=tokenizer, optimizer=optimizer,
                           scheduler=scheduler, state={"metrics": {"loss": 1.5}, "config": {"lr": 0.01}})
    assert path == tmp_path / "step_000010" == step_dir(tmp_path, 10)
    assert _names(tmp_path) == ["step_000010"]
    assert _names(path) == [MARKER, "model", "optimizer.pt", "rng.pt", "scheduler.pt", "trainer_state.json"]
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= set(os.listdir(path / "model"))
    state = json.loads((path / "trainer_state.json").read_text())
    assert state["step"] == 10 and state["metrics"] == {"loss": 1.5} and state["config"] == {"lr": 0.01}
    assert state["saved_at"] > 0 and state["saved_at_utc"].startswith("20")


def test_round_trip_restores_weights_optimizer_scheduler_and_rng(tmp_path, trained, tokenizer, make_model):
    model, optimizer, scheduler = trained
    path = save_checkpoint(tmp_path, 2, model=model, tokenizer=tokenizer, optimizer=optimizer,
                           scheduler=scheduler, state={"epoch": 1})
    expected_draw = _draw()
    expected_opt = optimizer.state_dict()

    fresh = make_model(seed=123)
    fresh_opt = torch.optim.AdamW(fresh.parameters(), lr=1e-2)
    fresh_sched = torch.optim.lr_scheduler.StepLR(fresh_opt, step_size=1, gamma=0.5)
    _draw()  # move every RNG on, so only a restore can reproduce expected_draw
    state = load_checkpoint(path, model=fresh, optimizer=fresh_opt, scheduler=fresh_sched)

    assert state["step"] == 2 and state["epoch"] == 1
    got_draw = _draw()
    assert got_draw[:3] == expected_draw[:3] and torch.equal(got_draw[3], expected_draw[3])
    _assert_same_weights(model, fresh)
    _assert_same_optimizer_state(expected_opt, fresh_opt.state_dict())
    assert fresh_sched.state_dict() == scheduler.state_dict()
    assert fresh_opt.param_groups[0]["lr"] == pytest.approx(optimizer.param_groups[0]["lr"])


def test_resumed_training_matches_uninterrupted_training(tmp_path, trained, tokenizer, train):
    model, optimizer, scheduler = trained
    path = save_checkpoint(tmp_path, 2, model=model, tokenizer=tokenizer, optimizer=optimizer, scheduler=scheduler)
    resumed = AutoModelForCausalLM.from_pretrained(path / "model").eval()
    resumed_opt = torch.optim.AdamW(resumed.parameters(), lr=1e-2)
    resumed_sched = torch.optim.lr_scheduler.StepLR(resumed_opt, step_size=1, gamma=0.5)
    load_checkpoint(path, optimizer=resumed_opt, scheduler=resumed_sched, restore_rng=False)
    train(model, optimizer, scheduler)
    train(resumed, resumed_opt, resumed_sched)
    _assert_same_weights(model, resumed)


def test_keep_last_prunes_oldest_complete_checkpoints(tmp_path, model, tokenizer):
    for step in (1, 2, 3, 4):
        save_checkpoint(tmp_path, step, model=model, tokenizer=tokenizer, keep_last=2)
    assert _names(tmp_path) == ["step_000003", "step_000004"]
    save_checkpoint(tmp_path, 5, model=model, tokenizer=tokenizer, keep_last=None)
    assert _names(tmp_path) == ["step_000003", "step_000004", "step_000005"]


def test_keep_last_rejects_zero(tmp_path, model, tokenizer):
    with pytest.raises(ValueError, match="keep_last"):
        save_checkpoint(tmp_path, 1, model=model, tokenizer=tokenizer, keep_last=0)
    assert not tmp_path.joinpath("step_000001").exists()


def test_saving_the_same_step_again_replaces_it(tmp_path, model, tokenizer):
    save_checkpoint(tmp_path, 7, model=model, tokenizer=tokenizer, state={"version": 1})
    path = save_checkpoint(tmp_path, 7, model=model, tokenizer=tokenizer, state={"version": 2})
    assert _names(tmp_path) == ["step_000007"]
    assert load_checkpoint(path, restore_rng=False)["version"] == 2


@pytest.mark.parametrize("failing", ["rename", "write"])
def test_crash_mid_save_leaves_previous_checkpoint_as_latest(tmp_path, model, tokenizer, monkeypatch, failing):
    save_checkpoint(tmp_path, 1, model=model, tokenizer=tokenizer)
    if failing == "rename":
        def boom(src, dst):
            raise OSError("simulated crash in os.replace")
        monkeypatch.setattr(os, "replace", boom)
    else:
        def boom(obj, f, *args, **kwargs):
            raise OSError("simulated crash in a write")
        monkeypatch.setattr(torch, "save", boom)
    with pytest.raises(OSError, match="simulated crash"):
        save_checkpoint(tmp_path, 2, model=model, tokenizer=tokenizer, keep_last=1)
    monkeypatch.undo()
    assert _names(tmp_path) == ["step_000001"]  # no step_* without COMPLETE, no temp left
    assert latest_checkpoint(tmp_path) == tmp_path / "step_000001"


def test_crash_while_replacing_keeps_the_old_checkpoint(tmp_path, model, tokenizer, monkeypatch):
    save_checkpoint(tmp_path, 3, model=model, tokenizer=tokenizer, state={"version": 1})
    real_replace = os.replace

    def replace(src, dst):  # moving the old one aside works, renaming the new one in fails
        if ".tmp-" in os.fspath(src):
            raise OSError("simulated crash in os.replace")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(OSError):
        save_checkpoint(tmp_path, 3, model=model, tokenizer=tokenizer, state={"version": 2})
    monkeypatch.undo()
    assert _names(tmp_path) == ["step_000003"]
    assert load_checkpoint(latest_checkpoint(tmp_path), restore_rng=False)["version"] == 1


def test_next_save_removes_temp_folders_of_a_crashed_process(tmp_path, model, tokenizer, dead_pid):
    leftover = tmp_path / f".step_000002.tmp-{dead_pid}-deadbeef"
    (leftover / "model").mkdir(parents=True)
    save_checkpoint(tmp_path, 3, model=model, tokenizer=tokenizer)
    assert _names(tmp_path) == ["step_000003"]


def test_load_refuses_incomplete_and_names_what_is_missing(tmp_path, model, tokenizer):
    path = save_checkpoint(tmp_path, 4, model=model, tokenizer=tokenizer)
    with pytest.raises(CheckpointError, match=r"step_000004 is missing optimizer\.pt, scheduler\.pt"):
        load_checkpoint(path, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                        scheduler=object(), restore_rng=False)
    (path / MARKER).unlink()
    with pytest.raises(CheckpointError, match=f"missing {MARKER}.*crashed"):
        load_checkpoint(path)
    with pytest.raises(CheckpointError, match="does not exist"):
        load_checkpoint(tmp_path / "step_000099")


def test_unserialisable_state_fails_before_anything_is_written(tmp_path, model, tokenizer):
    with pytest.raises(TypeError, match="not JSON-serialisable"):
        save_checkpoint(tmp_path, 1, model=model, tokenizer=tokenizer, state={"bad": object()})
    assert _names(tmp_path) == []


def test_load_model_weights_is_strict_with_clear_key_names(tmp_path, model, tokenizer, make_model):
    path = save_checkpoint(tmp_path, 1, model=model, tokenizer=tokenizer)
    other = make_model(seed=5)
    load_model_weights(path, other)
    _assert_same_weights(model, other)

    weights_file = path / "model" / "model.safetensors"
    tensors = load_file(str(weights_file))
    tensors.pop("model.norm.weight")
    tensors["extra.bias"] = torch.zeros(2)
    save_file(tensors, str(weights_file), metadata={"format": "pt"})
    keys = r"missing keys: \['model.norm.weight'\].*unexpected keys: \['extra.bias'\]"
    with pytest.raises(CheckpointError, match=keys):
        load_model_weights(path, other)

    with pytest.raises(CheckpointError, match="do not fit"):
        load_model_weights(save_checkpoint(tmp_path, 2, model=model, tokenizer=tokenizer),
                           make_model(intermediate_size=48))


def test_load_model_weights_accepts_tied_embeddings(tmp_path, tokenizer, make_model):
    tied = make_model(seed=1, tie_word_embeddings=True)
    path = save_checkpoint(tmp_path, 1, model=tied, tokenizer=tokenizer)
    assert "lm_head.weight" not in load_file(str(path / "model" / "model.safetensors"))
    fresh = make_model(seed=2, tie_word_embeddings=True)
    load_model_weights(path, fresh)
    _assert_same_weights(tied, fresh)
    assert fresh.lm_head.weight.data_ptr() == fresh.model.embed_tokens.weight.data_ptr()


def test_saving_below_an_existing_step_warns(tmp_path, model, tokenizer, caplog):
    save_checkpoint(tmp_path, 5, model=model, tokenizer=tokenizer)
    with caplog.at_level(logging.WARNING):
        save_checkpoint(tmp_path, 3, model=model, tokenizer=tokenizer, keep_last=1)
    assert "step_000005" in caplog.text
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step_000003", "step_000005"]



# A writer process killed outright (os._exit: no exception handlers, no cleanup) while saving
# step 2, after a good step 1. The stub model avoids importing transformers in the child.
_CHILD = """
import os, sys
from pathlib import Path
from agentrl_core.checkpoints import save_checkpoint

root, where = Path(sys.argv[1]), sys.argv[2]
armed = False

class StubModel:
    def save_pretrained(self, path, **kwargs):
        Path(path).mkdir()
        (Path(path) / "model.safetensors").write_bytes(b"x" * 1000)
        if armed and where == "model":
            os._exit(9)

save_checkpoint(root, 1, model=StubModel(), tokenizer=None)
real_replace = os.replace

def dying_replace(src, dst):
    if where == "rename" and ".tmp-" in os.fspath(src):
        os._exit(9)
    real_replace(src, dst)

os.replace, armed = dying_replace, True
save_checkpoint(root, 2, model=StubModel(), tokenizer=None, keep_last=1)
"""


@pytest.mark.parametrize("where", ["model", "rename"])
def test_hard_kill_mid_save_never_exposes_a_half_checkpoint(tmp_path, where):
    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(repo), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(tmp_path), where], env=env, timeout=60)
    assert proc.returncode == 9
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("step_")] == ["step_000001"]
    assert latest_checkpoint(tmp_path) == tmp_path / "step_000001"
    assert any(".step_000002.tmp-" in p.name for p in tmp_path.iterdir())  # the dead writer's leftover
    assert resolve_resume(tmp_path, "auto") == tmp_path / "step_000001"  # this scan removes it
    assert _names(tmp_path) == ["step_000001"]
