"""Ray as the distributed engine: placement, rollout workers, a trainer worker, weight sync, the driver.

Only `driver.train_grpo_ray` and the Ray runtime import `ray`, lazily, so the rest of agentrl
works without it installed.
"""

from agentrl_core.distributed.placement import PlacementPlan, check_fits, plan_placement
from agentrl_core.distributed.weight_sync import StaleWeightsError, WeightSyncError

__all__ = ["PlacementPlan", "StaleWeightsError", "WeightSyncError", "check_fits", "plan_placement"]
