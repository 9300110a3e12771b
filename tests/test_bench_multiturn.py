"""The multi-turn learning benchmark's own logic: SFT settings, which runs it compares, task types, the plot."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from agentrl_core.evaluation.metrics import EvalSummary, EpisodeResult, summarize
from agentrl_core.training.session import StageResult
from bench.bench_multiturn import (Bench, SftSetting, arm_overrides, by_type, check_estimator, comparisons, curves, plot,
                                  stage_minutes, task_types)


def test_sft_settings_parse_and_reject_bad_text() -> None:
    assert SftSetting.parse("32x2") == SftSetting(32, 2) and str(SftSetting(64, 1)) == "64x1"
    assert SftSetting(8, 3).overrides() == ["sft.demos=8", "sft.epochs=3"]
    for bad in ("32", "x2", "0x2", "32x0", "ax2"):
        with pytest.raises(argparse.ArgumentTypeError, match="DEMOSxEPOCHS"):
            SftSetting.parse(bad)


def _summary(wins: dict[int, bool]) -> EvalSummary:
    return summarize([EpisodeResult(task_id=t, sample=0, reward=float(w), success=w, steps=4) for t, w in wins.items()])


def _bench(tests: dict[str, EvalSummary], seeds: list[int], algorithms: list[str], root: Path) -> Bench:
    bench = Bench.__new__(Bench)  # no env server: only the results
    bench.args = argparse.Namespace(seeds=seeds, algorithms=algorithms, root=str(root))
    bench.tests, bench.minutes, bench.validation = tests, {}, {}
    return bench


def test_comparisons_pair_each_rl_model_with_its_start_the_control_and_each_other(tmp_path: Path) -> None:
    ids = range(40)
    tests = {"sft-seed0": _summary({t: t < 10 for t in ids}), "gigpo-seed0": _summary({t: t < 30 for t in ids}),
             "grpo-seed0": _summary({t: t < 20 for t in ids}), "sft-control-seed0": _summary({t: t < 12 for t in ids}),
             "sft-seed1": _summary({t: t < 8 for t in ids}), "gigpo-seed1": _summary({t: t < 9 for t in ids})}
    comps = {(c.a, c.b): c for c in comparisons(_bench(tests, [0, 1], ["gigpo", "grpo"], tmp_path))}
    assert set(comps) == {("gigpo-seed0", "sft-seed0"), ("grpo-seed0", "sft-seed0"),
                          ("gigpo-seed0", "sft-control-seed0"), ("grpo-seed0", "sft-control-seed0"),
                          ("gigpo-seed0", "grpo-seed0"), ("gigpo-seed1", "sft-seed1")}  # seed 1 ran one arm
    gain = comps[("gigpo-seed0", "sft-seed0")]
    assert gain.diff == pytest.approx(0.5) and gain.low > 0 and gain.n == 40
    assert comps[("gigpo-seed1", "sft-seed1")].low < 0 < comps[("gigpo-seed1", "sft-seed1")].high
    tests["gigpo-pool-seed0"] = _summary({t: t < 25 for t in ids})
    pooled = {(c.a, c.b) for c in comparisons(_bench(tests, [0], ["gigpo", "gigpo-pool"], tmp_path))}
    assert ("gigpo-pool-seed0", "gigpo-seed0") in pooled and ("gigpo-pool-seed0", "sft-seed0") in pooled
    assert arm_overrides("gigpo-pool") == ["algorithm.advantage=gigpo", "experience.enabled=true",
                                           "experience.mode=mixed"]
    assert arm_overrides("grpo") == ["algorithm.advantage=grpo"]
    tests["gigpo-filter-seed0"] = _summary({t: t < 28 for t in ids})
    filtered = {(c.a, c.b) for c in comparisons(_bench(tests, [0], ["gigpo", "gigpo-filter"], tmp_path))}
    assert ("gigpo-filter-seed0", "gigpo-seed0") in filtered
    assert arm_overrides("gigpo-filter") == ["algorithm.advantage=gigpo", "algorithm.rollout_filter_ratio=0.5"]


def test_success_by_household_task_type(tmp_path: Path) -> None:
    ids = list(range(10_000, 10_040))
    types = task_types("household", {"max_steps": 8, "two_room_prob": 0.0, "max_receptacles": 4, "max_objects": 3}, ids)
    assert set(types) == set(ids) and set(types.values()) <= {"put", "clean", "heat", "cool"}
    assert task_types("countdown", {}, ids) is None
    table = by_type(_bench({"m": _summary({t: types[t] == "put" for t in ids})}, [0], ["gigpo"], tmp_path), types)
    rates = table["m"]
    assert rates[next(k for k in rates if k.startswith("put"))] == 1.0
    assert all(v == 0.0 for k, v in rates.items() if not k.startswith("put"))
    assert sum(int(k.split("n=")[1].rstrip(")")) for k in rates) == 40


def test_alfworld_task_types_are_the_generated_games_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for module in ("alfworld", "textworld", "fast_downward"):  # the games are made by the real engine
        pytest.importorskip(module)
    from agentrl_core.envs.alfworld.dataset import GeneratedGames

    monkeypatch.setenv("AGENTRL_HOME", str(tmp_path))  # games cached for this test only
    ids = list(GeneratedGames().splits["test"])[:6]
    types = task_types("alfworld", {"max_steps": 20, "list_actions": "here"}, ids)
    games = GeneratedGames()
    assert len(set(types.values())) == 6  # consecutive ids take turns over the six types
    for t in ids:  # each game's own record of what it asks (its generator wrote it)
        assert games.traj_data(t)["task_type"].startswith(types[t])

def test_curves_read_the_rl_metrics_and_plot(tmp_path: Path) -> None:
    stage = tmp_path / "gigpo-seed0" / "grpo"
    stage.mkdir(parents=True)
    (stage / "metrics.jsonl").write_text(
        '{"step": 0, "val/success_rate": 0.1}\n{"step": 1, "reward_mean": 0.2, "samples_backpropagated": 48, '
        '"invalid_action_rate": 0.05}\n'
        '{"step": 2, "reward_mean": 0.4, "val/success_rate": 0.3, "samples_backpropagated": 40}\n')
    bench = _bench({}, [0], ["gigpo"], tmp_path)
    bench.minutes = {"gigpo-seed0": 1.0, "sft32x2-seed0": 1.0}  # the SFT run has no RL metrics
    runs = curves(bench)
    assert runs == {"gigpo-seed0": {"reward": [(1, 0.2), (2, 0.4)], "validation": [(0, 0.1), (2, 0.3)],
                                    "samples_trained": [], "samples_backpropagated": [(1, 48), (2, 40)],
                                    "groups_with_signal": [], "invalid_action_rate": [(1, 0.05)]}}
    plot(runs, tmp_path / "curves.png")
    assert (tmp_path / "curves.png").stat().st_size > 1000


def test_each_algorithm_sets_its_estimator_whatever_the_recipe_says() -> None:
    from agentrl_core.recipes import load_recipe
    from bench.bench_multiturn import ARMS

    for recipe in ("household_learn", "household_grpo"):
        for name, (advantage, _) in ARMS.items():
            cfg = load_recipe(recipe, arm_overrides(name))
            assert cfg.algorithm.advantage == advantage and cfg.experience.enabled == name.endswith("-pool")


def test_an_arm_that_trained_with_another_estimator_is_refused(tmp_path: Path) -> None:
    (tmp_path / "algorithm.json").write_text('{"advantage": "gigpo", "kl_coef": 0.0}')
    check_estimator(tmp_path, "gigpo")
    with pytest.raises(RuntimeError, match="meant to train with advantage=grpo trained with advantage=gigpo"):
        check_estimator(tmp_path, "grpo")


def test_a_score_with_env_failures_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from agentrl_core.recipes import load_recipe
    from bench import bench_multiturn

    failed = summarize([EpisodeResult(task_id=t, sample=0, reward=0.0, success=False, steps=0,
                                      error="reset failed: EnvServerUnavailable" if t < 3 else None) for t in range(8)])
    monkeypatch.setattr(bench_multiturn, "evaluate_model", lambda *a, **k: failed)
    bench = _bench({}, [0], ["gigpo"], tmp_path)
    bench.url = "http://127.0.0.1:9"
    cfg = load_recipe("household_learn", [])
    with pytest.raises(RuntimeError, match=r"val-sft: 3 of 8 episodes failed in the env.*trajectories.parquet"):
        bench.play(cfg, tmp_path, list(range(8)), "val-sft")
    clean = _summary({t: t % 2 == 0 for t in range(8)})
    monkeypatch.setattr(bench_multiturn, "evaluate_model", lambda *a, **k: clean)
    assert bench.play(cfg, tmp_path, list(range(8)), "val-sft") is clean


def _earlier_run(tmp_path: Path, sft_start: str = "128x2") -> Path:
    """An earlier run's JSON as `report` writes it: seed 0 trained 128x2 in 10 min and GiGPO for 23 min."""
    ids = list(range(40))
    run = {"args": {"recipe": "household_learn", "overrides": ["trainer.optim.lr=1e-5"], "seeds": [0],
                    "algorithms": ["gigpo"], "test_tasks": 40, "val_tasks": 8},
           "sft_start": sft_start, "test_ids": ids, "compute_dtype": "float32",
           "figures": {"minutes_sft128x2-seed0": 10.0, "minutes_gigpo-seed0": 23.0},
           "tests": {"sft-seed0": _summary({t: t < 10 for t in ids}).to_dict(),
                     "gigpo-seed0": _summary({t: t < 30 for t in ids}).to_dict()}}
    path = tmp_path / "earlier.json"
    path.write_text(json.dumps(run))
    return path


