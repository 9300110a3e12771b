"""The convert-checkpoint flow for real (Prefect test harness): a training checkpoint → an HF folder, same logits."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaForCausalLM

from agentrl_core.checkpoints.state import save_checkpoint

from tests.checkpoints.convert_fixtures import logits_of, tiny_config, tiny_tokenizer

pytestmark = pytest.mark.slow


def test_convert_checkpoint_flow_writes_an_equivalent_hf_folder(prefect_harness, tmp_path):
    from flows.convert import convert_checkpoint

    torch.manual_seed(3)
    model = LlamaForCausalLM(tiny_config(True)).eval()
    expected = logits_of(model)
    step = save_checkpoint(tmp_path / "ckpts", 5, model=model, tokenizer=tiny_tokenizer())
    out = convert_checkpoint(source=str(step), out_dir=str(tmp_path / "hf"))
    assert out["format"] == "ours" and json.loads((tmp_path / "hf" / "COMPLETE").read_text())
    assert torch.equal(logits_of(AutoModelForCausalLM.from_pretrained(out["out"]).eval()), expected)
    again = convert_checkpoint(source=str(step), out_dir=str(tmp_path / "hf"))  # a re-run (retry) replaces it whole
    assert torch.equal(logits_of(AutoModelForCausalLM.from_pretrained(again["out"]).eval()), expected)
