"""bench/gpu_checks.py without a GPU: both device commands as --dry-run (the same code on the CPU, tiny models),
the model's two-part carry and reassembly, and the deadline that skips a phase while keeping earlier figures."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from bench.gpu import carry
from bench.gpu.record import Deadline, Figures, PhaseSkipped, run_phase
from bench.gpu_checks import CARRIED, device_command, main


def fake_model(folder: Path, size: int = 200_000) -> Path:
    path = folder / "fake_model.whl"
    path.write_bytes(os.urandom(size))
    return path


def test_the_model_travels_in_two_parts_and_is_joined_checked(tmp_path: Path) -> None:
    src = fake_model(tmp_path)
    carried = tmp_path / "carry"
    manifest = carry.split_file(src, carried / "part1" / "m.part1", carried / "part2" / "m.part2", 70_000)
    carry.write_manifest(manifest, carried / "part1", carried / "part2")
    assert [p["size"] for p in manifest["parts"]] == [70_000, 130_000]
    stash = carry.stash_part(carried / "part1", tmp_path / "stash")  # command 1 leaves part 1 on the machine
    shutil.rmtree(carried / "part1")  # command 2 carries part 2 only
    joined = carry.reassemble(manifest, [carried / "part2", stash], tmp_path / "joined.whl")
    assert joined.read_bytes() == src.read_bytes()
    corrupt = bytearray((stash / "m.part1").read_bytes())
    corrupt[0] ^= 0xFF  # always another byte (a fixed b"x" equals a random first byte one time in 256)
    (stash / "m.part1").write_bytes(bytes(corrupt))
    with pytest.raises(carry.CarryError, match="wrong sha256"):
        carry.reassemble(manifest, [carried / "part2", stash], tmp_path / "again.whl")
    (stash / "m.part1").unlink()
    with pytest.raises(carry.CarryError, match="warm"):
        carry.reassemble(manifest, [carried / "part2", stash], tmp_path / "again.whl")


def test_a_phase_that_does_not_fit_is_skipped_and_earlier_figures_stay(tmp_path: Path) -> None:
    now = [0.0]
    deadline = Deadline(100.0, clock=lambda: now[0])
    figs = Figures(tmp_path / "figures.json", {"command": 0}, log=lambda line: None)

    def first() -> None:
        figs.add("first/value", 1.5, target=(">=", 1.0))
        now[0] += 90.0  # the phase took most of the budget

    ran = []
    run_phase(figs, deadline, "first", 10.0, first)
    run_phase(figs, deadline, "second", 30.0, lambda: ran.append(True))
    run_phase(figs, deadline, "broken", 1.0, lambda: 1 / 0)
    run_phase(figs, deadline, "no_input", 1.0, lambda: (_ for _ in ()).throw(PhaseSkipped("no model")))
    data = json.loads((tmp_path / "figures.json").read_text())
    assert data["figures"]["first/value"] == {"value": 1.5, "unit": "", "target": ">= 1", "ok": True}
    assert not ran and data["phases"]["second"]["status"] == "skipped"
    assert "needs ~30 s, 10 s left" in data["phases"]["second"]["detail"]
    assert data["phases"]["broken"]["status"] == "error" and "ZeroDivisionError" in data["phases"]["broken"]["detail"]
    assert data["phases"]["no_input"] == {"status": "skipped", "seconds": 0.0, "detail": "no model"}


def test_the_device_command_lines_fit_the_tool() -> None:
    for n in (1, 2):
        line = device_command(n)
        assert len(line) <= 2000 and f"--command {n}" in line and ".gpu_carry/wheels/*.whl" in line
        assert f"$OUT/log_{n}.txt" in line and len(CARRIED[n]) <= 8
    assert ".gpu_carry/part1" in CARRIED[1] and ".gpu_carry/part2" in CARRIED[2]


@pytest.fixture(scope="module")
def dry_carry(tmp_path_factory: pytest.TempPathFactory, embedded_model_path: Path) -> Path:
    """What `prepare` fills, small: the real tokenizer, a fake model cut in two with its manifest."""
    root = tmp_path_factory.mktemp("carry")
    carry.copy_tokenizer(embedded_model_path, root / "tokenizer")
    src = fake_model(root)
    manifest = carry.split_file(src, root / "part1" / f"{src.name}.part1", root / "part2" / f"{src.name}.part2", 50_000)
    carry.write_manifest(manifest, root / "part1", root / "part2")
    src.unlink()
    return root


def dry_run(command: int, carry_dir: Path, out: Path, stash: Path, work: Path) -> dict:
    return main(["--command", str(command), "--dry-run", "--out", str(out), "--carry", str(carry_dir),
                 "--stash", str(stash), "--work", str(work)])


@pytest.mark.slow
def test_both_commands_dry_run_on_the_cpu(dry_carry: Path, tmp_path: Path) -> None:
    stash = tmp_path / "stash"
    one = dry_run(1, dry_carry, tmp_path / "out", stash, tmp_path / "work1")
    assert json.loads((tmp_path / "out" / "figures_1.json").read_text()) == json.loads(json.dumps(one))
    done = {name for name, p in one["phases"].items() if p["status"] == "done"}
    assert done == {"peak_and_bandwidth", "stash_part1", "grpo_step_0.5b", "engine_greedy_vs_hf", "kv_budget",
                    "fsdp_step", "product_loop_sync", "grpo_step_135m"}, one["phases"]
    figures = one["figures"]
    for key in ("card/matmul_peak_tflops", "card/copy_bandwidth_gbs", "tiny-qwen2/decode_vs_bound",
                "tiny-qwen2/mfu_train", "tiny-llama/grpo_step_s", "kv/tokens_in_budget", "loop/sync_steps_per_hour"):
        assert figures[key]["value"] > 0, key
    assert figures["engine_random_135m/greedy_identical_to_hf"]["ok"]
    assert all(figures[f"fsdp/{k}"]["ok"] for k in ("loss_rel", "grad_rel", "update_rel"))
    assert "target" not in figures["fsdp/param_diff_in_lr"]  # reported: AdamW amplifies noise-level gradients
    assert "target" in figures["tiny-qwen2/mfu_train"] and "target" not in figures["tiny-llama/mfu_train"]
    assert one["device"]["name"] == "cpu (dry run)" and any("Ray" in n for n in one["notes"])

    shutil.rmtree(dry_carry / "part1")  # command 2 carries part 2; part 1 is only in the stash command 1 left
    two = dry_run(2, dry_carry, tmp_path / "out", stash, tmp_path / "work2")
    assert all(p["status"] == "done" for p in two["phases"].values()), two["phases"]
    figures = two["figures"]
    assert figures["model/wheel_sha256_ok"]["value"] is True
    assert figures["learning/gigpo_steps"]["value"] == 2 and figures["learning/test_scenes"]["value"] == 4
    for key in ("learning/sft_success", "learning/gigpo_success", "learning/gigpo_minus_sft_low",
                "learning/gigpo_minus_sft_high", "engine_real_model/greedy_identical_to_hf"):
        assert key in figures, key
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["figures_1.json", "figures_2.json"]


def test_a_device_run_is_kept_as_a_results_file(tmp_path: Path) -> None:
    from bench.gpu.record import Figures, keep_results

    figs = Figures(tmp_path / "figures_1.json", {"command": 1}, log=lambda line: None)
    figs.set_device({"name": "NVIDIA H200", "capability": "9.0", "memory_gib": 139.8, "torch": "2.11.0"})
    figs.add("card/matmul_peak_tflops", 791.1, unit="TFLOP/s")
    figs.add("x/mfu_train", 0.23, target=(">=", 0.4))
    figs.add("learning/verdict", "no difference shown")
    (tmp_path / "log_1.txt").write_text("FIGURE card/matmul_peak_tflops = 791.1\n")
    path = keep_results(tmp_path / "figures_1.json", tmp_path / "log_1.txt", "gpu_x", "python3 bench/gpu_checks.py",
                        "abc123", tmp_path)
    kept = json.loads(path.read_text())
    assert kept["figures"] == {"card/matmul_peak_tflops": 791.1, "x/mfu_train": 0.23}
    assert kept["texts"] == {"learning/verdict": "no difference shown", "target/x/mfu_train": ">= 0.4: missed"}
    assert kept["targets"]["x/mfu_train"]["ok"] is False and "NVIDIA H200" in kept["cpu"]
    assert kept["git_revision"] == "abc123" and kept["bench"] == "gpu_checks"
    assert path.with_suffix(".txt").read_text().splitlines()[0] == "$ python3 bench/gpu_checks.py"
