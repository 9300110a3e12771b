"""What one multi-turn RL step costs, setting against setting, from the same SFT'd start.

The recipe's SFT stage runs once from the base model (or `--start` names a model folder), then
each setting — a name and recipe overrides, `name:key=value,key=value` — runs `--steps` RL steps
from that start in a fresh process with its own env server, so each setting's peak resident memory
is its own. A setting that changes the environment (an `env.` override, e.g. a shorter observation)
gets an SFT start of its own, trained the same way on that environment's demos. Settings take turns (`--rounds` > 1 repeats
the cycle) so drift of this shared machine spreads over all of them. Per setting it prints the
medians over its steps of: rollout seconds (and those in the engine's forwards: the rest is time
spent on environments and the loop), update and step seconds; turns and tokens per episode; the
share of groups with signal; samples back-propagated; success; and the process's peak RSS, with
each setting's step time as a ratio of the first setting's (measured in the same run).

    .venv/bin/python bench/bench_agent_step.py --recipe alfworld_grpo \
        --setting recipe: --setting kl-on-signal:algorithm.kl_rows=signal [--steps 1] [--rounds 1]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentrl.allocator import reexec_script_with_tuned_malloc  # noqa: E402
from bench._common import peak_rss_gib, save_json  # noqa: E402
from bench.recording import run_recorded  # noqa: E402
from agentrl_core.system.machine_info import describe_cpu  # noqa: E402

PER_STEP = ("time/rollout_s", "time/train_s", "time/step_s", "turns_mean", "episode_tokens", "response_length",
            "groups_with_signal", "samples_backpropagated", "success_rate", "rollout/prefilled_tokens",
            "rollout/evictions", "rollout/forward_s", "memory/rollout_peak_rss_gib")
"""Metrics of each RL step (metrics.jsonl) the table shows, as medians over a setting's steps."""


@dataclass(frozen=True)
class Setting:
    """A named list of recipe overrides: `name:key=value,key=value` (`name:` is the recipe as it is)."""

    name: str
    overrides: tuple[str, ...]

    @classmethod
    def parse(cls, text: str) -> Setting:
        name, sep, rest = text.partition(":")
        if not sep or not name:
            raise argparse.ArgumentTypeError(f"a setting is NAME:KEY=VALUE[,KEY=VALUE...] (or NAME:), got {text!r}")
        overrides = tuple(item for item in rest.split(",") if item)
        bad = [item for item in overrides if "=" not in item]
        if bad:
            raise argparse.ArgumentTypeError(f"setting {name!r}: overrides are KEY=VALUE, got {bad}")
        return cls(name, overrides)

    @property
    def env_overrides(self) -> tuple[str, ...]:
        """The overrides that change the environment (its demos and observations), sorted."""
        return tuple(sorted(item for item in self.overrides if item.startswith("env.")))


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--recipe", default="alfworld_grpo")
    p.add_argument("--setting", dest="settings", type=Setting.parse, action="append",
                   help="NAME:KEY=VALUE,...; repeat for each setting (default: the recipe as it is)")
    p.add_argument("--steps", type=int, default=1, help="RL steps per setting and round")
    p.add_argument("--rounds", type=int, default=1, help="how many times the settings take turns")
    p.add_argument("--start", help="start the settings that keep the recipe's environment from this model folder "
                                   "instead of running the recipe's SFT stage")
    p.add_argument("--root", default="runs/bench-agent-step")
    p.add_argument("--json")
    p.add_argument("--child", help=argparse.SUPPRESS)  # internal: run one setting in this process
    p.add_argument("--sft-child", action="store_true", help=argparse.SUPPRESS)  # internal: train an SFT start
    p.add_argument("--sft-env", action="append", default=[], help=argparse.SUPPRESS)  # its env overrides
    p.add_argument("overrides", nargs="*", help="recipe overrides every setting gets")
    args = p.parse_args(argv)
    args.settings = args.settings or [Setting("recipe", ())]
    if len({s.name for s in args.settings}) != len(args.settings):
        p.error("setting names must differ")
    return args


def load(args: argparse.Namespace, run: str, extra: tuple[str, ...] = ()):
    from agentrl_core.recipes import load_recipe

    return load_recipe(args.recipe, [*args.overrides, f"run.root={args.root}", f"run.name={run}", *extra])


