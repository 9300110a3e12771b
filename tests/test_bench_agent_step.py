"""The step-cost benchmark's own logic: settings, their arguments and the summary of their steps."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

import bench.bench_agent_step as bench
from bench.bench_agent_step import Setting, parse, sft_name, starts_of, summarise


def test_settings_parse_their_overrides_and_reject_bad_text() -> None:
    assert Setting.parse("recipe:") == Setting("recipe", ())
    assert Setting.parse("lean:algorithm.kl_rows=signal,trainer.memory_gb=8") == Setting(
        "lean", ("algorithm.kl_rows=signal", "trainer.memory_gb=8"))
    for bad, why in (("noname", "NAME:KEY=VALUE"), (":a=1", "NAME:KEY=VALUE"), ("x:a=1,b", "overrides are KEY=VALUE")):
        with pytest.raises(argparse.ArgumentTypeError, match=why):
            Setting.parse(bad)


def test_arguments_default_to_the_recipe_and_refuse_repeated_names(capsys) -> None:
    args = parse(["--recipe", "household_grpo", "env.max_turns=4"])
    assert args.settings == [Setting("recipe", ())] and args.overrides == ["env.max_turns=4"]
    with pytest.raises(SystemExit):
        parse(["--setting", "a:x=1", "--setting", "a:y=2"])
    assert "setting names must differ" in capsys.readouterr().err


def test_a_summary_is_the_median_of_each_figure_and_the_largest_peak() -> None:
    steps = [{"time/step_s": s, "time/rollout_s": s / 2, "episode_tokens": 100.0 * s} for s in (3.0, 1.0, 2.0)]
    row = summarise(steps, [4.0, 6.5])
    assert row["time/step_s"] == 2.0 and row["time/rollout_s"] == 1.0 and row["episode_tokens"] == 200.0
    assert row["peak_rss_gib"] == 6.5 and row["steps"] == 3.0
    assert "turns_mean" not in row  # a figure some step lacks is left out, not made up


def test_a_setting_that_changes_the_environment_gets_its_own_sft_start(monkeypatch) -> None:
    trained = []
    monkeypatch.setattr(bench, "sft_start", lambda args, env=(): trained.append(env) or Path(sft_name(env)))
    args = parse(["--start", "given", "--setting", "recipe:", "--setting", "kl:algorithm.kl_rows=signal",
                  "--setting", "here:env.kwargs.list_actions=here,algorithm.kl_rows=signal",
                  "--setting", "here2:trainer.memory_gb=6,env.kwargs.list_actions=here"])
    starts = starts_of(args)
    assert trained == [("env.kwargs.list_actions=here",)]  # one SFT per environment, none for --start's
    assert starts["recipe"] == starts["kl"] == Path("given")
    assert starts["here"] == starts["here2"] == Path(sft_name(("env.kwargs.list_actions=here",)))
    assert sft_name(()) == "sft" and sft_name(("env.max_turns=4",)) != sft_name(("env.max_turns=5",))


def test_a_child_reports_its_own_peak_memory_not_its_parents(tmp_path: Path) -> None:
    """The settings run in child processes of a benchmark that may be large: ru_maxrss would report the
    parent's size at fork; the peak the bench reads is the child's own."""
    import subprocess
    import sys

    held = bytearray(400 * 2**20)
    held[::4096] = b"\x01" * len(held[::4096])  # resident in this (parent) process
    code = "from bench._common import peak_rss_gib; print(peak_rss_gib())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[1]).stdout
    assert float(out) < 0.3 and len(held) == 400 * 2**20