def test_the_control_of_an_earlier_run_is_sized_from_its_times_and_paired_with_its_models(tmp_path: Path) -> None:
    from bench.bench_multiturn import adopt_earlier_run, run_earlier_controls

    args = argparse.Namespace(control_of=_earlier_run(tmp_path), recipe="household_learn", overrides=[], seeds=[0, 1],
                              algorithms=["gigpo", "grpo"], test_tasks=200, val_tasks=64, root=str(tmp_path),
                              controls=["more-demos", "same-demos"], compute_dtype=None)
    earlier = adopt_earlier_run(args)  # the control trains as that run's SFT did
    assert (args.overrides, args.seeds, args.algorithms, args.test_tasks) == (["trainer.optim.lr=1e-5"], [0], ["gigpo"], 40)
    assert args.compute_dtype == "float32"  # the earlier run's, whatever this machine would choose
    bench = _bench({}, args.seeds, args.algorithms, tmp_path)
    bench.args, bench.test_ids, trained = args, list(range(40)), []
    bench.sft = lambda name, seed, setting, base: trained.append((name, setting)) or tmp_path
    bench.play = lambda cfg, model, ids, label: _summary({t: t < 20 for t in ids})
    bench.cfg = lambda name, seed, *extra: None
    assert run_earlier_controls(bench, earlier, tmp_path) == SftSetting(128, 2)
    # 128 x 33 / 10 demos for the same 2 epochs; the same 128 demos for 2 x 33 / 10 epochs
    assert trained == [("sftcontrol422x2-seed0", SftSetting(422, 2)), ("sftsame128x7-seed0", SftSetting(128, 7))]
    comps = {(c.a, c.b): c for c in comparisons(bench)}
    assert comps[("gigpo-seed0", "sft-control-seed0")].diff == pytest.approx(0.25)
    assert comps[("gigpo-seed0", "sft-samedemos-seed0")].diff == pytest.approx(0.25)
    assert comps[("gigpo-seed0", "sft-seed0")].diff == pytest.approx(0.5)  # the earlier scores, read back


