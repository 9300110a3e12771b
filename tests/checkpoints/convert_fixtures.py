"""Checkpoint fixtures in foreign layouts, written by torch itself (FSDP2 + DCP) or by hand (DeepSpeed).

`build_distributed` runs 2 CPU processes (gloo) that shard a tiny Llama with `fully_shard`, take
one SGD step (so the weights differ from the init), and save it three ways: verl's per-rank
`model_world_size_2_rank_{r}.pt` (+ `huggingface/`), a DCP folder, and the gathered reference.

`write_deepspeed` writes the ZeRO layout of DeepSpeed's `zero_to_fp32.py` by hand from full
tensors (DeepSpeed is not installed): NO real DeepSpeed-written checkpoint is tested here.
    ZeRO-2 (W ranks): per group, flat = cat(params in order) padded with zeros to a multiple
        of 2W, split in W equal partitions -> `single_partition_of_fp32_groups[g]` of rank r.
    ZeRO-3: each param padded to W * ceil(n/W); rank r keeps slice r; a rank's group flat is
        the concat of its slices -> `fp32_flat_groups[g]`; model states file per rank.
    Frozen params (requires_grad=False) go to `frozen_param_shapes` / `frozen_param_fragments`.
    `zero_stage` is pickled as a class of a fake `deepspeed` module and ZeRO-2 optimizer states
    hold a fake loss-scaler object, as real files do; the fake modules are removed after saving.
"""

from __future__ import annotations

import enum
import math
import os
import sys
import types
from pathlib import Path

import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from agentrl_core.web.ports import free_port
from tests.checkpoints.conftest import tiny_config as base_tiny_config

VOCAB = 256
WORLD = 2
INPUT_IDS = torch.tensor(
    [[1, 5, 9, 200, 17, 3, 255, 0], [7, 7, 42, 128, 64, 2, 11, 99]]
)
"""The fixed input every logits comparison uses: [batch 2, seq 8]."""


def tiny_config(tied: bool) -> LlamaConfig:
    """Hidden 64, 2 layers, 4 heads, vocab 256; intermediate 129 so FSDP shards are uneven (65 + 64)."""
    return base_tiny_config(vocab_size=VOCAB, hidden_size=64, intermediate_size=129, max_position_embeddings=64,
                            tie_word_embeddings=tied)


def tiny_tokenizer() -> PreTrainedTokenizerFast:
    """Word-level tokenizer over `w0 … w251` plus four specials (256 ids), built locally."""
    vocab = {f"w{i}": i for i in range(VOCAB - 4)}
    vocab.update(
        {"[UNK]": VOCAB - 4, "[PAD]": VOCAB - 3, "<s>": VOCAB - 2, "</s>": VOCAB - 1}
    )
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        unk_token="[UNK]",
        pad_token="[PAD]",
        bos_token="<s>",
        eos_token="</s>",
    )


def model_from(config: LlamaConfig, state: dict[str, torch.Tensor]) -> LlamaForCausalLM:
    """A fp32 eval-mode model holding `state` (strict load)."""
    model = LlamaForCausalLM(config).eval()
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing, unexpected)
    return model


@torch.no_grad()
def logits_of(model) -> torch.Tensor:
    return model(input_ids=INPUT_IDS).logits



def _worker(rank: int, port: int, root: str, cases: list[str]) -> None:
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.fsdp import fully_shard

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    try:
        for case in cases:
            out = Path(root) / case
            model = LlamaForCausalLM(tiny_config(case == "tied"))
            model.load_state_dict(
                torch.load(out / "init.pt", weights_only=True), strict=False
            )
            for layer in model.model.layers:
                fully_shard(layer)
            fully_shard(model)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
            ids = INPUT_IDS[
                rank : rank + 1
            ]  # each rank its own micro-batch: the step needs the all-reduce
            model(input_ids=ids, labels=ids).loss.backward()
            optimizer.step()
            state = model.state_dict()  # DTensor shards, placements (Shard(0),)
            actor = out / "global_step_1" / "actor"
            torch.save(state, actor / f"model_world_size_{WORLD}_rank_{rank}.pt")
            dcp.save(state, checkpoint_id=str(out / "dcp"))
            full = {name: tensor.full_tensor() for name, tensor in state.items()}
            if rank == 0:
                torch.save(full, out / "reference.pt")
            dist.barrier()
    finally:
        dist.destroy_process_group()


def build_distributed(root: Path, cases: list[str]) -> None:
    """For each case ("tied"/"untied"): `root/case/{global_step_1/actor, dcp, reference.pt}`."""
    import torch.multiprocessing as mp

    for case in cases:
        out = root / case
        actor = out / "global_step_1" / "actor"
        actor.mkdir(parents=True)
        torch.manual_seed(0 if case == "tied" else 1)
        config = tiny_config(case == "tied")
        torch.save(LlamaForCausalLM(config).state_dict(), out / "init.pt")
        config.save_pretrained(actor / "huggingface")  # what verl's rank 0 writes
        tiny_tokenizer().save_pretrained(actor / "huggingface")
    mp.spawn(_worker, args=(free_port(), str(root), cases), nprocs=WORLD, join=True)


