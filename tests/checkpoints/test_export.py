"""Export to a standalone Hugging Face folder: loads with from_pretrained, same logits, atomic."""

from __future__ import annotations

import os

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from agentrl_core.checkpoints import MARKER, export_hf, save_checkpoint
from agentrl_core.errors import CheckpointError


def test_export_loads_standalone_and_gives_identical_logits(tmp_path, trained, tokenizer):
    model = trained[0]
    ckpt = save_checkpoint(tmp_path / "ckpt", 3, model=model, tokenizer=tokenizer)
    out = export_hf(ckpt, tmp_path / "export")
    assert {"config.json", "model.safetensors", "generation_config.json", "tokenizer.json", MARKER} <= set(
        os.listdir(out)
    )
    loaded = AutoModelForCausalLM.from_pretrained(out).eval()
    loaded_tok = AutoTokenizer.from_pretrained(out)
    ids = torch.tensor([loaded_tok("w1 w2 w3 w4 w5")["input_ids"]])
    assert ids.tolist() == [[1, 2, 3, 4, 5]]
    with torch.no_grad():
        assert torch.equal(model(input_ids=ids).logits, loaded(input_ids=ids).logits)


def test_export_replaces_a_previous_export(tmp_path, model, tokenizer, make_model):
    first = save_checkpoint(tmp_path / "ckpt", 1, model=model, tokenizer=tokenizer)
    second = save_checkpoint(tmp_path / "ckpt", 2, model=make_model(seed=9), tokenizer=tokenizer)
    out = tmp_path / "export"
    export_hf(first, out)
    export_hf(second, out)
    assert '"step": 2' in (out / MARKER).read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt", "export"]


def test_export_refuses_to_overwrite_a_foreign_folder(tmp_path, model, tokenizer):
    ckpt = save_checkpoint(tmp_path / "ckpt", 1, model=model, tokenizer=tokenizer)
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    with pytest.raises(CheckpointError, match="refusing to overwrite"):
        export_hf(ckpt, foreign)
    assert (foreign / "notes.txt").read_text() == "keep me"
    empty = tmp_path / "empty"
    empty.mkdir()
    assert export_hf(ckpt, empty) == empty and (empty / MARKER).is_file()


def test_export_needs_a_complete_checkpoint_with_tokenizer(tmp_path, model):
    ckpt = save_checkpoint(tmp_path / "ckpt", 1, model=model, tokenizer=None)
    with pytest.raises(CheckpointError, match="lacks tokenizer"):
        export_hf(ckpt, tmp_path / "export")
    (ckpt / MARKER).unlink()
    with pytest.raises(CheckpointError, match="no COMPLETE marker"):
        export_hf(ckpt, tmp_path / "export")
    assert not (tmp_path / "export").exists()


def test_export_writes_generation_config_when_missing(tmp_path, model, tokenizer):
    ckpt = save_checkpoint(tmp_path / "ckpt", 1, model=model, tokenizer=tokenizer)
    (ckpt / "model" / "generation_config.json").unlink()
    out = export_hf(ckpt, tmp_path / "export")
    assert (out / "generation_config.json").is_file()