def test_the_controls_spend_the_rl_time_on_more_demos_or_on_more_epochs_of_the_same() -> None:
    from bench.bench_multiturn import more_demos, same_demos

    assert more_demos(SftSetting(64, 2), 1.5) == SftSetting(96, 2)
    assert same_demos(SftSetting(64, 2), 1.5) == SftSetting(64, 3)
    assert same_demos(SftSetting(64, 1), 1.2) == SftSetting(64, 2)  # always at least one epoch more than the start


def test_a_control_that_cannot_be_sized_or_paired_is_refused(tmp_path: Path) -> None:
    from bench.bench_multiturn import adopt_earlier_run, run_earlier_controls

    def args(path: Path, overrides: list[str]) -> argparse.Namespace:
        return argparse.Namespace(control_of=path, recipe="household_learn", overrides=overrides, seeds=[0],
                                  algorithms=["gigpo"], test_tasks=40, val_tasks=8, root=str(tmp_path),
                                  controls=["more-demos"], compute_dtype=None)

    with pytest.raises(SystemExit, match=r"used the overrides \['trainer.optim.lr=1e-5'\]"):
        adopt_earlier_run(args(_earlier_run(tmp_path), ["trainer.optim.lr=3e-5"]))
    given = args(_earlier_run(tmp_path, "runs/x/export"), [])
    bench = _bench({}, [0], ["gigpo"], tmp_path)
    bench.args, bench.test_ids = given, list(range(40))
    with pytest.raises(SystemExit, match="started RL from a given export"):
        run_earlier_controls(bench, adopt_earlier_run(given), tmp_path)
    bench.args, bench.test_ids = args(_earlier_run(tmp_path), []), list(range(41))
    with pytest.raises(SystemExit, match="other test tasks"):
        run_earlier_controls(bench, adopt_earlier_run(bench.args), tmp_path)


