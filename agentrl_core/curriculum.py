"""Staged curricula: a base recipe, per-stage overrides, each stage starting from the previous stage's export."""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

import yaml
from pydantic import Field, field_validator

from agentrl_core.checkpoints import export_hf
from agentrl_core.checkpoints.atomic import is_complete
from agentrl_core.config import RecipeConfig, Section
from agentrl_core.config_checks import check_rl_stage
from agentrl_core.errors import ConfigError
from agentrl_core.recipes import RECIPES_DIR, apply_override, build_config, load_recipe, parse_override
from agentrl_core.system.safe_names import SafeName, path_under
from agentrl_core.secrets import REVEAL, reveal

StepCallback = Callable[[int, int, dict[str, float]], None]

RESERVED_STAGE_NAMES = {"export": "exports folder", "eval": "evaluation folder", "report": "report folder",
                        "base": "label of the base model's evaluation"}
"""Names a stage cannot take: its folder <run>/<name> or its evaluation label would collide with these."""


class StageSpec(Section):
    name: SafeName
    """Stage name: its folder under the run folder and its export under <run>/export/<name>."""
    overrides: list[str] = []
    """Dotted KEY=VALUE overrides of the base recipe for this stage (dataset, reward, hyper-parameters)."""

    @field_validator("name")
    @classmethod
    def _not_reserved(cls, name: str) -> str:
        if name in RESERVED_STAGE_NAMES:
            raise ValueError(f"{name!r} is taken by the run folder's own {RESERVED_STAGE_NAMES[name]}; "
                             "name the stage e.g. 'stage1'")
        return name


class CurriculumConfig(Section):
    """A curriculum: stage i+1 trains from stage i's exported checkpoint; the last stage is evaluated."""

    base_recipe: str = "bfcl_grpo"
    """The recipe every stage starts from (a name in recipes/ or a YAML path)."""
    stages: list[StageSpec] = Field(min_length=1)
    """The stages, in order."""
    evaluate: bool = True
    """Evaluate the base model and every stage's export on the held-out tasks of the last stage."""
    evaluate_each_stage: bool = False
    """Also score each stage on its own held-out tasks as it ends: the model it started from and its export,
    paired in <run>/<stage>/report/ (what each stage adds on the tasks it trained for)."""

    @field_validator("stages")
    @classmethod
    def _unique(cls, stages: list[StageSpec]) -> list[StageSpec]:
        names = [s.name for s in stages]
        if len(set(names)) != len(names):
            raise ValueError(f"stage names must be unique, got {names}")
        return stages


CURRICULA_DIR = RECIPES_DIR / "curricula"


def find_curriculum(path_or_name: str | Path) -> Path:
    """A curriculum path, or a name in recipes/curricula/ (`bfcl` -> recipes/curricula/bfcl.yaml)."""
    path = Path(path_or_name).expanduser()
    if path.is_file():
        return path
    candidate = CURRICULA_DIR / f"{path_or_name}.yaml"
    if candidate.is_file():
        return candidate
    known = sorted(p.stem for p in CURRICULA_DIR.glob("*.yaml"))
    raise ConfigError(f"curriculum {str(path_or_name)!r} not found; give a YAML path or one of: {', '.join(known)}")


def load_curriculum(path_or_name: str | Path) -> CurriculumConfig:
    """Read a curriculum YAML (`base_recipe`, `stages: [{name, overrides}]`), validated."""
    path = find_curriculum(path_or_name)
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict) or "stages" not in data:
        raise ConfigError(f"{path}: a curriculum is a mapping with base_recipe and stages (a list of name/overrides)")
    try:
        return CurriculumConfig.model_validate(data)
    except ValueError as err:
        raise ConfigError(f"{path}: invalid curriculum: {err}") from None


def stages_until(cur: CurriculumConfig, until: str | None) -> CurriculumConfig:
    """The curriculum up to and including stage `until` (all of it for None): a long curriculum run a stage or
    a few at a time, a later run skipping the stages done (they are cached)."""
    if until is None:
        return cur
    names = [s.name for s in cur.stages]
    if until not in names:
        raise ConfigError(f"no stage {until!r} to stop after; the curriculum's stages are {', '.join(names)}")
    return cur.model_copy(update={"stages": cur.stages[:names.index(until) + 1]})


