"""convert_to_hf: verl FSDP, torch DCP, DeepSpeed ZeRO-2/3 and our own checkpoints -> HF folders.

Each conversion must give a folder whose `from_pretrained` model returns logits torch.equal to the
model that was saved (fp32 throughout, so any lost, misplaced or padded element changes them).
"""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from agentrl_core.checkpoints import save_checkpoint
from agentrl_core.checkpoints.convert import (
    FORMATS,
    READERS,
    convert_to_hf,
    detect_format,
    hf_out,
)
from agentrl_core.errors import CheckpointError
from tests.checkpoints.convert_fixtures import (
    build_distributed,
    logits_of,
    model_from,
    tiny_config,
    tiny_tokenizer,
    write_deepspeed,
)

CASES = ["tied", "untied"]


@pytest.fixture(scope="module")
def dist_root(tmp_path_factory) -> Path:
    """Both cases saved once by 2 gloo processes (the slow part: ~15 s)."""
    root = tmp_path_factory.mktemp("dist")
    build_distributed(root, CASES)
    return root


def _reference(dist_root: Path, case: str) -> tuple[dict, torch.Tensor]:
    state = torch.load(dist_root / case / "reference.pt", weights_only=True)
    return state, logits_of(model_from(tiny_config(case == "tied"), state))


def _hf_dir(dist_root: Path, case: str) -> Path:
    return dist_root / case / "global_step_1" / "actor" / "huggingface"


def _assert_same_model(out: Path, expected_logits: torch.Tensor) -> None:
    names = {p.name for p in out.iterdir()}
    assert {
        "model.safetensors",
        "config.json",
        "generation_config.json",
        "tokenizer.json",
        "COMPLETE",
    } <= names
    model = AutoModelForCausalLM.from_pretrained(out).eval()
    assert next(model.parameters()).dtype == torch.float32
    assert torch.equal(logits_of(model), expected_logits)
    assert AutoTokenizer.from_pretrained(out)("w1 w7 w250")["input_ids"] == [1, 7, 250]


@pytest.mark.slow
def test_fixture_step_changed_the_weights(dist_root):
    init = torch.load(dist_root / "untied" / "init.pt", weights_only=True)
    final = torch.load(dist_root / "untied" / "reference.pt", weights_only=True)
    changed = [n for n in final if not torch.equal(init[n], final[n])]
    assert len(changed) == len(
        final
    )  # every parameter moved in the distributed SGD step


@pytest.mark.parametrize("case", CASES)
def test_verl_fsdp_gives_identical_logits(dist_root, tmp_path, case):
    _, expected = _reference(dist_root, case)
    step = dist_root / case / "global_step_1"
    assert (
        detect_format(step / "actor") == "verl_fsdp"
        and detect_format(step) == "verl_fsdp"
    )
    out = convert_to_hf(
        step, tmp_path / "hf"
    )  # the global_step folder: actor/ is found
    _assert_same_model(out, expected)
    marker = json.loads((out / "COMPLETE").read_text())
    assert marker["converted_from"] == "verl_fsdp" and marker["world_size"] == 2


@pytest.mark.parametrize("case", CASES)
def test_dcp_gives_identical_logits(dist_root, tmp_path, case):
    _, expected = _reference(dist_root, case)
    dcp_dir = dist_root / case / "dcp"
    assert detect_format(dcp_dir) == "dcp"
    out = convert_to_hf(
        dcp_dir, tmp_path / "hf", base_model=str(_hf_dir(dist_root, case))
    )
    _assert_same_model(out, expected)


def test_dcp_without_config_says_pass_base_model(dist_root, tmp_path):
    with pytest.raises(CheckpointError, match="base_model"):
        convert_to_hf(dist_root / "tied" / "dcp", tmp_path / "hf")
    assert not (tmp_path / "hf").exists()


@pytest.mark.parametrize("stage", [2, 3])
@pytest.mark.parametrize("case", CASES)
def test_deepspeed_zero_gives_identical_logits(dist_root, tmp_path, case, stage):
    state, expected = _reference(dist_root, case)
    root = write_deepspeed(tmp_path / "ds", state, stage=stage, tied=case == "tied")
    assert (
        detect_format(root) == "deepspeed"
        and detect_format(root / "global_step5") == "deepspeed"
    )
    if stage == 2:  # HF Trainer keeps config + tokenizer beside global_stepN/
        tiny_config(case == "tied").save_pretrained(root)
        tiny_tokenizer().save_pretrained(root)
        out = convert_to_hf(root, tmp_path / "hf")
    else:
        out = convert_to_hf(
            root / "global_step5",
            tmp_path / "hf",
            base_model=str(_hf_dir(dist_root, case)),
        )
    _assert_same_model(out, expected)
    assert json.loads((out / "COMPLETE").read_text())["zero_stage"] == stage


def test_deepspeed_missing_rank_is_reported(dist_root, tmp_path):
    state, _ = _reference(dist_root, "untied")
    root = write_deepspeed(tmp_path / "ds", state, stage=2, tied=False)
    (root / "global_step5" / "zero_pp_rank_2_mp_rank_00_optim_states.pt").unlink()
    with pytest.raises(CheckpointError, match="3 data-parallel ranks but there are 2"):
        convert_to_hf(
            root, tmp_path / "hf", base_model=str(_hf_dir(dist_root, "untied"))
        )


def test_ours_step_folder_and_sharded_folder(dist_root, tmp_path):
    state, expected = _reference(dist_root, "tied")
    model, tokenizer = model_from(tiny_config(True), state), tiny_tokenizer()
    step = save_checkpoint(tmp_path / "ckpts", 3, model=model, tokenizer=tokenizer)
    assert detect_format(step) == "ours"
    _assert_same_model(convert_to_hf(step, tmp_path / "from_step"), expected)
    sharded = tmp_path / "sharded"
    model.save_pretrained(sharded, max_shard_size="40KB")
    tokenizer.save_pretrained(sharded)
    assert (sharded / "model.safetensors.index.json").is_file()
    _assert_same_model(
        convert_to_hf(sharded, tmp_path / "from_shards", fmt="ours"), expected
    )


def test_verl_missing_rank_file_is_reported(dist_root, tmp_path):
    actor = tmp_path / "actor"
    actor.mkdir()
    src = (
        dist_root
        / "untied"
        / "global_step_1"
        / "actor"
        / "model_world_size_2_rank_0.pt"
    )
    os.symlink(src, actor / src.name)
    with pytest.raises(CheckpointError, match=r"lacks the files of ranks \[1\]"):
        convert_to_hf(actor, tmp_path / "hf")


def test_wrong_base_model_is_a_clear_error(dist_root, tmp_path):
    wrong = tmp_path / "wrong"
    tiny_config(True).__class__(
        **{**tiny_config(True).to_dict(), "intermediate_size": 128}
    ).save_pretrained(wrong)
    tiny_tokenizer().save_pretrained(wrong)
    with pytest.raises(CheckpointError, match="shape mismatches.*129"):
        convert_to_hf(
            dist_root / "tied" / "dcp", tmp_path / "hf", base_model=str(wrong)
        )
    assert not (tmp_path / "hf").exists()


def test_unknown_folder_and_format_are_clear_errors(tmp_path):
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "notes.txt").write_text("hi")
    with pytest.raises(CheckpointError, match=r"cannot tell what wrote .*notes\.txt"):
        convert_to_hf(tmp_path / "junk", tmp_path / "hf")
    with pytest.raises(CheckpointError, match="no such folder"):
        detect_format(tmp_path / "absent")
    with pytest.raises(CheckpointError, match="unknown checkpoint format 'megatron'"):
        convert_to_hf(tmp_path / "junk", tmp_path / "hf", fmt="megatron")
    assert set(READERS) == set(FORMATS)


def test_unsafe_pickle_is_refused(tmp_path):
    actor = tmp_path / "actor"
    actor.mkdir()
    torch.save(
        {"w": torch.zeros(2), "evil": pickle.loads(pickle.dumps(Path("x")))},
        actor / "model_world_size_1_rank_0.pt",
    )
    with pytest.raises(CheckpointError, match="cannot read .* safely"):
        convert_to_hf(actor, tmp_path / "hf")


def test_failed_write_leaves_no_folder_and_keeps_the_old_one(
    dist_root, tmp_path, monkeypatch
):
    step = dist_root / "untied" / "global_step_1"
    out = convert_to_hf(step, tmp_path / "hf")
    before = (out / "model.safetensors").read_bytes()

    def boom(*_args):
        raise OSError("disk full")

    monkeypatch.setattr(hf_out, "_copy_tokenizer", boom)
    with pytest.raises(OSError, match="disk full"):
        convert_to_hf(step, tmp_path / "hf")
    with pytest.raises(OSError, match="disk full"):
        convert_to_hf(step, tmp_path / "fresh")
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "hf"
    ]  # no temp folders, no half "fresh"
    assert (out / "model.safetensors").read_bytes() == before and (
        out / "COMPLETE"
    ).is_file()


def test_wrapper_names_are_stripped():
    from agentrl_core.checkpoints.convert.source import strip_wrappers

    wrapped = "module._fsdp_wrapped_module.model.layers.0._checkpoint_wrapped_module.mlp.up_proj.weight"
    assert strip_wrappers(wrapped) == "model.layers.0.mlp.up_proj.weight"
    assert strip_wrappers("_orig_mod.model.norm.weight") == "model.norm.weight"
    assert (
        strip_wrappers("model.adapter.module.weight") == "model.adapter.module.weight"
    )  # only a leading module.
