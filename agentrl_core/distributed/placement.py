"""Placement: which CPUs and GPUs the rollout workers and the trainer get, as Ray placement groups."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agentrl_core.config import DistributedConfig
from agentrl_core.errors import ConfigError

TRAINER_CPUS = 1.0


@dataclass(frozen=True)
class Bundle:
    """The resources of one actor: {"CPU": cpus, "GPU": gpus, custom: 1} in Ray's terms (`custom`: a resource
    some nodes were started with, `ray start --resources`, which keeps the actor on those nodes)."""

    cpus: float
    gpus: float
    custom: str | None = None

    def resources(self) -> dict[str, float]:
        return {"CPU": self.cpus, **({"GPU": self.gpus} if self.gpus > 0 else {}),
                **({self.custom: 1.0} if self.custom else {})}


@dataclass(frozen=True)
class PlacementPlan:
    """One bundle per rollout worker (PACK: as few nodes as possible, may spread) and one per trainer worker
    (`trainer` each: one worker STRICT_PACK, on one node; several PACK, as few nodes as possible)."""

    rollout: tuple[Bundle, ...]
    trainer: Bundle
    rollout_strategy: str = "PACK"
    trainer_workers: int = 1

    @property
    def trainers(self) -> tuple[Bundle, ...]:
        return (self.trainer,) * self.trainer_workers

    @property
    def trainer_strategy(self) -> str:
        return "STRICT_PACK" if self.trainer_workers == 1 else "PACK"

    @property
    def cpus(self) -> float:
        return sum(b.cpus for b in (*self.rollout, *self.trainers))

    @property
    def train_gpus(self) -> float:
        return sum(b.gpus for b in self.trainers)

    @property
    def rollout_gpus(self) -> float:
        return sum(b.gpus for b in self.rollout)


def plan_placement(cfg: DistributedConfig) -> PlacementPlan:
    """The bundles the config asks for; each rollout worker gets rollout_gpus / rollout_workers GPUs.

    Ray accepts a fractional GPU share below 1 or a whole number, and one actor lives on one node,
    so no actor may ask for more than gpus_per_node.
    """
    per_worker = cfg.rollout_gpus / cfg.rollout_workers
    if (cfg.rollout_gpus > 0 or cfg.train_gpus > 0) and cfg.gpus_per_node == 0:
        raise ConfigError(f"distributed.rollout_gpus={cfg.rollout_gpus} and distributed.train_gpus={cfg.train_gpus} "
                          "ask for GPUs but distributed.gpus_per_node is 0; set it to the GPUs of one node")
    if per_worker > 1 and per_worker != int(per_worker):
        raise ConfigError(f"each of the {cfg.rollout_workers} rollout workers would get {per_worker:g} GPUs; a share "
                          "above 1 must be a whole number: make distributed.rollout_gpus a multiple of "
                          "distributed.rollout_workers, or use more workers than GPUs")
    if per_worker > cfg.gpus_per_node and cfg.gpus_per_node > 0:
        raise ConfigError(f"each rollout worker would get {per_worker:g} GPUs but a node has "
                          f"distributed.gpus_per_node={cfg.gpus_per_node}; use more rollout workers")
    if cfg.train_gpus > cfg.gpus_per_node:
        raise ConfigError(f"distributed.train_gpus={cfg.train_gpus} exceeds distributed.gpus_per_node="
                          f"{cfg.gpus_per_node}: the trainer worker runs on one node")
    rollout = tuple(Bundle(cfg.cpus_per_rollout_worker, per_worker, cfg.rollout_resource)
                    for _ in range(cfg.rollout_workers))
    return PlacementPlan(rollout, Bundle(TRAINER_CPUS, float(cfg.train_gpus), cfg.trainer_resource),
                         trainer_workers=cfg.trainer_workers)


def check_fits(plan: PlacementPlan, cluster: Mapping[str, float]) -> None:
    """Raise ConfigError naming the setting to change when the cluster (ray.cluster_resources()) is too small."""
    gpus, cpus = float(cluster.get("GPU", 0.0)), float(cluster.get("CPU", 0.0))
    if plan.rollout_gpus > gpus:
        raise ConfigError(f"asked for {plan.rollout_gpus:g} rollout GPUs but the cluster has {gpus:g} GPUs; set "
                          "distributed.rollout_gpus=0 to roll out on CPU, or start Ray where the GPUs are")
    if plan.rollout_gpus + plan.train_gpus > gpus:
        raise ConfigError(f"asked for {plan.rollout_gpus:g} rollout + {plan.train_gpus:g} training GPUs but the "
                          f"cluster has {gpus:g} GPUs; lower distributed.train_gpus or distributed.rollout_gpus")
    if plan.cpus > cpus:
        raise ConfigError(f"asked for {plan.cpus:g} CPUs ({len(plan.rollout)} rollout workers x "
                          f"{plan.rollout[0].cpus:g} + {plan.trainer_workers} trainer workers x {plan.trainer.cpus:g}) "
                          f"but the cluster has {cpus:g}; lower distributed.rollout_workers, "
                          "distributed.cpus_per_rollout_worker or distributed.trainer_workers")
    for name, units in custom_units(plan).items():
        if units > float(cluster.get(name, 0.0)):
            setting = "distributed.trainer_resource" if name == plan.trainer.custom else "distributed.rollout_resource"
            raise ConfigError(f"asked for {units:g} units of the custom resource {name!r} ({setting}) but the cluster "
                              f"has {float(cluster.get(name, 0.0)):g}: start nodes with `ray start --resources "
                              f"'{{\"{name}\": N}}'` (deployments/ray_cluster.sh does), or unset {setting}")


def custom_units(plan: PlacementPlan) -> dict[str, float]:
    """Units of each custom resource the plan asks for (one per bundle that names it)."""
    units: dict[str, float] = {}
    for bundle in (*plan.rollout, *plan.trainers):
        if bundle.custom:
            units[bundle.custom] = units.get(bundle.custom, 0.0) + 1.0
    return units


def create_placement_groups(plan: PlacementPlan, timeout_s: float = 60.0) -> tuple[Any, Any]:
    """(rollout group, trainer group), reserved on the running Ray; raises when they are not ready in time."""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    rollout = placement_group([b.resources() for b in plan.rollout], strategy=plan.rollout_strategy,
                              name="agentrl-rollout")
    trainer = placement_group([b.resources() for b in plan.trainers], strategy=plan.trainer_strategy,
                              name="agentrl-trainer")
    ready, _ = ray.wait([rollout.ready(), trainer.ready()], num_returns=2, timeout=timeout_s)
    if len(ready) < 2:
        remove_placement_group(rollout)
        remove_placement_group(trainer)
        raise ConfigError(f"Ray could not reserve {plan} within {timeout_s:g} s: the cluster has the resources "
                          "in total but not free, or not on one node; see `ray status`")
    return rollout, trainer


def in_group(group: Any, index: int) -> Any:
    """The scheduling strategy that puts an actor into bundle `index` of `group`."""
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    return PlacementGroupSchedulingStrategy(placement_group=group, placement_group_bundle_index=index)