# ---- DeepSpeed ZeRO layout, written by hand -------------------------------------------------


class _FakeZeroStage(enum.IntEnum):
    optimizer_states = 1
    gradients = 2
    weights = 3


class _FakeLossScaler:
    def __init__(self) -> None:
        self.cur_scale = 65536.0
        self.cur_iter = 7


_FAKE = {
    "deepspeed.runtime.zero.config": ("ZeroStageEnum", _FakeZeroStage),
    "deepspeed.runtime.fp16.loss_scaler": ("DynamicLossScaler", _FakeLossScaler),
}


def _install_fake_deepspeed() -> list[str]:
    added = []
    for module_name, (cls_name, cls) in _FAKE.items():
        parts = module_name.split(".")
        for i in range(1, len(parts) + 1):
            name = ".".join(parts[:i])
            if name not in sys.modules:
                sys.modules[name] = types.ModuleType(name)
                added.append(name)
        cls.__module__, cls.__qualname__, cls.__name__ = module_name, cls_name, cls_name
        setattr(sys.modules[module_name], cls_name, cls)
    return added


def _groups(
    state: dict[str, torch.Tensor], tied: bool, frozen: set[str]
) -> list[dict[str, torch.Tensor]]:
    """Trainable params in two groups (matrices, then vectors), as a decay / no-decay split would."""
    names = [
        n for n in state if n not in frozen and not (tied and n == "lm_head.weight")
    ]
    return [
        {n: state[n] for n in names if state[n].dim() >= 2},
        {n: state[n] for n in names if state[n].dim() < 2},
    ]


def _pad_to(flat: torch.Tensor, multiple: int) -> torch.Tensor:
    return torch.cat(
        [
            flat,
            flat.new_zeros(
                math.ceil(flat.numel() / multiple) * multiple - flat.numel()
            ),
        ]
    )


def _zero3_slice(tensor: torch.Tensor, rank: int, world: int) -> torch.Tensor:
    per_rank = math.ceil(tensor.numel() / world)
    return _pad_to(tensor.reshape(-1), world)[rank * per_rank : (rank + 1) * per_rank]


def write_deepspeed(
    root: Path,
    state: dict[str, torch.Tensor],
    *,
    stage: int,
    tied: bool,
    world: int = 3,
    frozen: tuple[str, ...] = ("model.norm.weight",),
) -> Path:
    """Write `root/{latest, global_step5/…}` in ZeRO-`stage` layout (see the module docstring)."""
    tag = root / "global_step5"
    tag.mkdir(parents=True)
    (root / "latest").write_text("global_step5\n")
    groups = _groups(state, tied, set(frozen))
    shapes = [{n: t.shape for n, t in g.items()} for g in groups]
    half = {
        n: t.to(torch.bfloat16) for n, t in state.items()
    }  # what `module` holds: NOT the masters
    added = _install_fake_deepspeed()
    try:
        for rank in range(world):
            if stage == 3:
                flats = [
                    torch.cat([_zero3_slice(t, rank, world) for t in g.values()])
                    for g in groups
                ]
                key, count = "fp32_flat_groups", world
                fragments = {n: _zero3_slice(state[n], rank, world) for n in frozen}
            else:
                flats = [
                    _pad_to(
                        torch.cat([t.reshape(-1) for t in g.values()]), 2 * world
                    ).chunk(world)[rank]
                    for g in groups
                ]
                key, count = "single_partition_of_fp32_groups", [world] * len(groups)
                fragments = {n: state[n].clone() for n in frozen}
            optim = {
                "zero_stage": _FakeZeroStage(stage),
                "partition_count": count,
                key: [f.clone() for f in flats],
                "loss_scaler": _FakeLossScaler(),
                "optimizer_state_dict": {"state": {}, "param_groups": []},
            }
            prefix = "bf16_" if stage == 3 else ""
            torch.save(
                {"optimizer_state_dict": optim, "ds_version": "0.16.0"},
                tag / f"{prefix}zero_pp_rank_{rank}_mp_rank_00_optim_states.pt",
            )
            model_states = {
                "module": half if stage < 3 else {},
                "buffer_names": [],
                "param_shapes": shapes,
                "frozen_param_shapes": {n: state[n].shape for n in frozen},
                "frozen_param_fragments": fragments,
                "shared_params": {"lm_head.weight": "model.embed_tokens.weight"}
                if tied
                else {},
                "ds_version": "0.16.0",
            }
            if stage == 3:
                torch.save(
                    model_states,
                    tag / f"zero_pp_rank_{rank}_mp_rank_00_model_states.pt",
                )
            elif rank == 0:
                torch.save(model_states, tag / "mp_rank_00_model_states.pt")
    finally:
        for name in reversed(added):
            sys.modules.pop(name, None)
    return root
