"""The one-process asynchronous schedule of bench/bench_gpu_async.py, checked on a CPU with a toy model (the GPU
figure itself needs a GPU machine)."""

from __future__ import annotations

import pytest

from bench.bench_gpu_async import main

TINY = ["--device", "cpu", "--tiny", "--prompts", "2", "--group", "4", "--prompt-len", "12", "--new-tokens", "12",
        "--micro", "4", "--lr", "1e-2"]


def test_lag_zero_is_the_synchronous_loop_and_a_lag_is_bounded_and_real() -> None:
    result = main([*TINY, "--steps", "4", "--lags", "0", "1", "2"])
    modes = {m["mode"]: m for m in result["modes"]}
    assert modes["sync"]["lag_max"] == 0
    k0 = modes["async-k0"]  # through the thread and the weight hand-off: bit for bit the synchronous run
    assert k0["same_samples_as_sync"] == 4 and k0["same_weights_as_sync"] and k0["lag_max"] == 0
    for k in (1, 2):
        assert modes[f"async-k{k}"]["lag_max"] <= k
    k1 = modes["async-k1"]  # the first batch is sampled by version 0 in every mode; later ones by older weights
    assert 1 <= k1["same_samples_as_sync"] < 4 and not k1["same_weights_as_sync"] and k1["lag_max"] == 1
    assert all(m["steps_per_hour"] > 0 and "vs_sync" in m for m in modes.values())


def test_a_run_too_short_to_measure_is_refused() -> None:
    with pytest.raises(SystemExit):
        main([*TINY, "--steps", "1"])
