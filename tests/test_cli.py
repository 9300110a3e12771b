"""The command line: help on every command, clear errors for bad recipes, the env list."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from agentrl.cli import build_parser, main

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("command", ["import-model", "envs", "serve", "run", "eval"])
def test_every_command_has_help(command, capsys):
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args([command, "--help"])
    assert exit_.value.code == 0
    assert "usage: agentrl" in capsys.readouterr().out


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
