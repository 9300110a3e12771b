"""bench/invalid_actions.py: refused commands counted from played messages, and read back from a results file."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bench.invalid_actions import main


def episode(*turns: tuple[str, str]) -> list[dict[str, str]]:
    """(observation, command) turns as the chat messages a trajectory file keeps."""
    messages = [{"role": "system", "content": "You are in a room."}]
    for observation, command in turns:
        messages += [{"role": "user", "content": observation}, {"role": "assistant", "content": command}]
    return messages


def record(path: Path, test: dict, overrides: list[str], dirty: bool = False) -> str:
    path.write_text(json.dumps({"git_revision": "0123456789abcdef", "git_dirty": dirty,
                                "args": {"overrides": overrides}, "tests": {"sft": test}}))
    return str(path)


def test_commands_not_listed_and_repeats_are_counted_from_the_messages(tmp_path, capsys):
    listed = "You see a desk.\nActions: go to desk 1 | open drawer 1"
    rows = [episode((listed, "go to desk 1"), (listed, "go to sofa 1"), (listed, "go to sofa 1")),
            episode((listed, "open drawer 1"))]
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"messages": rows}), path)
    assert main([f"a={path}"]) == 0
    assert capsys.readouterr().out.strip() == (
        "a: 2 episodes, 4 commands, not listed 2 (50.0%), most often 'go to sofa 1' (2), immediate repeats 1")


def test_a_penalised_record_gives_the_count_its_rewards_imply(tmp_path, capsys):
    # 4 episodes, 2 won, 3 refused commands at p = 0.1: mean return (2 - 0.3) / 4; 26 turns in all
    test = {"n_episodes": 4, "success_rate": 0.5, "mean_reward": (2 - 0.3) / 4, "mean_steps": 6.5, "n_errors": 0}
    rec = record(tmp_path / "r.json", test, ["trainer.optim.lr=2e-5", "env.kwargs.invalid_action_penalty=0.1"])
    assert main([f"a={rec}#sft"]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith("a: 4 episodes, 26 commands, refused 3 (11.5%), from its rewards at p = 0.1")
    assert "#sft, recorded at 01234567, clean" in line


def test_a_recorded_invalid_action_rate_is_reported_with_its_interval(tmp_path, capsys):
    test = {"n_episodes": 200, "metrics": {"invalid_action_rate": {"mean": 0.039, "low": 0.02, "high": 0.07, "n": 200}}}
    rec = record(tmp_path / "r.json", test, [])
    assert main([f"a={rec}#sft"]) == 0
    assert "a: refused commands per turn, mean over episodes 3.9% [2.0, 7.0] n=200" in capsys.readouterr().out


@pytest.mark.parametrize(("test", "overrides", "dirty", "says"), [
    ({"n_episodes": 4, "success_rate": 0.5, "mean_reward": 0.5, "mean_steps": 6.5}, [], False,
     "neither the record nor its rewards count refused commands"),
    ({"n_episodes": 4, "success_rate": 0.5, "mean_reward": 0.47, "mean_steps": 6.5},
     ["env.kwargs.invalid_action_penalty=0.1"], False, "not a whole count"),
    ({"n_episodes": 4, "success_rate": 0.5, "mean_reward": 0.45, "mean_steps": 6.5},
     ["env.kwargs.invalid_action_penalty=0.1"], True, "modified working tree"),
])
def test_what_cannot_be_counted_is_refused_saying_why(tmp_path, capsys, test, overrides, dirty, says):
    rec = record(tmp_path / "r.json", test, overrides, dirty)
    assert main([f"a={rec}#sft"]) == 2
    captured = capsys.readouterr()
    assert says in captured.err and captured.out == ""


def test_an_unknown_model_or_file_says_what_there_is(tmp_path, capsys):
    rec = record(tmp_path / "r.json", {"n_episodes": 1}, [])
    assert main([f"a={rec}#grpo"]) == 2
    assert "no scored model 'grpo'; its models are ['sft']" in capsys.readouterr().err
    assert main([f"a={tmp_path / 'none.parquet'}"]) == 2
    assert "no such trajectory file" in capsys.readouterr().err
