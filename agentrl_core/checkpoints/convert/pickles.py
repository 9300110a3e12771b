"""Reading `.pt` files of other trainers with torch's restricted (`weights_only`) unpickler.

Foreign checkpoints pickle a few classes of their own (verl: DTensor; DeepSpeed: its loss scaler,
`ZeroStageEnum`, config objects). We never run arbitrary pickled code: DTensor is registered by
importing `torch.distributed.tensor`, and classes of packages listed in `STUB_PACKAGES` (which are
usually not installed here) are replaced by inert stand-ins that only hold their pickled state.
Any other non-allowed global fails with a CheckpointError naming it.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

from agentrl_core.errors import CheckpointError

STUB_PACKAGES = ("deepspeed",)
"""Top-level packages whose pickled classes are replaced by inert stand-ins (their state is kept)."""


class OpaqueObject:
    """Stand-in for a pickled object of a package we do not import: keeps its args and state.

    An `IntEnum`-like call with one plain value (how enums pickle) returns that value itself, so
    e.g. DeepSpeed's `ZeroStageEnum.gradients` reads back as the int 2.
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and not kwargs and isinstance(args[0], (int, float, str)):
            return args[0]
        obj = super().__new__(cls)
        obj.pickled_args = args
        return obj

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __setstate__(self, state: Any) -> None:
        self.pickled_state = state


def _stand_in(qualified: str) -> tuple[type, str]:
    module, _, name = qualified.rpartition(".")
    return type(name, (OpaqueObject,), {"__module__": module}), qualified


def load_torch_file(path: Path) -> Any:
    """`torch.load(path)` on the CPU with the restricted unpickler (see the module docstring)."""
    import torch.distributed.tensor

    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        unsafe = torch.serialization.get_unsafe_globals_in_checkpoint(path)
        stubbable = [name for name in unsafe if name.split(".")[0] in STUB_PACKAGES]
        others = sorted(set(unsafe) - set(stubbable) - _registered())
        if others or not stubbable:
            raise CheckpointError(
                f"cannot read {path} safely: it pickles {others or unsafe}, which the restricted "
                "unpickler refuses (we never unpickle arbitrary code); re-save it as plain tensors "
                "or convert it with the tool of the trainer that wrote it"
            ) from err
    with torch.serialization.safe_globals([_stand_in(name) for name in stubbable]):
        return torch.load(path, map_location="cpu", weights_only=True)


def _registered() -> set[str]:
    """Globals torch allows after `import torch.distributed.tensor` (DTensor and its spec types)."""
    return {
        "torch.distributed.tensor.DTensor",
        "torch.distributed.device_mesh.DeviceMesh",
        "torch.distributed.tensor.placement_types.Shard",
        "torch.distributed.tensor.placement_types.Replicate",
        "torch.distributed.tensor.placement_types.Partial",
        "torch.distributed.tensor._dtensor_spec.DTensorSpec",
        "torch.distributed.tensor._dtensor_spec.TensorMeta",
        "torch.distributed.tensor._dtensor_spec.ShardOrderEntry",
    }