def test_a_control_computes_in_the_dtype_of_the_run_it_controls(tmp_path: Path) -> None:
    from bench.bench_multiturn import earlier_dtype

    source = tmp_path / "run.json"
    assert earlier_dtype(source, {"compute_dtype": "bfloat16"}, None) == "bfloat16"
    assert earlier_dtype(source, {"compute_dtype": "float32"}, "float32") == "float32"
    with pytest.raises(SystemExit, match="computed in float32, not bfloat16"):
        earlier_dtype(source, {"compute_dtype": "float32"}, "bfloat16")
    old = {"cpu": "CPU: AMD EPYC (family 25 model 1), avx2"}  # recorded before the field existed
    with pytest.raises(SystemExit, match=r"does not record its compute dtype.*--compute-dtype float32 or bfloat16.*avx2"):
        earlier_dtype(source, old, None)
    assert earlier_dtype(source, old, "float32") == "float32"


def test_the_report_records_each_model_and_its_invalid_commands(tmp_path: Path, capsys) -> None:
    from bench.bench_multiturn import report
    from agentrl_core.recipes import load_recipe

    ids = range(20)
    played = {label: summarize([EpisodeResult(task_id=t, sample=0, reward=float(t < cut), success=t < cut, steps=4,
                                              metrics={"invalid_action_rate": 0.25 if t % 2 else 0.0}) for t in ids])
              for label, cut in (("sft-seed0", 5), ("gigpo-seed0", 10))}
    bench = _bench(played, [0], ["gigpo"], tmp_path)
    bench.args = argparse.Namespace(seeds=[0], algorithms=["gigpo"], root=str(tmp_path), recipe="household_learn",
                                    sft_start=None, json=str(tmp_path / "out.json"), sft_grid=[SftSetting(8, 1)])
    bench.cfg = lambda name, seed, *extra: load_recipe("household_learn", [f"run.root={tmp_path}"])
    bench.val_ids, bench.test_ids, bench.dtype = [], list(ids), "float32"
    report(bench, SftSetting(8, 1), 60.0)
    out = json.loads((tmp_path / "out.json").read_text())
    assert out["figures"]["gigpo-seed0_success"] == 0.5 and out["figures"]["gigpo-seed0_invalid_action_rate"] == 0.125
    assert out["tests"]["sft-seed0"]["task_metrics"]["invalid_action_rate"]["1"] == 0.25
    assert "gigpo-seed0: 50.0% [29.9, 70.1] n=20; invalid commands per episode 12.5%" in capsys.readouterr().out


def test_a_resumed_stage_is_timed_from_its_metrics_not_from_the_call(tmp_path: Path) -> None:
    """A run started again after a failure finds its SFT finished: the call takes seconds, but the controls are
    sized by the minutes the stage trained."""
    rows = [{"step": 1, "time": 1000.0, "time/train_s": 30.0, "loss": 1.0},
            {"step": 2, "time": 1030.0, "time/train_s": 30.0, "loss": 0.9},
            {"step": 3, "time": 1090.0, "time/train_s": 30.0, "loss": 0.8}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    fresh = StageResult("sft", "ckpt", 3, 0)
    assert stage_minutes(fresh, tmp_path, 2.5) == 2.5
    resumed = StageResult("sft", "ckpt", 3, 3)
    assert stage_minutes(resumed, tmp_path, 0.05) == pytest.approx((90.0 + 30.0) / 60)
