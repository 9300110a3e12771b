"""The Ray executor of the GRPO loop: placement, a rollout worker group, a trainer worker, weight sync, clusters.

The loop itself is agentrl_core/grpo/loop.py; `executor.RayExecutor` carries its phases out on Ray. Only the
executor and the Ray runtime import `ray`, lazily, so the rest of agentrl works without it installed.
"""

from agentrl_core.distributed.placement import PlacementPlan, check_fits, plan_placement
from agentrl_core.distributed.weight_sync import StaleWeightsError, WeightSyncError

__all__ = ["PlacementPlan", "StaleWeightsError", "WeightSyncError", "check_fits", "plan_placement"]
