"""Does RL make an *agent* better over many turns? A held-out benchmark with the SFT start chosen on validation.

Per seed s (trainer.seed = s decides the demos drawn, their order and the RL samples: the whole pipeline):
1. SFT start: each `--sft-grid` setting (demos x epochs) trains from the base model and plays the
   validation tasks greedily: train-split ids the run never trains on (`evaluation.validation.held_back_ids`).
   The best validation success wins, a tie going to the faster setting. The grid runs for the first seed;
   later seeds reuse its choice (a setting is chosen once, on validation, never on the test split).
2. RL: each of `--algorithms` (e.g. grpo, gigpo) trains from that SFT start for the same wall time
   (`trainer.max_minutes = --rl-minutes`), validating every `--val-every` steps (the curve in the plot).
3. SFT controls (`--controls`), each SFT given the RL stage's extra wall time, t_control ~ t_sft + t_rl:
   `more-demos` trains the chosen epochs over demos x (t_sft + t_rl) / t_sft expert episodes (an unlimited
   expert: more data, the best use of the time for SFT); `same-demos` trains on the same demos only, for
   epochs x (t_sft + t_rl) / t_sft epochs (a fixed set of demonstrations: what else the time could buy).
4. Every model plays the same `--test-tasks` test tasks greedily, once (the base model for the first seed).

`--control-of RUN.json` runs step 3 alone for an earlier run of this bench (its JSON): per seed, the SFT
control of that run's SFT start and longest RL arm, trained with that run's recipe, overrides and compute dtype
(on another CPU too), scored on the same test tasks and compared with that run's models (their scores are read
from the JSON).

Prints each model's success with its 95% Wilson interval, and paired differences on the same tasks
(Newcombe's interval, McNemar's exact p): each RL model vs its SFT start, GiGPO vs GRPO, each RL model vs
each SFT control; success per task type; the training reward (first/last quarter) and validation
success (first/last) per run. Plot: `<root>/curves.png`.

    .venv/bin/python bench/bench_multiturn.py [--recipe household_learn] [--seeds 0 1] [--rl-minutes 10]
        [--sft-grid 16x2 32x2] [--algorithms gigpo grpo] [--all-arms-seeds N] [--test-tasks 200]
        [--val-tasks 64] [--controls more-demos same-demos] [KEY=VALUE ...]

A fixed set of N demonstrations (RL against SFT on the same demos): `--sft-grid 64x1 64x2 64x4 --controls
same-demos more-demos --algorithms gigpo gigpo-filter` chooses the epochs on validation, and the same-demos
control is what SFT alone makes of the RL stage's time with no new demonstration.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentrl.allocator import reexec_script_with_tuned_malloc  # noqa: E402
from bench._common import print_table, save_json  # noqa: E402
from bench.recording import run_recorded  # noqa: E402
from agentrl_core.checkpoints import export_hf  # noqa: E402
from agentrl_core.env_service import EnvClient, launch_server  # noqa: E402
from agentrl_core.evaluation.metrics import EvalSummary, metric_text  # noqa: E402
from agentrl_core.evaluation.report import quarter_means  # noqa: E402
from agentrl_core.evaluation.runner import INVALID_ACTION_RATE, evaluate_model  # noqa: E402
from agentrl_core.evaluation.stats import Comparison, compare  # noqa: E402
from agentrl_core.system.machine_info import describe_cpu  # noqa: E402
from agentrl_core.models import resolve_model  # noqa: E402
from agentrl_core.models.compute_settings import resolve_compute_settings  # noqa: E402
from agentrl_core.recipes import load_recipe  # noqa: E402
from agentrl_core.tasksets import resolve_task_ids  # noqa: E402
from agentrl_core.grpo import ALGORITHM_FILE, train_grpo  # noqa: E402
from agentrl_core.training.metrics_log import read_metrics  # noqa: E402
from agentrl_core.training.sft import train_sft  # noqa: E402
from agentrl_core.evaluation.validation import held_back_ids  # noqa: E402

ARMS = {
    "grpo": ("grpo", []),
    "gigpo": ("gigpo", []),
    "gigpo-pool": ("gigpo", ["experience.enabled=true", "experience.mode=mixed"]),
    "raft": ("raft", ["algorithm.policy_loss=raft"]),
    "gigpo-filter": ("gigpo", ["algorithm.rollout_filter_ratio=0.5"]),
}
"""RL arm -> (its advantage estimator, its other overrides). The estimator is always set explicitly: the
recipe's own may be either (gigpo keeps the recipe's gamma and step weight). gigpo-pool is GiGPO with the
experience pool in mixed mode (half of each group's samples see lessons retrieved from earlier successes;
the pool's other settings are the recipe's); every arm is tested without the pool, on the same tasks. raft is
reward-ranked fine-tuning: the SFT loss on the step's successful episodes only (no negative gradient).
gigpo-filter is GiGPO with RAGEN's variance filter: half of each step's groups, those whose rewards vary most,
train (RAGEN keeps a quarter of many more groups; a step here has 8-16)."""


def arm_overrides(arm: str) -> list[str]:
    """The recipe overrides of an RL arm (ARMS)."""
    advantage, extra = ARMS[arm]
    return [f"algorithm.advantage={advantage}", *extra]


@dataclass(frozen=True)
class SftSetting:
    demos: int
    epochs: int

    @classmethod
    def parse(cls, text: str) -> SftSetting:
        demos, sep, epochs = text.partition("x")
        if not sep or not demos.isdigit() or not epochs.isdigit() or int(demos) < 1 or int(epochs) < 1:
            raise argparse.ArgumentTypeError(f"bad SFT setting {text!r}: write DEMOSxEPOCHS, e.g. 32x2")
        return cls(int(demos), int(epochs))

    def overrides(self) -> list[str]:
        return [f"sft.demos={self.demos}", f"sft.epochs={self.epochs}"]

    def __str__(self) -> str:
        return f"{self.demos}x{self.epochs}"


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--recipe", default="household_learn")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    p.add_argument("--sft-grid", type=SftSetting.parse, nargs="+", default=[SftSetting(32, 2), SftSetting(64, 2)])
    p.add_argument("--algorithms", nargs="+", choices=sorted(ARMS), default=["gigpo", "grpo"],
                   help="the RL arms (the first is the one later seeds run with --all-arms-seeds)")
    p.add_argument("--rl-minutes", type=float, default=10.0, help="wall time of each RL run (equal for all)")
    p.add_argument("--rl-steps", type=int, default=None,
                   help="train each RL run this many steps instead, whatever the time (for runs compared across "
                        "code versions or machines: the same steps on the same samples)")
    p.add_argument("--test-tasks", type=int, default=200, help="held-out test tasks every model plays once")
    p.add_argument("--val-tasks", type=int, default=64, help="validation tasks (training range, never trained on)")
    p.add_argument("--val-every", type=int, default=5, help="validate the RL policy every N steps (0: never)")
    p.add_argument("--controls", nargs="+", choices=sorted(CONTROLS), default=["more-demos"],
                   help="the SFT controls given the RL time (see above)")
    p.add_argument("--no-control", action="store_true", help="skip the SFT controls")
    p.add_argument("--sft-start", type=Path, default=None,
                   help="an SFT export to start every seed's RL from (chosen earlier, on validation): no SFT grid here")
    p.add_argument("--control-of", type=Path, default=None,
                   help="an earlier run's JSON: train and score only its SFT control (see above)")
    p.add_argument("--no-base", action="store_true",
                   help="skip scoring the base model (it scores 0%% on household and ALFWorld: a long eval of nothing)")
    p.add_argument("--all-arms-seeds", type=int, default=None,
                   help="the first N seeds run every algorithm and the SFT control; later seeds only the first "
                        "algorithm (default: every seed runs every arm)")
    p.add_argument("--compute-dtype", choices=["float32", "bfloat16"], default=None,
                   help="the dtype every model trains and plays in (default: this machine's, as the flows choose it; "
                        "with --control-of: the earlier run's, so the control pairs with models computed alike)")
    p.add_argument("--root", default="runs/bench-multiturn")
    p.add_argument("--json")
    p.add_argument("overrides", nargs="*")
    return p.parse_args()


class Bench:
    """One env server, the recipe's settings, and every model's test and validation results."""

    def __init__(self, args: argparse.Namespace, url: str, dtype: str) -> None:
        self.args, self.url, self.dtype = args, url, dtype
        self.common = [*args.overrides, f"env.test_tasks={args.test_tasks}", f"run.root={args.root}",
                       f"trainer.val_tasks={args.val_tasks}", f"model.compute_dtype={dtype}"]
        cfg = self.cfg("probe", 0)
        with EnvClient(url) as client:
            self.val_ids = held_back_ids(client.task_ids(cfg.env.name, "train"),
                                         resolve_task_ids(cfg.env, client, "train"), args.val_tasks, cfg.env.name)
            self.test_ids = resolve_task_ids(cfg.env, client, "test")
        self.tests: dict[str, EvalSummary] = {}
        self.minutes: dict[str, float] = {}
        self.validation: dict[str, float] = {}

    def cfg(self, name: str, seed: int, *extra: str):
        return load_recipe(self.args.recipe, [*self.common, f"run.name={name}", f"trainer.seed={seed}", *extra])

    def play(self, cfg, model: Path, ids: list[int], label: str) -> EvalSummary:
        """`model` plays `ids` greedily; a score with any episode failed by its env is refused: it would compare
        models on different tasks, or choose an SFT start on nothing."""
        out = Path(self.args.root) / "eval" / label
        summary = evaluate_model(model, env_name=cfg.env.name, env_url=self.url, cfg=cfg.eval, n_tasks=len(ids),
                                 task_ids=ids, max_turns=cfg.env.max_turns,
                                 max_context_tokens=cfg.rollout.max_context_tokens,
                                 autocast=cfg.model.compute_dtype, engine=cfg.rollout.engine, out_dir=out)
        if summary.n_errors:
            raise RuntimeError(f"{label}: {summary.n_errors} of {summary.n_episodes} episodes failed in the env, not by "
                               f"the model (why: the `error` column of {out / 'trajectories.parquet'}); fix the env "
                               "server and run again")
        return summary

    def sft(self, name: str, seed: int, setting: SftSetting, base: Path) -> Path:
        cfg = self.cfg(name, seed, *setting.overrides())
        t = time.time()
        result = train_sft(cfg, init_model=base, env_url=self.url)
        self.minutes[name] = stage_minutes(result, cfg.run_dir / "sft", (time.time() - t) / 60)
        return export_hf(Path(result.checkpoint), cfg.run_dir / "export")

    def choose_sft(self, seed: int, base: Path) -> tuple[SftSetting, Path]:
        """Train every grid setting and keep the best on validation (ties: the faster)."""
        scored = []
        for setting in self.args.sft_grid:
            name = f"sft{setting}-seed{seed}"
            model = self.sft(name, seed, setting, base)
            val = self.play(self.cfg(name, seed), model, self.val_ids, f"val-{name}")
            self.validation[name] = val.success_rate
            print(f"SFT {setting} (seed {seed}): validation {val.success_text()}, {self.minutes[name]:.1f} min",
                  flush=True)
            scored.append((val.success_rate, -self.minutes[name], setting, model))
        _, _, setting, model = max(scored, key=lambda row: row[:2])
        return setting, model

    def rl(self, algorithm: str, seed: int, sft: Path) -> Path:
        name = f"{algorithm}-seed{seed}"
        length = ([f"trainer.steps={self.args.rl_steps}", "trainer.max_minutes=null"] if self.args.rl_steps
                  else ["trainer.steps=1000", f"trainer.max_minutes={self.args.rl_minutes}"])
        cfg = self.cfg(name, seed, *arm_overrides(algorithm), *length, "trainer.save_every=1000",
                       f"trainer.val_every={self.args.val_every}")
        t = time.time()
        result = train_grpo(cfg, init_model=sft, env_url=self.url)
        self.minutes[name] = stage_minutes(result, cfg.run_dir / "grpo", (time.time() - t) / 60)
        ckpt = result.checkpoint
        check_estimator(cfg.run_dir / "grpo", ARMS[algorithm][0])
        return export_hf(Path(ckpt), cfg.run_dir / "export")

    def test(self, label: str, seed: int, model: Path) -> None:
        self.tests[label] = self.play(self.cfg(label, seed), model, self.test_ids, label)
        print(f"{label}: test {self.tests[label].success_text()}", flush=True)


def stage_minutes(result, stage_dir: Path, wall_minutes: float) -> float:
    """A stage's minutes: this call's wall time, or, when the call resumed the stage (a run started again after a
    failure: what ran before was not timed here), its metrics log's span, from the first logged step's start
    (its record's time less its own train time) to the last record. The controls are sized by these minutes."""
    if not result.resumed_from:
        return wall_minutes
    rows = [row for row in read_metrics(stage_dir / "metrics.jsonl") if "time" in row]
    return (rows[-1]["time"] - rows[0]["time"] + rows[0].get("time/train_s", 0.0)) / 60


GIVEN_START = SftSetting(0, 0)
"""The SFT start of `--sft-start` (shown as "0x0": not trained by this run)."""


def check_estimator(stage_dir: Path, advantage: str) -> None:
    """Refuse to score an arm that did not train with its own estimator (as the stage recorded it)."""
    trained = json.loads((stage_dir / ALGORITHM_FILE).read_text())["advantage"]
    if trained != advantage:
        raise RuntimeError(f"an arm meant to train with advantage={advantage} trained with advantage={trained} "
                           f"({stage_dir / ALGORITHM_FILE}): its scores would be another arm's")


def run_seed(bench: Bench, seed: int, base: Path, chosen: SftSetting | None, all_arms: bool) -> SftSetting:
    """The whole pipeline for one seed: SFT start, RL runs, SFT control (all_arms), test scores."""
    if bench.args.sft_start is not None:  # given: scored on test here like a trained one, no control (no SFT time)
        chosen, sft = GIVEN_START, bench.args.sft_start
        bench.minutes[f"sft{chosen}-seed{seed}"] = 0.0
    elif chosen is None:
        chosen, sft = bench.choose_sft(seed, base)
    else:
        sft = bench.sft(f"sft{chosen}-seed{seed}", seed, chosen, base)
    sft_label = f"sft{chosen}-seed{seed}"
    bench.test(f"sft-seed{seed}", seed, sft)
    rl_minutes = []
    for algorithm in bench.args.algorithms if all_arms else bench.args.algorithms[:1]:
        bench.test(f"{algorithm}-seed{seed}", seed, bench.rl(algorithm, seed, sft))
        rl_minutes.append(bench.minutes[f"{algorithm}-seed{seed}"])
    if all_arms and not bench.args.no_control and bench.args.sft_start is None:
        run_controls(bench, seed, chosen, bench.minutes[sft_label], max(rl_minutes), base)
    return chosen


def more_demos(start: SftSetting, scale: float) -> SftSetting:
    """The start's epochs over demos x (t_sft + t_rl) / t_sft expert episodes."""
    return SftSetting(round(start.demos * scale), start.epochs)


def same_demos(start: SftSetting, scale: float) -> SftSetting:
    """The start's demos for epochs x (t_sft + t_rl) / t_sft epochs (at least one more than the start's)."""
    return SftSetting(start.demos, max(start.epochs + 1, round(start.epochs * scale)))


CONTROLS = {"more-demos": ("sft-control", "sftcontrol", more_demos),
            "same-demos": ("sft-samedemos", "sftsame", same_demos)}
"""SFT control -> (its test label prefix, its run name prefix, its setting from (start, (t_sft + t_rl) / t_sft))."""


def run_controls(bench: Bench, seed: int, start: SftSetting, sft_minutes: float, rl_minutes: float,
                 base: Path) -> None:
    """Train and test each `--controls` SFT control of a seed, sized by the start's SFT and the RL wall time."""
    for name in bench.args.controls:
        label, run, setting_of = CONTROLS[name]
        control = setting_of(start, (sft_minutes + rl_minutes) / sft_minutes)
        print(f"seed {seed}: SFT control {name} {control} (start {start}, {sft_minutes:.1f} + {rl_minutes:.1f} min "
              "of RL)", flush=True)
        bench.test(f"{label}-seed{seed}", seed, bench.sft(f"{run}{control}-seed{seed}", seed, control, base))


def adopt_earlier_run(args: argparse.Namespace) -> dict:
    """--control-of: the earlier run's JSON, with its recipe, overrides, seeds, arms and task counts put in `args`
    (the control must train as that run's SFT start did); other overrides given here are refused."""
    earlier = json.loads(args.control_of.read_text())
    before = earlier["args"]
    if args.overrides and args.overrides != before["overrides"]:
        raise SystemExit(f"--control-of {args.control_of}: that run used the overrides {before['overrides']}, not "
                         f"{args.overrides}; its control trains with its own settings: drop them here")
    for key in ("recipe", "overrides", "seeds", "algorithms", "test_tasks", "val_tasks"):
        setattr(args, key, before[key])
    args.compute_dtype = earlier_dtype(args.control_of, earlier, args.compute_dtype)
    return earlier


def earlier_dtype(source: Path, earlier: dict, given: str | None) -> str:
    """The compute dtype of an earlier run's models, which its control must use: bf16 and fp32 autocast train and
    play differently, so a control computed otherwise would differ from the run's models in two ways at once."""
    recorded = earlier.get("compute_dtype")
    if recorded is None and given is None:
        raise SystemExit(f"--control-of {source}: that run's JSON does not record its compute dtype (it predates the "
                         f"field); pass --compute-dtype float32 or bfloat16, the one its models ran in (its CPU: "
                         f"{earlier.get('cpu', 'not recorded')})")
    if recorded is not None and given is not None and given != recorded:
        raise SystemExit(f"--control-of {source}: that run's models computed in {recorded}, not {given}; its control "
                         "computes as they did: drop --compute-dtype")
    return recorded or given


def run_earlier_controls(bench: Bench, earlier: dict, base: Path) -> SftSetting:
    """The SFT control of each seed of an earlier run, its models' test scores joining `bench.tests`."""
    source = bench.args.control_of
    if earlier["test_ids"] != bench.test_ids:
        raise SystemExit(f"{source} scored other test tasks than this recipe gives now: its control would not pair")
    try:
        start = SftSetting.parse(earlier["sft_start"])
    except argparse.ArgumentTypeError:
        raise SystemExit(f"{source} started RL from a given export ({earlier['sft_start']}), so the SFT time its "
                         "control needs is not in it: pass the JSON of the run that trained that start") from None
    bench.tests.update({label: EvalSummary.from_dict(s) for label, s in earlier["tests"].items()})
    times = earlier["figures"]
    for seed in bench.args.seeds:
        rl = [times[k] for k in (f"minutes_{a}-seed{seed}" for a in bench.args.algorithms) if k in times]
        sft_minutes = times.get(f"minutes_sft{start}-seed{seed}")
        if sft_minutes is None or not rl:
            raise SystemExit(f"{source} has no SFT and RL wall time for seed {seed}: no control to size")
        run_controls(bench, seed, start, sft_minutes, max(rl), base)
    return start


CURVES = {"reward": "reward_mean", "validation": "val/success_rate", "samples_trained": "samples_trained",
          "samples_backpropagated": "samples_backpropagated", "groups_with_signal": "groups_with_signal",
          "invalid_action_rate": "invalid_action_rate"}
"""The per-step series kept for each RL run (name in the results -> its metric in metrics.jsonl)."""


def curves(bench: Bench) -> dict[str, dict[str, list[tuple[int, float]]]]:
    """Per RL run: the training reward, the validation success, how many samples trained and were
    back-propagated (the others had advantage 0 everywhere), the share of groups with signal, and the share of
    the rollouts' commands the environment refused (where it reports them), per step."""
    out = {}
    for name in bench.minutes:
        stage = Path(bench.args.root) / name / "grpo"
        if (stage / "metrics.jsonl").is_file():
            rows = read_metrics(stage / "metrics.jsonl")
            out[name] = {key: [(r["step"], r[metric]) for r in rows if metric in r] for key, metric in CURVES.items()}
    return out


def plot(runs: dict[str, dict[str, list[tuple[int, float]]]], out: Path) -> None:
    from agentrl_core.evaluation.plots import plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    for name, series in runs.items():
        for ax, key in ((left, "reward"), (right, "validation")):
            if series[key]:
                ax.plot(*zip(*series[key]), marker="o", markersize=3, label=name)
    left.set(xlabel="RL step", ylabel="rollout reward (train tasks)", title="training reward")
    right.set(xlabel="RL step", ylabel="greedy success (validation)", title="validation success")
    if runs:  # a controls-only run has no RL curve to label
        left.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=90)
    plt.close(fig)