def stage_recipe(cur: CurriculumConfig, index: int, overrides: Iterable[str] = ()) -> RecipeConfig:
    """Stage `index`'s recipe: base recipe, then the stage's overrides, then the caller's (last word)."""
    base = load_recipe(cur.base_recipe)
    data: dict[str, Any] = base.model_dump(mode="json", context={REVEAL: True})  # in-process: keep secrets
    for text in [*cur.stages[index].overrides, *overrides]:
        apply_override(data, *parse_override(text))
    recipe = build_config(data)
    check_rl_stage(recipe)  # every stage trains with GRPO
    return recipe


def stage_dir(recipe: RecipeConfig, name: str) -> Path:
    """Where a stage trains: <run folder>/<stage name> (refused if it would resolve outside the run folder)."""
    return path_under(recipe.run_dir, name)


def export_dir(recipe: RecipeConfig, name: str) -> Path:
    """Where a stage's export goes: <run folder>/export/<stage name> (refused if it would resolve outside it)."""
    return path_under(recipe.run_dir / "export", name)


def model_fingerprint(model_dir: str | Path) -> str:
    """A cheap identity of a model folder: sha256 over (name, size, mtime_ns) of its files.

    A curriculum stage's cache key includes its starting model's fingerprint, so a re-exported
    (changed) previous stage invalidates the stages after it.
    """
    root = Path(model_dir)
    if not root.is_dir():
        return hashlib.sha256(str(root).encode()).hexdigest()[:16]
    h = hashlib.sha256()
    for f in sorted(p for p in root.rglob("*") if p.is_file()):
        st = f.stat()
        h.update(f"{f.relative_to(root)}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:16]


def export_is_complete(path: str | Path) -> bool:
    """True when `path` is a complete export (its COMPLETE marker written last)."""
    return is_complete(Path(path))


@dataclass(frozen=True)
class StageOutcome:
    """What a finished stage hands to the next: its last checkpoint and its Hugging Face export."""

    name: str
    checkpoint: str
    export: str
    steps: int
    resumed_from: int
    metrics: dict[str, float]
    warm_start: str | None = None
    """The stage's SFT warm start export when it had one (`sft.enabled`): GRPO started from it."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def run_stage(recipe: RecipeConfig, name: str, init_model: str | Path, *, on_step: StepCallback | None = None,
              on_sft_step: StepCallback | None = None, env_url: str | None = None) -> StageOutcome:
    """Train one stage from `init_model` (each part resuming its own last checkpoint) and export it.

    With `sft.enabled` the stage warm-starts: SFT on the stage's expert demonstrations (or `sft.dataset`) in
    <run>/<stage>/sft, exported to <run>/<stage>/sft/export, then GRPO from that export; otherwise GRPO from
    `init_model`. The stage's environment server (its own kwargs, e.g. the BFCL stage) is started here on
    127.0.0.1 unless `env_url` (or recipe.env.url) points at a running one, and stopped after.
    """
    from contextlib import nullcontext

    from agentrl_core.env_service import launch_server
    from agentrl_core.grpo import train_grpo

    url = env_url or reveal(recipe.env.url, "env.url")
    server_cm = nullcontext(None) if url else launch_server(
        [recipe.env.name], host=recipe.env.host, env_kwargs={recipe.env.name: recipe.env.kwargs})
    with server_cm as server:
        url = url or server.url
        warm = warm_start(recipe, name, Path(init_model), url, on_sft_step) if recipe.sft.enabled else None
        result = train_grpo(recipe, init_model=warm or Path(init_model), env_url=url,
                            stage_dir=stage_dir(recipe, name), on_step=on_step)
    out = export_hf(Path(result.checkpoint), export_dir(recipe, name))
    return StageOutcome(name, result.checkpoint, str(out), result.steps, result.resumed_from, dict(result.metrics),
                        str(warm) if warm else None)


def warm_start(recipe: RecipeConfig, name: str, init_model: Path, env_url: str,
               on_step: StepCallback | None = None) -> Path:
    """Stage `name`'s SFT warm start from `init_model` (resumed from its last checkpoint, a finished one
    returned as it is), exported to <run>/<stage>/sft/export; returns the export."""
    from agentrl_core.training.sft import train_sft

    folder = stage_dir(recipe, name) / "sft"
    result = train_sft(recipe, init_model=init_model, env_url=env_url, stage_dir=folder, on_step=on_step)
    return export_hf(Path(result.checkpoint), folder / "export")
