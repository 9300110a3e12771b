"""Training backends: who runs backward and the optimizer step (plain torch, DeepSpeed ZeRO)."""

from agentrl_core.training.backends.base import TrainBackend
from agentrl_core.training.backends.torch_backend import TorchBackend

__all__ = ["TorchBackend", "TrainBackend", "build_backend"]


def build_backend(*args, **kwargs) -> TrainBackend:
    """Build the backend `trainer.backend` names; see `agentrl_core.training.backends.factory`."""
    from agentrl_core.training.backends.factory import build_backend as build

    return build(*args, **kwargs)