def task_types(env: str, kwargs: dict, ids: list[int]) -> dict[int, str] | None:
    """Task id -> task type, for envs whose generator says it (household, ALFWorld's generated games); else None."""
    if env == "household":
        from agentrl_core.envs.household import Household
        from agentrl_core.envs.household.generate import make_scene

        difficulty = Household(**kwargs).difficulty
        return {t: make_scene(t, difficulty)[0].task_type for t in ids}
    if env == "alfworld":
        from agentrl_core.envs.alfworld import AlfWorld
        from agentrl_core.envs.alfworld.dataset import GeneratedGames
        from agentrl_core.envs.alfworld.scene import task_type_of

        games = AlfWorld(**kwargs).games
        if isinstance(games, GeneratedGames):  # official data: its types are in its folder names, not its ids
            return {t: task_type_of(t, games.difficulty) for t in ids}
    return None


def comparisons(bench: Bench) -> list[Comparison]:
    """Each RL model vs its SFT start and vs each SFT control; GiGPO vs GRPO; GiGPO with the pool or the variance
    filter vs without; per seed."""
    out = []
    for seed in bench.args.seeds:
        rl = [f"{a}-seed{seed}" for a in bench.args.algorithms]
        pairs = [(m, f"sft-seed{seed}") for m in rl]
        pairs += [(m, f"{label}-seed{seed}") for label, _, _ in CONTROLS.values() for m in rl]
        pairs += [(f"{a}-seed{seed}", f"{b}-seed{seed}")
                  for a, b in (("gigpo", "grpo"), ("gigpo-pool", "gigpo"), ("gigpo-filter", "gigpo"))
                  if a in bench.args.algorithms and b in bench.args.algorithms]
        out += [compare(bench.tests[a].task_success, bench.tests[b].task_success, (a, b))
                for a, b in pairs if a in bench.tests and b in bench.tests]
    return out


