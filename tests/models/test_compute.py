"""Per-machine compute settings: the dtype gate, the measurement's verdict, the cache, threads, resolution."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from agentrl_core.system import machine_info
from agentrl_core.config import RecipeConfig
from agentrl_core.models import compute_settings
from agentrl_core.models.mixed_precision import autocast

AVX2_ONLY = machine_info.CpuInfo("AMD EPYC 7B12", ("avx2",), 2, 2, "AVX2", False)
BF16_CPU = machine_info.CpuInfo("AMD EPYC 9B45", ("avx2", "avx512f", "avx512_bf16"), 2, 2, "AVX512", True)


def _on_cpu(monkeypatch: pytest.MonkeyPatch, info: machine_info.CpuInfo) -> None:
    """Pretend to run on `info` (the probe torch and /proc/cpuinfo would give)."""
    monkeypatch.setattr(compute_settings, "cpu_info", lambda: info)
    monkeypatch.setattr(compute_settings, "default_device", lambda: "cpu")


def _measure(seconds: dict[str, float], calls: list[str] | None = None):
    def measure(path: Path, modes: list[str]) -> dict[str, float]:
        if calls is not None:
            calls.append(str(path))
        return {m: seconds[m] for m in modes if m in seconds}
    return measure


def _never(path: Path, modes: list[str]) -> dict[str, float]:
    raise AssertionError("measured although bf16 is not supported here")


def test_avx2_only_cpu_picks_float32_without_measuring(home, monkeypatch, tiny_model_path):
    _on_cpu(monkeypatch, AVX2_ONLY)
    choice = compute_settings.choose_compute_dtype(tiny_model_path, measure=_never)
    assert choice.dtype == "float32" and choice.speedup is None
    assert "no bf16 kernels for AMD EPYC 7B12 (avx2" in choice.message()
    assert not compute_settings.cache_file().exists()


@pytest.mark.parametrize(("fp32", "bf16", "expected"), [(1.0, 0.5, "bfloat16"), (1.0, 0.95, "float32"),
                                                        (1.0, 3.0, "float32"), (1.1, 1.0, "bfloat16")])
def test_measurement_decides_where_bf16_is_supported(home, monkeypatch, tiny_model_path, fp32, bf16, expected):
    _on_cpu(monkeypatch, BF16_CPU)
    measure = _measure({"float32": fp32, "bfloat16": bf16})
    choice = compute_settings.choose_compute_dtype(tiny_model_path, measure=measure)
    assert choice.dtype == expected
    assert choice.speedup == pytest.approx(fp32 / bf16)


def test_message_names_the_ratio_and_how_to_override(home, monkeypatch, tiny_model_path):
    _on_cpu(monkeypatch, BF16_CPU)
    measure = _measure({"float32": 0.76, "bfloat16": 0.4})
    msg = compute_settings.choose_compute_dtype(tiny_model_path, measure=measure).message()
    assert msg.startswith("compute dtype bfloat16: 1.9x float32 here (probe pass 0.40 s bf16 vs 0.76 s fp32")
    assert "model.compute_dtype" in msg


def test_choice_is_cached_per_machine_and_model(home, monkeypatch, tiny_model_path, embedded_model_path):
    _on_cpu(monkeypatch, BF16_CPU)
    calls: list[str] = []
    measure = _measure({"float32": 1.0, "bfloat16": 0.5}, calls)
    first = compute_settings.choose_compute_dtype(tiny_model_path, measure=measure)
    again = compute_settings.choose_compute_dtype(tiny_model_path, measure=measure)
    assert (first.cached, again.cached, again.dtype, len(calls)) == (False, True, "bfloat16", 1)
    entry = next(iter(json.loads(compute_settings.cache_file().read_text()).values()))
    assert entry["dtype"] == "bfloat16" and "AMD EPYC 9B45" in entry["cpu"]
    compute_settings.choose_compute_dtype(embedded_model_path, measure=measure)  # another architecture: measured
    monkeypatch.setattr(torch, "__version__", "9.9.9")  # another torch: measured again
    compute_settings.choose_compute_dtype(tiny_model_path, measure=measure)
    other_cpu = machine_info.CpuInfo("Intel Xeon 8480", ("avx2", "avx512_bf16", "amx_bf16"), 2, 2, "AVX512", True)
    _on_cpu(monkeypatch, other_cpu)
    compute_settings.choose_compute_dtype(tiny_model_path, measure=measure)
    assert len(calls) == 4


def test_unfinished_probe_picks_float32_and_is_not_cached(home, monkeypatch, tiny_model_path):
    _on_cpu(monkeypatch, BF16_CPU)
    choice = compute_settings.choose_compute_dtype(tiny_model_path, measure=_measure({"float32": 9.0}))
    assert choice.dtype == "float32" and "did not finish" in choice.reason
    assert not compute_settings.cache_file().exists()


def test_a_probe_that_cannot_run_picks_float32(home, monkeypatch, tiny_model_path):
    _on_cpu(monkeypatch, BF16_CPU)

    def broken(path: Path, modes: list[str]) -> dict[str, float]:
        raise RuntimeError("cannot load this model")

    assert compute_settings.choose_compute_dtype(tiny_model_path, measure=broken).dtype == "float32"
    assert not compute_settings.cache_file().exists()


def test_real_probe_times_both_candidates(tiny_model_path):
    seconds = compute_settings.measure_passes(tiny_model_path, ["float32", "bfloat16"], tokens=16, passes=1)
    assert set(seconds) == {"float32", "bfloat16"} and all(s > 0 for s in seconds.values())
    assert compute_settings.measure_passes(tiny_model_path, ["float32"], budget_s=0.0) == {}  # the budget stops it


def test_resolve_makes_auto_concrete_and_applies_threads(home, monkeypatch, tiny_model_path):
    _on_cpu(monkeypatch, BF16_CPU)
    monkeypatch.setattr(compute_settings, "measure_passes", _measure({"float32": 1.0, "bfloat16": 0.4}))
    monkeypatch.setattr(compute_settings, "usable_cores", lambda: 1)
    before, said = torch.get_num_threads(), []
    try:
        cfg = compute_settings.resolve_compute_settings(RecipeConfig(), tiny_model_path, report=said.append)
        assert (cfg.model.compute_dtype, cfg.model.cpu_threads, torch.get_num_threads()) == ("bfloat16", 1, 1)
    finally:
        torch.set_num_threads(before)
    assert any(s.startswith("compute dtype bfloat16: 2.5x float32 here") for s in said)


def test_resolve_keeps_explicit_values_and_warns_on_emulated_bf16(home, monkeypatch, tiny_model_path):
    _on_cpu(monkeypatch, AVX2_ONLY)
    monkeypatch.setattr(compute_settings, "measure_passes", _never)
    monkeypatch.setattr(compute_settings, "_warned", [])
    said: list[str] = []
    cfg = RecipeConfig(model={"compute_dtype": "bfloat16", "cpu_threads": torch.get_num_threads()})
    assert compute_settings.resolve_compute_settings(cfg, tiny_model_path, report=said.append) == cfg
    assert len(said) == 1 and said[0].startswith("warning: model.compute_dtype=bfloat16 is set, but oneDNN has no")
    compute_settings.resolve_compute_settings(cfg, tiny_model_path, report=said.append)
    assert len(said) == 1  # said once per process


def test_config_default_is_auto_and_rejects_bad_values():
    assert (RecipeConfig().model.compute_dtype, RecipeConfig().model.cpu_threads) == ("auto", "auto")
    for bad in ({"compute_dtype": "float16"}, {"cpu_threads": 0}, {"cpu_threads": "many"}):
        with pytest.raises(ValueError):
            RecipeConfig(model=bad)


def test_unresolved_auto_never_reaches_the_model():
    with pytest.raises(ValueError, match="resolve_compute_settings"):
        autocast(torch.nn.Linear(2, 2), "auto")


def test_cgroup_quota_caps_usable_cores(tmp_path):
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    assert machine_info.cgroup_cpu_limit(tmp_path) == 2
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert machine_info.cgroup_cpu_limit(tmp_path) is None
    assert machine_info.cgroup_cpu_limit(tmp_path / "missing") is None


def test_cpu_description_names_model_flags_and_cores(tmp_path):
    (tmp_path / "cpuinfo").write_text("processor\t: 0\nmodel name\t: AMD EPYC 7B12\n"
                                      "flags\t\t: fpu sse avx avx2 fma\n\nprocessor\t: 1\n")
    info = machine_info.cpu_info(with_torch=False, cpuinfo=tmp_path / "cpuinfo")
    assert (info.model, info.flags) == ("AMD EPYC 7B12", ("avx2",))
    assert info.describe().startswith(f"AMD EPYC 7B12, {info.cores} cores ({info.usable_cores} usable), avx2")
    assert machine_info.describe_cpu().startswith("CPU: ")


@pytest.mark.parametrize(("omp", "expected"), [(None, 4), ("1", 1), ("2,1", 2), ("8", 4), ("0", 4), ("many", 4),
                                                ("", 4)])
def test_auto_threads_take_the_share_omp_num_threads_gives(monkeypatch, omp, expected):
    monkeypatch.setattr(compute_settings, "usable_cores", lambda: 4)
    if omp is None:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    else:
        monkeypatch.setenv("OMP_NUM_THREADS", omp)
    assert compute_settings.resolve_threads("auto") == expected
    assert compute_settings.resolve_threads(3) == 3  # an explicit setting wins
