"""bench/truncated_rewards.py counts, from a run's rollout logs, the cut-off episodes that lost what they earned."""

from __future__ import annotations

from pathlib import Path

from agentrl_core.envs.episode_metrics import EPISODE_METRICS
from agentrl_core.rollout.io import write_trajectories
from agentrl_core.rollout.trajectory import Trajectory
from bench.truncated_rewards import count, main


def _episode(reward: float, progress: float, *, truncated: bool = False, by: str | None = None) -> Trajectory:
    extra = {EPISODE_METRICS: {"progress": progress}} | ({"truncated_by": by} if by else {})
    return Trajectory(task_id=1, env="bfcl", group=0, sample=0, reward=reward, truncated=truncated,
                      terminated=not truncated, extra=extra)


def _run(tmp_path: Path) -> Path:
    logs = tmp_path / "run" / "grpo" / "rollout_log"
    write_trajectories(logs / "step_000001.parquet", [
        _episode(0.5, 0.5),                                    # finished, rewarded
        _episode(0.0, 0.25, truncated=True, by="context"),     # earned, cut off at the context limit, scored 0
        _episode(0.0, 0.0, truncated=True, by="context"),      # earned nothing, cut off
    ], step=1)
    write_trajectories(logs / "step_000002.parquet", [
        _episode(0.2, 0.2, truncated=True),                    # cut off by the env's own limit, kept its reward
        _episode(0.0, 0.0),
    ], step=2)
    return tmp_path / "run"


def test_counts_every_step_and_tells_lost_rewards_from_kept_ones(tmp_path):
    c = count(_run(tmp_path), "progress")
    assert (c.episodes, c.cut_off, c.at_context_limit, c.cut_off_scored_0) == (5, 3, 2, 2)
    assert (c.earned, c.earned_cut_off_scored_0) == (3, 1)


def test_prints_one_line_per_run_and_refuses_a_folder_without_logs(tmp_path, capsys):
    assert main([str(_run(tmp_path))]) == 0
    assert "5 training episodes, 3 cut off (2 by the rollout at the context limit), 2 of them scored 0; " \
           "3 with progress > 0, 1 of those cut off and scored 0" in capsys.readouterr().out
    assert main([str(tmp_path / "empty")]) == 2
    assert "has no rollout logs" in capsys.readouterr().err