def by_type(bench: Bench, types: dict[int, str] | None) -> dict[str, dict[str, float]]:
    """Success per task type of every tested model."""
    if not types:
        return {}
    table: dict[str, dict[str, float]] = defaultdict(dict)
    for label, summary in bench.tests.items():
        for kind in sorted(set(types.values())):
            scores = [s for t, s in summary.task_success.items() if types.get(t) == kind]
            table[label][f"{kind} (n={len(scores)})"] = sum(scores) / len(scores) if scores else float("nan")
    return dict(table)


def report(bench: Bench, chosen: SftSetting, wall_s: float) -> None:
    args, cfg = bench.args, bench.cfg("probe", 0)
    figures = {f"{label}_success": s.success_rate for label, s in bench.tests.items()}
    figures.update({f"{label}_invalid_action_rate": s.metrics[INVALID_ACTION_RATE]["mean"]
                    for label, s in bench.tests.items() if INVALID_ACTION_RATE in s.metrics})
    comps = comparisons(bench)
    figures.update({f"{c.a}_minus_{c.b}": c.diff for c in comps})
    runs = curves(bench)
    for name, series in runs.items():
        for key in ("reward", "invalid_action_rate"):
            if series.get(key):
                first, last = quarter_means([v for _, v in series[key]])
                figures[f"{key}_first_quarter ({name})"], figures[f"{key}_last_quarter ({name})"] = first, last
        if series["validation"]:
            figures[f"val_first ({name})"] = series["validation"][0][1]
            figures[f"val_last ({name})"] = series["validation"][-1][1]
        for key in ("samples_trained", "samples_backpropagated", "groups_with_signal"):
            if series.get(key):
                figures[f"{key}_mean ({name})"] = sum(v for _, v in series[key]) / len(series[key])
        figures[f"rl_steps ({name})"] = float(len(series["reward"]))
    figures.update({f"validation_{k}": v for k, v in bench.validation.items()})
    figures.update({f"minutes_{k}": v for k, v in bench.minutes.items()})
    figures["minutes_total"] = wall_s / 60
    print(describe_cpu())
    start = (f"SFT start given ({args.sft_start})" if args.sft_start is not None
             else f"SFT start {chosen} chosen on {len(bench.val_ids)} validation tasks")
    print_table(f"{cfg.env.name}: {len(bench.test_ids)} test tasks, greedy, {bench.dtype}; {start}", figures)
    for label, s in bench.tests.items():
        invalid = (f"; invalid commands per episode {metric_text(s, INVALID_ACTION_RATE)}"
                   if INVALID_ACTION_RATE in s.metrics else "")
        print(f"  {label:>22}: {s.success_text()}{invalid}")
    for c in comps:
        print(f"  {c.text()}")
    types = by_type(bench, task_types(cfg.env.name, cfg.env.kwargs, bench.test_ids))
    for label, row in types.items():
        print(f"  {label:>22} by task type: " + ", ".join(f"{k} {100 * v:.0f}%" for k, v in row.items()))
    gains = [c for c in comps if c.b.startswith("sft-seed")]
    for algorithm in args.algorithms:
        mine = [c for c in gains if c.a in {f"{algorithm}-seed{seed}" for seed in args.seeds}]
        print(f"{algorithm} > SFT start on every seed, interval excluding 0: "
              f"{'yes' if mine and all(c.low > 0 for c in mine) else 'no'}; gains "
              + ", ".join(f"{100 * c.diff:+.1f} [{100 * c.low:+.1f}, {100 * c.high:+.1f}]" for c in mine))
    plot(runs, Path(args.root) / "curves.png")
    save_json(args.json or str(Path(args.root) / "bench_multiturn.json"), {
        "args": {k: (list(map(str, v)) if k == "sft_grid" else str(v) if isinstance(v, Path) else v)
                 for k, v in vars(args).items()},
        "cpu": describe_cpu(), "compute_dtype": bench.dtype, "figures": figures,
        "sft_start": str(args.sft_start or chosen),
        "tests": {k: v.to_dict() for k, v in bench.tests.items()}, "comparisons": [c.to_dict() for c in comps],
        "by_task_type": types, "curves": runs, "validation_ids": bench.val_ids, "test_ids": bench.test_ids})


def main() -> None:
    args = parse()
    start = time.time()
    earlier = adopt_earlier_run(args) if args.control_of is not None else None
    cfg = load_recipe(args.recipe, [*args.overrides, f"run.root={args.root}"])
    base = resolve_model(cfg.model.name)
    dtype = args.compute_dtype or resolve_compute_settings(cfg, base).model.compute_dtype  # auto: as the flows do
    with launch_server([cfg.env.name], env_kwargs={cfg.env.name: cfg.env.kwargs}) as server:
        bench = Bench(args, server.url, dtype)
        if earlier is not None:
            chosen = run_earlier_controls(bench, earlier, base)
        else:
            if not args.no_base:
                bench.test("base", args.seeds[0], base)
            chosen = None
            for i, seed in enumerate(args.seeds):
                chosen = run_seed(bench, seed, base, chosen, args.all_arms_seeds is None or i < args.all_arms_seeds)
    report(bench, chosen, time.time() - start)


if __name__ == "__main__":
    reexec_script_with_tuned_malloc()  # the allocator `agentrl run` uses (AGENTRL_SYSTEM_MALLOC=1: glibc's default)
    run_recorded("multiturn", main)