def sft_name(env_overrides: tuple[str, ...]) -> str:
    """The run folder of the SFT start for these environment overrides ("sft" for the recipe's own)."""
    if not env_overrides:
        return "sft"
    return "sft-" + hashlib.blake2b("\n".join(env_overrides).encode(), digest_size=4).hexdigest()


def sft_start(args: argparse.Namespace, env_overrides: tuple[str, ...] = ()) -> Path:
    """The recipe's SFT stage (with `env_overrides`) from the base model, exported; reused when a previous
    run left it. It trains in a child process, so this one stays small (its children's memory and the
    budget a setting gets from the memory available do not depend on which SFT ran before)."""
    cfg = load(args, sft_name(env_overrides), env_overrides)
    out = cfg.run_dir / "export"
    if (out / "config.json").exists():
        print(f"SFT start{' for ' + ','.join(env_overrides) if env_overrides else ''}: reusing {out}", flush=True)
        return out
    argv = [sys.executable, __file__, "--sft-child", "--recipe", args.recipe, "--root", args.root,
            *[f"--sft-env={item}" for item in env_overrides], *args.overrides]
    if subprocess.run(argv, check=False).returncode != 0 or not (out / "config.json").exists():
        raise RuntimeError(f"the SFT start {sft_name(env_overrides)} failed; its output is above")
    return out


def train_sft_start(args: argparse.Namespace, env_overrides: tuple[str, ...]) -> Path:
    """The SFT start itself (in the child process `sft_start` runs)."""
    from agentrl_core.checkpoints import export_hf
    from agentrl_core.env_service import launch_server
    from agentrl_core.models import resolve_model
    from agentrl_core.training.sft import train_sft

    cfg = load(args, sft_name(env_overrides), env_overrides)
    out = cfg.run_dir / "export"
    t = time.time()
    with launch_server([cfg.env.name], env_kwargs={cfg.env.name: cfg.env.kwargs}) as server:
        ckpt = train_sft(cfg, init_model=resolve_model(cfg.model.name), env_url=server.url).checkpoint
    model = export_hf(Path(ckpt), out)
    print(f"SFT start{' for ' + ','.join(env_overrides) if env_overrides else ''}: {cfg.sft.demos} demos x "
          f"{cfg.sft.epochs} epochs in {(time.time() - t) / 60:.1f} min", flush=True)
    return model


def run_child(args: argparse.Namespace) -> None:
    """One setting, one round (in its own process): RL steps from the start; prints the peak RSS as JSON."""
    from agentrl_core.env_service import launch_server
    from agentrl_core.grpo import train_grpo

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("agentrl_core.training").setLevel(logging.INFO)  # the memory plan, the stage's progress
    setting = next(s for s in args.settings if s.name == args.child)
    cfg = load(args, f"{setting.name}-{time.time_ns()}", (*setting.overrides, f"trainer.steps={args.steps}",
                                                           f"trainer.save_every={args.steps}"))
    with launch_server([cfg.env.name], env_kwargs={cfg.env.name: cfg.env.kwargs}) as server:
        train_grpo(cfg, init_model=Path(args.start), env_url=server.url)
    rss = peak_rss_gib()
    print("CHILD " + json.dumps({"run_dir": str(cfg.run_dir), "peak_rss_gib": rss}), flush=True)


