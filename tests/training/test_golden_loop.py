"""The in-process GRPO loop reproduces its golden run (recorded before the loop became one loop over executors).

A refactor of the loop must not change what a user's recorded figures came from: the same seed gives the same
episodes (discrete metrics equal), the same update (float metrics within golden_loop.REL relative) and the same
weights (per-tensor sums within REL relative). See tests/training/golden_loop.py for the run and how to refresh it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.training.golden_loop import CLOSE, EXACT, GOLDEN, NOISE, REL, run

pytestmark = pytest.mark.slow


def test_the_loop_reproduces_its_golden_run(tiny_model_path: Path, env_server_url: str, tmp_path: Path) -> None:
    golden = json.loads(GOLDEN.read_text())
    got = run(tiny_model_path, env_server_url, tmp_path)
    assert len(got["steps"]) == len(golden["steps"]) == 3
    for step, (g, want) in enumerate(zip(got["steps"], golden["steps"]), start=1):
        assert set(g) == set(want), step
        for key in EXACT:
            if key in want:
                assert g[key] == pytest.approx(want[key], rel=1e-9, abs=1e-12), (step, key)
        for key in CLOSE:
            if key in want:
                assert g[key] == pytest.approx(want[key], rel=REL, abs=1e-7), (step, key)
        for key, bound in NOISE.items():
            if key in want:
                assert 0 <= g[key] <= bound and want[key] <= bound, (step, key, g[key])
    assert got["weights"].keys() == golden["weights"].keys()
    for name, stats in golden["weights"].items():
        assert got["weights"][name] == pytest.approx(stats, rel=REL, abs=1e-6), name


def test_the_golden_run_trains_on_signal() -> None:
    # the golden run is worth guarding only if its updates did something: samples back-propagated with nonzero
    # advantages (from the KL in the reward, steps 2 and 3), gradients, a policy loss
    golden = json.loads(GOLDEN.read_text())
    assert all(s["samples_backpropagated"] > 0 and s["grad_norm"] > 0 for s in golden["steps"])
    assert all(s["adv_abs_mean"] > 0.5 and s["pg_loss"] != 0 and s["shaped_reward_mean"] < 0 for s in golden["steps"][1:])
