"""The command line: help on every command, clear errors for bad recipes, the env list."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentrl.cli import build_parser, main, parse_args

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("command", ["import-model", "envs", "serve", "run", "recipe", "sft", "curriculum",
                                     "batch-eval", "nightly-eval", "eval", "alfworld-games", "convert", "serve-model"])
def test_every_command_has_help(command, capsys):
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args([command, "--help"])
    assert exit_.value.code == 0
    assert "usage: agentrl" in capsys.readouterr().out


def test_overrides_are_taken_wherever_they_stand(capsys):
    args = parse_args(["curriculum", "bfcl", "trainer.steps=1", "--until", "stage1", "run.name=x"])
    assert (args.curriculum, args.until, args.overrides) == ("bfcl", "stage1", ["trainer.steps=1", "run.name=x"])
    with pytest.raises(SystemExit):
        parse_args(["curriculum", "bfcl", "--until", "stage1", "--nope"])
    assert "unrecognized arguments: --nope" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # a command without overrides takes none
        parse_args(["envs", "x=1"])


def test_bad_recipe_exits_2_with_the_key_and_choices(capsys):
    assert main(["run", "household_grpo", "trainer.stepz=3"]) == 2
    err = capsys.readouterr().err
    assert "trainer.stepz" in err and "steps" in err


def test_missing_model_fails_fast_with_how_to_fix(tmp_path, capsys):
    missing = tmp_path / "no-model"
    assert main(["run", "household_grpo", f"model.name={missing}"]) == 2
    err = capsys.readouterr().err
    assert "no-model" in err and "smollm2-135m-instruct" in err


def test_envs_lists_registered_environments():
    out = subprocess.run([sys.executable, "-m", "agentrl.cli", "envs"], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert "household" in out.stdout and "countdown" in out.stdout


def test_malloc_reexec_only_when_needed_and_not_opted_out():
    from agentrl.allocator import OPT_OUT, TUNED, wants_reexec

    assert wants_reexec({})
    assert not wants_reexec(dict(TUNED))
    assert not wants_reexec({OPT_OUT: "1"})


def test_reexec_keeps_arguments_and_exit_code():
    # `run` re-executes itself with the tuned malloc settings, then fails fast on the bad key
    exe = Path(sys.executable).with_name("agentrl")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    out = subprocess.run([str(exe), "-v", "run", "household_grpo", "trainer.stepz=1"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "trainer.stepz" in out.stderr


def test_alfworld_games_writes_the_official_layout(tmp_path):
    pytest.importorskip("alfworld")
    import json

    assert main(["alfworld-games", "--out", str(tmp_path), "--ids", "2418:2422"]) == 0
    games = sorted(tmp_path.glob("json_2.1.1/*/*/trial_*/game.tw-pddl"))
    assert len(games) == 4 and {g.parts[-4] for g in games} == {"train", "valid_train"}  # ids cross the split
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert len(json.dumps(manifest)) > 0 and "2419" in json.dumps(manifest)


def test_alfworld_games_rejects_a_bad_id_range(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["alfworld-games", "--out", "x", "--ids", "a:b"])
    assert "START:STOP" in capsys.readouterr().err


def test_convert_writes_a_loadable_hf_folder(tiny_model_path, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM

    out = tmp_path / "hf"
    assert main(["convert", str(tiny_model_path), str(out)]) == 0
    ids = torch.tensor([[1, 2, 3, 4]])
    a, b = (AutoModelForCausalLM.from_pretrained(p).eval() for p in (tiny_model_path, out))
    with torch.no_grad():
        assert torch.equal(a(ids).logits, b(ids).logits)
    assert (out / "generation_config.json").exists() and (out / "tokenizer.json").exists()


def test_eval_passes_the_context_limit_to_the_evaluation(monkeypatch, capsys):
    """`agentrl eval --max-context-tokens N` reaches evaluate_model (BFCL's prompts need more than the 2,048 default)."""
    import agentrl_core.evaluation.runner as runner
    from agentrl_core.evaluation.metrics import EpisodeResult, summarize

    seen = {}

    def fake_evaluate(model, **kwargs):  # the CLI layer only: the evaluation itself is tested end to end elsewhere
        seen.update(kwargs)
        return summarize([EpisodeResult(0, 0, 1.0, True, 2, metrics={"well_formed": 1.0})])

    monkeypatch.setattr(runner, "evaluate_model", fake_evaluate)
    monkeypatch.setenv("COLUMNS", "250")  # the printed table unwrapped
    args = ["eval", "--env", "household", "--tasks", "1", "--compute-dtype", "float32", "--env-url", "http://127.0.0.1:9"]
    assert main([*args, "--max-context-tokens", "6144"]) == 0
    assert seen["max_context_tokens"] == 6144 and seen["n_tasks"] == 1
    assert main(args) == 0 and seen["max_context_tokens"] == 2048
    assert "well_formed" in capsys.readouterr().out  # an episode metric gets its column in the printed table