def run_setting(args: argparse.Namespace, setting: Setting, start: Path) -> tuple[list[dict], float]:
    """A fresh process runs the setting; returns its steps' metrics and its peak RSS (GiB)."""
    from agentrl_core.training.metrics_log import read_metrics

    argv = [sys.executable, __file__, "--child", setting.name, "--recipe", args.recipe,
            "--start", str(start), "--steps", str(args.steps), "--root", args.root,
            *[f"--setting={s.name}:{','.join(s.overrides)}" for s in args.settings], *args.overrides]
    proc = subprocess.run(argv, stdout=subprocess.PIPE, text=True, check=False)
    sys.stdout.write(proc.stdout)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("CHILD ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"setting {setting.name} failed (exit {proc.returncode}); its output is above")
    child = json.loads(lines[-1][len("CHILD "):])
    steps = [r for r in read_metrics(Path(child["run_dir"]) / "grpo") if "time/step_s" in r]
    return steps, child["peak_rss_gib"]


def summarise(steps: list[dict], rss: list[float]) -> dict[str, float]:
    """Medians over a setting's steps of PER_STEP, and its largest peak RSS."""
    row = {k: statistics.median(s[k] for s in steps) for k in PER_STEP if all(k in s for s in steps)}
    return row | {"peak_rss_gib": max(rss), "steps": float(len(steps))}


def report(args: argparse.Namespace, rows: dict[str, dict[str, float]], starts: dict[str, Path],
           wall_s: float) -> None:
    from rich.console import Console
    from rich.table import Table

    first = next(iter(rows.values()))
    table = Table("setting", "start", "rollout s", "engine s", "update s", "step s", "x first", "turns", "tokens/episode",
                  "gen tokens/episode", "prefilled", "evictions", "groups w/ signal", "backprop'd", "success",
                  "peak after rollout GiB", "peak RSS GiB",
                  title=f"RL step cost: {args.recipe}", caption=describe_cpu())
    for name, r in rows.items():
        table.add_row(name, str(starts[name]), *(f"{r.get(k, float('nan')):.1f}" for k in (
            "time/rollout_s", "rollout/forward_s", "time/train_s", "time/step_s")),
                      f"{r['time/step_s'] / first['time/step_s']:.2f}x", f"{r.get('turns_mean', 0):.1f}",
                      f"{r.get('episode_tokens', 0):.0f}", f"{r.get('response_length', 0):.0f}",
                      f"{r.get('rollout/prefilled_tokens', 0):.0f}", f"{r.get('rollout/evictions', 0):.0f}",
                      f"{r.get('groups_with_signal', 0):.2f}", f"{r.get('samples_backpropagated', 0):.0f}",
                      f"{r.get('success_rate', 0):.2f}", f"{r.get('memory/rollout_peak_rss_gib', 0):.2f}",
                      f"{r['peak_rss_gib']:.2f}")
    Console(width=max(Console().width, 200)).print(table)
    figures = {f"{name}/{k}": v for name, r in rows.items() for k, v in r.items()}
    figures |= {f"{name}/step_x_first": r["time/step_s"] / first["time/step_s"] for name, r in rows.items()}
    save_json(args.json, {"figures": figures, "wall_s": wall_s, "recipe": args.recipe,
                          "starts": {name: str(path) for name, path in starts.items()},
                          "settings": {s.name: list(s.overrides) for s in args.settings}})


def main() -> None:
    args = parse()
    if args.child:
        run_child(args)
        return
    if args.sft_child:
        train_sft_start(args, tuple(args.sft_env))
        return
    begun = time.time()
    starts = starts_of(args)
    steps: dict[str, list[dict]] = {s.name: [] for s in args.settings}
    rss: dict[str, list[float]] = {s.name: [] for s in args.settings}
    for _ in range(args.rounds):
        for setting in args.settings:
            got, peak = run_setting(args, setting, starts[setting.name])
            steps[setting.name] += got
            rss[setting.name].append(peak)
    report(args, {name: summarise(steps[name], rss[name]) for name in steps}, starts, time.time() - begun)


def starts_of(args: argparse.Namespace) -> dict[str, Path]:
    """Each setting's SFT start: `--start` or the recipe's SFT for the recipe's environment, one SFT per
    distinct set of environment overrides (trained before any RL step is timed)."""
    by_env: dict[tuple[str, ...], Path] = {}
    if args.start:
        by_env[()] = Path(args.start)
    for setting in args.settings:
        if setting.env_overrides not in by_env:
            by_env[setting.env_overrides] = sft_start(args, setting.env_overrides)
    return {s.name: by_env[s.env_overrides] for s in args.settings}


if __name__ == "__main__":
    reexec_script_with_tuned_malloc()  # the allocator `agentrl run` uses (AGENTRL_SYSTEM_MALLOC=1: glibc's default)
    if "--child" in sys.argv or "--sft-child" in sys.argv:
        main()
    else:
        run_recorded("agent_step", main)
