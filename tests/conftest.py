"""Shared fixtures: the real embedded model, a tiny random model with its tokenizer, a live env server."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# A token exported in the developer's shell would make every server the tests start refuse their plain clients;
# the tests that need one set it themselves (run_token()).
os.environ.pop("AGENTRL_SERVER_TOKEN", None)
# Started as a background job (`cmd &`, nohup), this process and every child would inherit SIGINT ignored, and
# the tests that send SIGINT would wait in vain: Python's usual handler here means children start with the default.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_report_header(config: pytest.Config) -> str:
    """The CPU the tests ran on (model, the flags that decide speed, cores), in the session header."""
    from agentrl_core.system.machine_info import describe_cpu

    return describe_cpu()


@pytest.fixture(scope="session")
def embedded_model_path() -> Path:
    """The real SmolLM2-135M-Instruct, imported once into the user's cache (scripts/setup.sh does it)."""
    from agentrl_core.models import resolve_model

    return Path(resolve_model("smollm2-135m-instruct"))


def make_tiny_model(out: Path) -> Path:
    """A 2-layer random Llama (seed 0) with the real SmolLM2 tokenizer and chat template, saved in `out`."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from agentrl_core.models import resolve_model

    tok = AutoTokenizer.from_pretrained(Path(resolve_model("smollm2-135m-instruct")))
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                      tie_word_embeddings=True, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                      pad_token_id=tok.pad_token_id)
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg)
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def tiny_model_path(tmp_path_factory: pytest.TempPathFactory, embedded_model_path: Path) -> Path:
    """A 2-layer random Llama with the real SmolLM2 tokenizer and chat template: fast, same token layout."""
    return make_tiny_model(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="session")
def env_server_url():
    """A real env server (all registered envs) on 127.0.0.1 for the whole session."""
    from agentrl_core.env_service import launch_server

    with launch_server() as server:
        yield server.url
