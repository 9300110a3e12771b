"""Every flow is a command: `agentrl sft`, `curriculum`, `batch-eval` and `nightly-eval` run their flows for real
(Prefect test harness, tiny model, real env server) with the recipe/override conventions of `agentrl run`, and
each run's record ends completed in the registry."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from agentrl.cli import FLOW_COMMANDS, build_parser, main
from agentrl_core.store import open_registry
from tests.flows.conftest import tiny_overrides

pytestmark = pytest.mark.slow


def kinds(root: Path) -> dict[str, str]:
    with open_registry(None, root) as reg:
        return {r.recipe["kind"]: r.status for r in reg.runs() if "kind" in r.recipe}


def test_help_lists_every_flow_command(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--help"])
    out = capsys.readouterr().out
    assert all(command in out for command in FLOW_COMMANDS)


def test_sft_then_batch_and_nightly_evaluation_from_the_command_line(prefect_harness, tiny_model_path, tmp_path,
                                                                   monkeypatch):
    import tasks.lifecycle

    opened = []
    real = tasks.lifecycle.open_registry
    monkeypatch.setattr(tasks.lifecycle, "open_registry", lambda *a, **kw: opened.append(a) or real(*a, **kw))
    root = tmp_path / "runs"
    assert main(["sft", "household_grpo", *tiny_overrides(tiny_model_path, root), "env.test_tasks=1"]) == 0
    assert len(opened) == 1  # one registry for the whole run: its record, stage, export and evaluations
    monkeypatch.undo()
    export = root / "tiny" / "export" / "sft"
    assert (export / "COMPLETE").exists()
    board = tmp_path / "board"
    assert main(["batch-eval", "--checkpoints", str(export), "--envs", "household", "--tasks", "1", "--max-turns",
                 "2", "--root", str(root), "--report-dir", str(board)]) == 0
    assert (board / "leaderboard.md").exists()
    with open_registry(None, root) as reg:
        assert len([e for e in reg.evals() if e.checkpoint_uri == str(export.resolve())]) >= 1
    # nightly: the SFT export was recorded by the sft flow and is evaluated now (batch-eval's grid differs)
    assert main(["nightly-eval", "--envs", "household", "--tasks", "1", "--max-turns", "2", "--root", str(root),
                 "--report-dir", str(board)]) == 0
    assert kinds(root) == {"sft": "completed", "batch-eval": "completed", "nightly-eval": "completed"}


def test_a_curriculum_from_the_command_line_scores_each_stage_on_its_own_tasks(prefect_harness, tiny_model_path,
                                                                              tmp_path):
    import pyarrow.parquet as pq

    cur = tmp_path / "two.yaml"  # stage a warm-starts with SFT on 2 expert demos, then GRPO from that SFT
    cur.write_text(yaml.safe_dump({"base_recipe": "household_grpo", "evaluate": False, "evaluate_each_stage": True,
                                   "stages": [{"name": "a", "overrides": ["trainer.steps=1", "sft.enabled=true",
                                                                          "sft.demos=2", "sft.epochs=1"]},
                                              {"name": "b", "overrides": ["trainer.steps=1", "sft.enabled=false",
                                                                          "env.kwargs.max_steps=5"]}]}))
    root = tmp_path / "runs"
    overrides = [f"model.name={tiny_model_path}", f"run.root={root}", "run.name=cur", "env.max_turns=8",
                 "rollout.tasks_per_step=1", "rollout.group_size=2", "rollout.sampling.max_new_tokens=4",
                 "model.compute_dtype=float32", "env.test_tasks=2", "eval.sampling.max_new_tokens=4"]
    assert main(["curriculum", str(cur), "--until", "a", *overrides]) == 0  # stage a alone, then the rest
    assert (root / "cur" / "export" / "a" / "COMPLETE").exists() and not (root / "cur" / "export" / "b").exists()
    a_trained = [(root / "cur" / "a" / f).read_bytes() for f in ("metrics.jsonl", "report/eval.json")]
    assert main(["curriculum", str(cur), *overrides]) == 0
    assert (root / "cur" / "export" / "b" / "COMPLETE").exists()
    assert [(root / "cur" / "a" / f).read_bytes() for f in ("metrics.jsonl", "report/eval.json")] == a_trained
    assert kinds(root) == {"curriculum": "completed"}
    warm = root / "cur" / "a" / "sft" / "export"
    assert (warm / "COMPLETE").exists() and not (root / "cur" / "b" / "sft").exists()
    grpo_a = json.loads(next((root / "cur" / "a" / "checkpoints").glob("step_*/trainer_state.json")).read_text())
    assert Path(grpo_a["init_model"]).resolve() == warm.resolve()  # stage a's GRPO started from its warm start
    pairs = {"a": [("a-sft", "a-start"), ("a-trained", "a-sft"), ("a-trained", "a-start")],
             "b": [("b-trained", "b-start")]}
    for stage, start in (("a", str(tiny_model_path)), ("b", str(root / "cur" / "export" / "a"))):
        report = json.loads((root / "cur" / stage / "report" / "eval.json").read_text())
        models = [f"{stage}-start", *(["a-sft"] if stage == "a" else []), f"{stage}-trained"]
        assert [row["model"] for row in report["rows"]] == models
        assert [(c["a"], c["b"]) for c in report["comparisons"] if c["metric"] == "success"] == \
            pairs[stage]
        played = pq.read_table(root / "cur" / "eval" / f"{stage}-start" / "trajectories.parquet")
        assert set(played.column("model").to_pylist()) == {start}  # stage b starts from stage a's export
    played = pq.read_table(root / "cur" / "eval" / "a-sft" / "trajectories.parquet")
    assert set(played.column("model").to_pylist()) == {str(warm)}
    assert json.loads((root / "cur" / "report" / "eval.json").read_text())["rows"] == []  # `evaluate: false`
    with open_registry(None, root) as reg:  # stage a's export keeps its score on a's tasks and on b's
        assert sorted((e.split, e.metrics["label"]) for e in reg.evals()) == [
            ("test.a", "a-sft"), ("test.a", "a-start"), ("test.a", "a-trained"), ("test.b", "b-start"),
            ("test.b", "b-trained")]


def test_a_stage_split_names_the_stage_within_the_registry_column():
    from tasks.records import stage_split

    assert stage_split("stage1") == "test.stage1"
    long = stage_split("s" * 40)
    assert len(long) == 32 and long.startswith("test.") and long != stage_split("s" * 41)


def test_a_bad_override_fails_before_any_flow_starts(tmp_path, capsys):
    assert main(["curriculum", "bfcl", "trainer.stepz=1", f"run.root={tmp_path}"]) == 2
    assert "trainer.stepz" in capsys.readouterr().err
    assert main(["curriculum", "bfcl", "--until", "stage4", f"run.root={tmp_path}"]) == 2
    assert "no stage 'stage4' to stop after; the curriculum's stages are stage1, stage2, stage3" in \
        " ".join(capsys.readouterr().err.split())
    assert main(["sft", "household_grpo", "sft.epochz=1", f"run.root={tmp_path}"]) == 2
    assert not any(tmp_path.iterdir())
