"""Fixtures for checkpoint tests: a tiny random Llama, a WordLevel tokenizer, a stepped optimizer."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

VOCAB = 128


def tiny_config(**overrides) -> LlamaConfig:
    """A 2-layer Llama small enough to save and load in milliseconds."""
    kwargs = dict(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
    )
    return LlamaConfig(**{**kwargs, **overrides})


def tiny_model(seed: int = 0, **overrides) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    return LlamaForCausalLM(tiny_config(**overrides)).eval()


@pytest.fixture
def model() -> LlamaForCausalLM:
    return tiny_model()


@pytest.fixture
def tokenizer() -> PreTrainedTokenizerFast:
    """Word-level tokenizer over `w0 … w123` plus four specials: built locally, nothing downloads."""
    vocab = {f"w{i}": i for i in range(VOCAB - 4)}
    vocab.update({"[UNK]": VOCAB - 4, "[PAD]": VOCAB - 3, "<s>": VOCAB - 2, "</s>": VOCAB - 1})
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="[UNK]", pad_token="[PAD]", bos_token="<s>", eos_token="</s>"
    )


def train_steps(model, optimizer, scheduler=None, steps: int = 2) -> None:
    """A few real AdamW steps, so the optimizer holds moments and the weights moved."""
    ids = torch.arange(16).reshape(2, 8) % VOCAB
    model.train()
    for _ in range(steps):
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if scheduler is not None:
            scheduler.step()
    model.eval()


@pytest.fixture
def make_model():
    """Factory of tiny models: `make_model(seed=…, **config_overrides)`."""
    return tiny_model


@pytest.fixture
def train():
    """`train(model, optimizer, scheduler=None, steps=2)`: a few real optimizer steps."""
    return train_steps


@pytest.fixture
def trained(model):
    """(model, optimizer, scheduler) after two optimizer steps."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    train_steps(model, optimizer, scheduler)
    return model, optimizer, scheduler


@pytest.fixture
def dead_pid() -> int:
    """The pid of a process that has already exited (a 'crashed writer')."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid
