"""LoRA (peft): only adapters train, checkpoints hold the adapter and resume exactly, export merges."""

from __future__ import annotations

import copy
import json
import os
import random

import pytest
import torch
from pydantic import ValidationError
from transformers import AutoModelForCausalLM

from agentrl_core.checkpoints import MARKER, export_hf, load_checkpoint
from agentrl_core.config import AlgorithmConfig, LoraConfig, OptimConfig, RecipeConfig
from agentrl_core.errors import CheckpointError, ConfigError
from agentrl_core.models import load_model
from agentrl_core.models.lora import adapter_state, adapters_off
from agentrl_core.training.batching import collate
from agentrl_core.training.logprobs import token_logprobs
from agentrl_core.training.policy_update import UpdateContext, policy_update
from agentrl_core.training.session import open_session
from agentrl_core.training.sft import sft_update
from tests.training.test_training_units import batch, make_traj

LORA = LoraConfig(enabled=True, r=4, alpha=8)
OPTIM = OptimConfig(lr=1e-2)
# The tiny Llama: hidden 32, MLP 64, 4 heads of 8 with 2 KV heads, 2 layers. A LoRA on a d_in -> d_out
# layer has r*(d_in + d_out) parameters: q 32+32, k 32+16, v 32+16, o 32+32, gate 32+64, up 32+64,
# down 64+32 = 512 per layer, so 2 layers at r=4 train 4 * 512 * 2 = 4096 parameters.
TINY_LORA_PARAMS = 4 * 512 * 2


def demos(seed: int = 0) -> list:
    rng = random.Random(seed)
    return [make_traj(rng, group=i, reward=1.0) for i in range(4)]


def _open(tmp_path, model_path, lora=LORA, name="stage", **kw):
    torch.manual_seed(0)
    return open_session(tmp_path / name, model_path, OPTIM, total_steps=4, resume="auto", lora=lora, **kw)


def _base_weights(model) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" not in n}


def _adapter(session) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in adapter_state(session.adapter).items()}


def _assert_only_adapters_changed(session, base_before, adapter_before):
    for name, value in _base_weights(session.model).items():
        assert torch.equal(value, base_before[name]), f"base weight {name} changed"
    after = _adapter(session)
    changed = [k for k in after if not torch.equal(after[k], adapter_before[k])]
    assert any("lora_B" in k for k in changed), "no adapter weight moved"


# -- config ----------------------------------------------------------------------------------------
def test_lora_defaults_are_off_with_the_llama_projections():
    cfg = RecipeConfig().model.lora
    assert not cfg.enabled and (cfg.r, cfg.alpha, cfg.dropout) == (16, 32, 0.0)
    assert cfg.target_modules == ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


@pytest.mark.parametrize("bad, field", [
    ({"r": 0}, "model.lora.r"), ({"alpha": 0}, "model.lora.alpha"), ({"dropout": 1.0}, "model.lora.dropout"),
    ({"target_modules": []}, "model.lora.target_modules"), ({"target_modules": ["q_proj", "q_proj"]},
                                                             "model.lora.target_modules"),
    ({"rank": 8}, "model.lora.rank"),
])
def test_invalid_lora_settings_name_the_field(bad, field):
    with pytest.raises(ValidationError) as err:
        RecipeConfig(model={"lora": bad})
    assert field in str(err.value)


# -- training --------------------------------------------------------------------------------------
def test_disabled_lora_trains_every_weight_as_before(tmp_path, tiny_model_path):
    session = _open(tmp_path, tiny_model_path, lora=LoraConfig())
    assert session.adapter is None and session.lora is None
    n_params = sum(p.numel() for p in session.model.parameters())
    assert sum(p.numel() for g in session.optimizer.param_groups for p in g["params"]) == n_params


@pytest.mark.parametrize("checkpointing", [False, True])
def test_sft_step_with_lora_moves_only_the_adapters(tmp_path, tiny_model_path, checkpointing):
    session = _open(tmp_path, tiny_model_path, gradient_checkpointing=checkpointing)
    trainable = [p for g in session.optimizer.param_groups for p in g["params"]]
    assert sum(p.numel() for p in trainable) == TINY_LORA_PARAMS
    base_before, adapter_before = _base_weights(session.model), _adapter(session)
    metrics = sft_update(session, demos(), grad_clip=1.0, micro_batch_tokens=4096, pad_id=0)
    assert metrics["grad_norm"] > 0
    _assert_only_adapters_changed(session, base_before, adapter_before)


def test_gradient_checkpointing_gives_the_same_lora_step(tmp_path, tiny_model_path):
    after = []
    for checkpointing in (False, True):
        session = _open(tmp_path, tiny_model_path, name=f"gc{checkpointing}", gradient_checkpointing=checkpointing)
        sft_update(session, demos(), grad_clip=1.0, micro_batch_tokens=4096, pad_id=0)
        after.append(_adapter(session))
    assert after[0].keys() == after[1].keys()
    for k in after[0]:
        torch.testing.assert_close(after[1][k], after[0][k], rtol=1e-5, atol=1e-7)


def test_grpo_update_with_lora_uses_the_adapter_free_model_as_reference(tmp_path, tiny_model_path):
    session = _open(tmp_path, tiny_model_path)
    base_before, adapter_before = _base_weights(session.model), _adapter(session)
    cfg = AlgorithmConfig(kl_coef=0.5, kl_estimator="k1", norm_adv_by_std=False)
    ctx = UpdateContext(session.model, session.optimizer, session.scheduler, cfg, grad_clip=1.0,
                        micro_batch_tokens=4096, pad_id=0, ref_model=adapters_off(session.adapter))
    first = policy_update(ctx, batch())
    assert first["kl"] == pytest.approx(0.0, abs=1e-7)  # B = 0: policy == base before the first step
    _assert_only_adapters_changed(session, base_before, adapter_before)
    second = policy_update(ctx, batch())
    assert abs(second["kl"]) > 1e-7  # the adapters now move the policy away from the reference
    # the view really is the untouched base model: same log-probs as a fresh load of init_model
    mb = collate(batch(), [0, 1, 2], pad_id=0)
    with torch.no_grad():
        ref = token_logprobs(ctx.ref_model, mb.input_ids, mb.attention_mask, mb.target_mask).logprobs
        fresh = token_logprobs(load_model(tiny_model_path), mb.input_ids, mb.attention_mask, mb.target_mask).logprobs
        policy = token_logprobs(session.model, mb.input_ids, mb.attention_mask, mb.target_mask).logprobs
    torch.testing.assert_close(ref, fresh, rtol=0, atol=1e-6)
    assert not torch.allclose(policy, fresh, atol=1e-6)


# -- checkpoints -----------------------------------------------------------------------------------
def test_lora_checkpoint_holds_the_adapter_and_resumes_exactly(tmp_path, tiny_model_path):
    session = _open(tmp_path, tiny_model_path)
    sft_update(session, demos(0), grad_clip=1.0, micro_batch_tokens=4096, pad_id=0)
    ckpt = session.save(1, keep_last=2)
    files = set(os.listdir(ckpt / "model"))
    assert {"adapter_model.safetensors", "adapter_config.json", "tokenizer.json"} <= files
    assert "model.safetensors" not in files and (ckpt / MARKER).is_file()
    state = json.loads((ckpt / "trainer_state.json").read_text())
    assert state["base_model"] == str(tiny_model_path) and state["lora"]["r"] == 4
    saved_adapter, saved_opt = _adapter(session), copy.deepcopy(session.optimizer.state_dict())
    sft_update(session, demos(1), grad_clip=1.0, micro_batch_tokens=4096, pad_id=0)
    continued = _adapter(session)

    resumed = _open(tmp_path, tiny_model_path)
    assert resumed.start_step == 1
    for k, v in _adapter(resumed).items():
        assert torch.equal(v, saved_adapter[k]), k
    opt = resumed.optimizer.state_dict()
    assert opt["param_groups"] == saved_opt["param_groups"]
    for i, st in saved_opt["state"].items():
        for key, value in st.items():
            assert torch.equal(opt["state"][i][key], value), (i, key)
    sft_update(resumed, demos(1), grad_clip=1.0, micro_batch_tokens=4096, pad_id=0)
    for k, v in _adapter(resumed).items():  # the same next step from the same state: the same weights
        assert torch.equal(v, continued[k]), k
    # load_checkpoint fills a PeftModel's adapter strictly
    other = _open(tmp_path, tiny_model_path, name="other")
    load_checkpoint(ckpt, model=other.adapter, restore_rng=False)
    assert all(torch.equal(v, saved_adapter[k]) for k, v in _adapter(other).items())


def test_lora_resume_refuses_another_base_model_or_mode(tmp_path, tiny_model_path):
    session = _open(tmp_path, tiny_model_path)
    session.save(1, keep_last=1)
    other_base = tmp_path / "other-base"
    load_model(tiny_model_path).save_pretrained(other_base)
    with pytest.raises(CheckpointError, match="continues a run that started from"):
        _open(tmp_path, other_base)
    with pytest.raises(CheckpointError, match="holds a LoRA adapter but model.lora.enabled is off"):
        _open(tmp_path, tiny_model_path, lora=LoraConfig())
    with pytest.raises(CheckpointError, match=r"trained with r=4 \(run has 8\)"):
        _open(tmp_path, tiny_model_path, lora=LoraConfig(enabled=True, r=8, alpha=8))


def test_target_modules_that_match_nothing_fail_clearly(tmp_path, tiny_model_path):
    with pytest.raises(ConfigError, match="model.lora.target_modules"):
        _open(tmp_path, tiny_model_path, lora=LoraConfig(enabled=True, target_modules=["nope_proj"]))


# -- export ----------------------------------------------------------------------------------------
def test_export_merges_the_adapter_into_a_plain_model_with_equal_logits(tmp_path, tiny_model_path):
    session = _open(tmp_path, tiny_model_path)
    with torch.no_grad():  # a non-trivial adapter on every layer (a fresh one has B = 0)
        for name, p in session.adapter.named_parameters():
            if "lora_" in name:
                p.copy_(0.2 * torch.randn_like(p))
    ckpt = session.save(1, keep_last=1)
    out = export_hf(ckpt, tmp_path / "export")
    files = set(os.listdir(out))
    assert {"config.json", "model.safetensors", "generation_config.json", "tokenizer.json", MARKER} <= files
    assert not files & {"adapter_config.json", "adapter_model.safetensors"}
    merged = AutoModelForCausalLM.from_pretrained(out).eval()
    assert type(merged).__name__ == "LlamaForCausalLM"
    assert not any("lora" in k for k in merged.state_dict())
    ids = torch.tensor([[1, 17, 250, 3000, 42, 9, 77, 2]])
    session.adapter.eval()
    with torch.no_grad():
        want = session.adapter(input_ids=ids).logits
        got = merged(input_ids=ids).logits
        base = load_model(tiny_model_path)(input_ids=ids).logits
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
    assert (got - base).abs().max() > 1e-3  # the adapter really is in the merged weights
    # the exported folder chains into the next stage as an ordinary init model
    grpo = _open(tmp_path, out, name="grpo")
    assert grpo.adapter is not None and grpo.init_model == str(out)


def test_merged_state_dict_is_the_merged_model_and_leaves_the_adapters_alone(tiny_model_path):
    from agentrl_core.models.lora import merged_state_dict, wrap_lora

    model = load_model(tiny_model_path)
    wrapped = wrap_lora(model, LoraConfig(enabled=True, r=4))
    torch.manual_seed(1)
    for name, p in wrapped.named_parameters():  # non-zero adapters (B starts at 0): a merge that does something
        if "lora_B" in name:
            p.data.normal_(0, 0.5)
    before = {k: v.clone() for k, v in wrapped.state_dict().items()}
    merged = merged_state_dict(wrapped)
    assert {k: v for k, v in wrapped.state_dict().items()}.keys() == before.keys()
    assert all(torch.equal(wrapped.state_dict()[k], before[k]) for k in before)  # computed aside, nothing merged in
    reference = copy.deepcopy(wrapped).merge_and_unload().state_dict()
    assert merged.keys() == reference.keys()
    for key in reference:
        torch.testing.assert_close(merged[key], reference[key], rtol=1e-6, atol=1e-6)
    plain = load_model(tiny_model_path).state_dict()
    assert any(not torch.equal(merged[k], plain[k]) for k in plain)  # and the adapters are in it
