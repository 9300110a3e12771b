"""Reuse an earlier evaluation that played exactly these episodes (opt-in: `eval.reuse: true`).

An evaluation is a function of what it plays with: the model's weights, the environment (its code and
settings), the task ids, the turn and context limits, the eval section (k, seed, sampling, batch size),
the dtypes and engine, and the arithmetic of this machine. When all of it is equal, playing again gives
the same episodes (greedy: the same tokens; sampled: the same seeds), so a second seed of an experiment,
a curriculum stage scored against the stage before, or a nightly evaluation of an unchanged checkpoint
can read the first one's result instead of playing it again. The key:

    key = sha256(json({model:  sha256 over the model folder's files (relative path, bytes),
                       code:   sha256 over agentrl_core's and the env class's package sources (*.py),
                       env:    name, versioned id, kwargs;  tasks: the task ids in order,
                       limits: max_turns, max_context_tokens;  eval: the eval section (k, seed, sampling,
                               batch_size);  compute: dtype, compute dtype, engine;
                       machine: torch version, torch's CPU capability, oneDNN bf16, torch threads}))

Entries live in `<run.root>/.eval-cache/<key>/`: `trajectories.parquet`, then `summary.json`, each
written atomically; an entry counts only once its summary exists, so an evaluation stopped halfway is
never reused. A reused evaluation copies the trajectories into its own `out_dir` and writes
`reused.json` there (the key and where the entry came from).
"""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
import shutil
from pathlib import Path
from typing import Any, Callable, Sequence

from agentrl_core.config import RecipeConfig
from agentrl_core.evaluation.metrics import EvalSummary
from agentrl_core.system.atomic_file import atomic_file, write_text_atomic

CACHE_DIR = ".eval-cache"
TRAJECTORIES = "trajectories.parquet"
SUMMARY = "summary.json"
REUSED = "reused.json"

log = logging.getLogger(__name__)


def tree_digest(root: Path, pattern: str = "*") -> str:
    """sha256 over the files under `root` matching `pattern` (relative path and bytes, in path order)."""
    digest = hashlib.sha256()
    for path in sorted(p for p in Path(root).rglob(pattern) if p.is_file() and "__pycache__" not in p.parts):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        with path.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        digest.update(b"\0")
    return digest.hexdigest()


def code_digest(env_name: str) -> str:
    """sha256 over agentrl_core's sources and those of the env class's package (a plugin's own code too)."""
    import agentrl_core
    from agentrl_core.envs.registry import env_class

    core = Path(agentrl_core.__file__).parent
    env_dir = Path(inspect.getfile(env_class(env_name))).parent
    parts = [tree_digest(core, "*.py")]
    if core not in env_dir.parents and env_dir != core:
        parts.append(tree_digest(env_dir, "*.py"))
    return hashlib.sha256("/".join(parts).encode()).hexdigest()


def machine_parts() -> dict[str, Any]:
    """What of this machine can change a model's arithmetic: torch, its kernels, its threads."""
    import torch

    from agentrl_core.system.machine_info import cpu_info

    info = cpu_info()
    return {"torch": torch.__version__, "capability": info.torch_capability, "onednn_bf16": info.onednn_bf16,
            "threads": torch.get_num_threads()}


def evaluation_key(model: Path, env_name: str, env_kwargs: dict, task_ids: Sequence[int],
                   settings: dict[str, Any]) -> str:
    """The key of the module docstring; `settings`: the limits, eval section and compute settings as plain data."""
    from agentrl_core.envs.registry import env_class, versioned_id

    parts = {"model": tree_digest(model), "code": code_digest(env_name),
             "env": {"name": env_name, "id": versioned_id(env_class(env_name)), "kwargs": env_kwargs},
             "tasks": [int(t) for t in task_ids], "settings": settings, "machine": machine_parts()}
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def reuse(cache: Path, key: str, out_dir: Path) -> EvalSummary | None:
    """The summary of the complete entry `key` with its trajectories copied into `out_dir`; None without one."""
    entry = Path(cache) / key
    if not (entry / SUMMARY).is_file() or not (entry / TRAJECTORIES).is_file():
        return None
    summary = EvalSummary.from_dict(json.loads((entry / SUMMARY).read_text()))
    out_dir = Path(out_dir)
    with atomic_file(out_dir / TRAJECTORIES) as tmp:
        shutil.copyfile(entry / TRAJECTORIES, tmp)
    write_text_atomic(out_dir / REUSED, json.dumps({"key": key, "entry": str(entry)}, indent=2) + "\n")
    return summary


def keep(cache: Path, key: str, out_dir: Path, summary: EvalSummary) -> Path:
    """Store a finished evaluation (its `out_dir` trajectories and its summary) as entry `key`; returns it.
    An evaluation with episodes failed by the environment is not stored: its failures need not recur."""
    entry = Path(cache) / key
    if summary.n_errors:
        return entry
    with atomic_file(entry / TRAJECTORIES) as tmp:
        shutil.copyfile(Path(out_dir) / TRAJECTORIES, tmp)
    write_text_atomic(entry / SUMMARY, json.dumps(summary.to_dict(), indent=2) + "\n")
    return entry


def recipe_settings(cfg: RecipeConfig) -> dict[str, Any]:
    """The recipe's part of the key: limits, the eval section (but enabled/reuse), dtypes and engine."""
    return {"max_turns": cfg.env.max_turns, "max_context_tokens": cfg.rollout.max_context_tokens,
            "eval": cfg.eval.model_dump(mode="json", exclude={"enabled", "reuse"}),
            "dtype": cfg.model.dtype, "compute_dtype": cfg.model.compute_dtype,
            "engine": cfg.rollout.engine.model_dump(mode="json")}


def evaluate_or_reuse(cfg: RecipeConfig, model: str | Path, task_ids: Sequence[int], out_dir: Path,
                      play: Callable[[], EvalSummary]) -> EvalSummary:
    """`play()` (an evaluation writing `out_dir/trajectories.parquet`), or with `eval.reuse` the matching entry
    under `<run.root>/.eval-cache` when there is one; a played evaluation is stored there for the next."""
    if not cfg.eval.reuse:
        return play()
    from agentrl_core.models import resolve_model

    cache = Path(cfg.run.root) / CACHE_DIR
    key = evaluation_key(resolve_model(str(model)), cfg.env.name, cfg.env.kwargs, task_ids, recipe_settings(cfg))
    found = reuse(cache, key, out_dir)
    if found is not None:
        log.info("evaluation of %s reused from %s (eval.reuse: the same model, code, tasks and settings)", model,
                 cache / key)
        return found
    summary = play()
    keep(cache, key, out_dir, summary)
    return summary
