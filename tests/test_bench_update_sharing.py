"""bench/bench_update_sharing.py: its peer plan, token count and summary (the timed run itself is by hand)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import bench_update_sharing as bench  # noqa: E402
from agentrl_core.training.batching import collate  # noqa: E402
from agentrl_core.training.shared_prefix import plan_prefixes  # noqa: E402
from tests.training.test_shared_prefix import group_batch, repeating_batch  # noqa: E402


def test_the_peer_shares_the_prompt_only_and_turns_share_more() -> None:
    trajs = repeating_batch()
    idx = list(range(len(trajs)))
    peer = bench.prompt_only_prefixes(trajs, idx)
    assert [g.length for g in peer] == [29, 30, 31]  # up to the token that predicts the first reply
    assert [g.length for g in bench.prompt_only_prefixes(group_batch(), idx[:12])] == [39, 40, 41]
    mb_peer, mb_turns = collate(trajs, idx, 0), collate(trajs, idx, 0)
    mb_peer.prefixes, mb_turns.prefixes = peer, plan_prefixes(trajs, idx)
    plain = collate(trajs, idx, 0)
    whole = bench.forward_tokens(trajs, [plain])
    assert whole == plain.input_ids.numel()
    assert bench.forward_tokens(trajs, [mb_turns]) < bench.forward_tokens(trajs, [mb_peer]) < whole


def test_rollout_files_keep_their_groups_apart(tmp_path: Path) -> None:
    from agentrl_core.rollout.io import write_trajectories

    a, b = write_trajectories(tmp_path / "a.parquet", group_batch()), write_trajectories(tmp_path / "b.parquet",
                                                                                         group_batch(seed=1))
    trajs = bench.load_rollouts([a, b])
    assert len(trajs) == 24 and sorted({t.group for t in trajs}) == [0, 1, 2, 3, 4, 5]
    assert (tmp_path / "a.parquet").exists() and bench.DATA.is_dir() and sorted(bench.DATA.glob("*.parquet"))


def test_ways_are_interleaved_and_summarised() -> None:
    calls = []

    def fake(way, trajs, model0, args, cfg):  # noqa: ANN001, ANN202
        calls.append(way)
        return {"update_s": {"plain": 4.0, "prompt": 3.0, "turns": 2.0}[way], "forward_tokens": 100.0,
                "loss": 0.5, "grad_norm": 2.0 if way != "turns" else 2.002}

    runs = bench.run_ways([], None, argparse.Namespace(repeats=2), None, update=fake)
    assert calls == list(bench.WAYS) * 2
    fig = bench.summarise(runs)
    assert fig["speedup_turns_vs_plain"] == 2.0 and fig["speedup_turns_vs_prompt"] == 1.5
    assert fig["max_rel_grad_norm_gap"] == pytest.approx(0.001) and fig["max_loss_gap"] == 0.0
