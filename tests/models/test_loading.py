"""Tests of resolve_model's branches (alias, folder, path, hub) and of loading a tiny local model."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

import huggingface_hub
import huggingface_hub.constants
import pytest

from agentrl_core.errors import ConfigError, ModelNotFoundError
from agentrl_core.models import loading, model_cache
from agentrl_core.models.loading import load_model, load_tokenizer, model_info, resolve_model


@pytest.fixture
def no_hub(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if anything asks the hub."""
    def refuse(*args, **kwargs):
        raise AssertionError("the hub must not be asked")

    monkeypatch.setattr(huggingface_hub, "model_info", refuse)


@pytest.fixture
def hub_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty hub cache, so nothing the user downloaded changes the outcome."""
    path = tmp_path / "hub-cache"
    path.mkdir()
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(path))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    return path


# --- aliases -------------------------------------------------------------------------------------

def test_alias_not_imported_without_auto_import_says_the_command(home, no_hub) -> None:
    with pytest.raises(ModelNotFoundError) as err:
        resolve_model("smollm2", auto_import=False)
    assert "agentrl import-model smollm2" in str(err.value)
    assert str(home / "models" / "smollm2-135m-instruct") in str(err.value)


def test_alias_already_imported_resolves_without_importing(home, no_hub) -> None:
    folder = model_cache.model_dir("smollm2-135m-instruct")
    folder.mkdir(parents=True)
    model_cache.write_marker(folder, {})
    assert resolve_model("SmolLM2-135M-Instruct", auto_import=False) == folder


def test_alias_with_auto_import_imports(home, no_hub, monkeypatch) -> None:
    seen = []
    monkeypatch.setattr(loading, "import_embedded", lambda alias: seen.append(alias) or Path("/cache/x"))
    assert resolve_model("smollm2") == Path("/cache/x")
    assert seen == ["smollm2"]


# --- local paths ---------------------------------------------------------------------------------

def test_folder_with_config_resolves_to_absolute_path(tmp_path, monkeypatch, no_hub) -> None:
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    monkeypatch.chdir(tmp_path)
    assert resolve_model("m") == tmp_path / "m"
    assert resolve_model(Path("m")) == tmp_path / "m"


def test_folder_without_config_names_what_is_missing(tmp_path, no_hub) -> None:
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    with pytest.raises(ModelNotFoundError) as err:
        resolve_model(str(tmp_path))
    assert "has no config.json" in str(err.value)
    assert "Sub-folders that are model folders: model" in str(err.value)


def test_file_is_not_a_model_folder(tmp_path, no_hub) -> None:
    gguf = tmp_path / "x.gguf"
    gguf.write_bytes(b"")
    with pytest.raises(ModelNotFoundError, match="is a file .a GGUF file"):
        resolve_model(str(gguf))


@pytest.mark.parametrize("name", ["/no/such/model", "./nope", "~/no-such-agentrl-model", "runs/a/b", "../x", "a\\b"])
def test_missing_path_fails_without_asking_the_hub(name, no_hub) -> None:
    start = time.monotonic()
    with pytest.raises(ModelNotFoundError) as err:
        resolve_model(name)
    assert "no such file or folder" in str(err.value)
    assert "smollm2-135m-instruct" in str(err.value)  # lists the aliases
    assert time.monotonic() - start < 1.0


def test_empty_name_is_rejected() -> None:
    with pytest.raises(ModelNotFoundError, match="empty"):
        resolve_model("  ")


# --- hub ids -------------------------------------------------------------------------------------

def test_hub_id_offline_fails_at_once(hub_cache, monkeypatch, no_hub) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    start = time.monotonic()
    with pytest.raises(ModelNotFoundError) as err:
        resolve_model("SomeOrg/some-model")
    message = str(err.value)
    assert "'SomeOrg/some-model'" in message and "HF_HUB_OFFLINE" in message
    assert "smollm2" in message and "local" in message
    assert time.monotonic() - start < 1.0


def test_hub_that_never_answers_is_abandoned_quickly(hub_cache, monkeypatch) -> None:
    monkeypatch.setattr(huggingface_hub, "model_info", lambda *a, **k: time.sleep(30))
    start = time.monotonic()
    with pytest.raises(ModelNotFoundError, match="did not answer within"):
        resolve_model("SomeOrg/some-model", hub_timeout_s=0.2)
    assert time.monotonic() - start < 3.0


def test_unknown_or_unreachable_hub_id_fails_fast_with_the_id(hub_cache) -> None:
    # Real network path: unreachable here (DNS fails), a 404 where the hub is reachable.
    start = time.monotonic()
    with pytest.raises(ModelNotFoundError) as err:
        resolve_model("agentrl-test-no-such-org/no-such-model-7f3a", hub_timeout_s=3)
    assert "'agentrl-test-no-such-org/no-such-model-7f3a'" in str(err.value)
    assert "smollm2-135m-instruct" in str(err.value)
    assert time.monotonic() - start < 10.0


def test_cached_hub_model_resolves_to_its_snapshot(hub_cache, no_hub) -> None:
    repo = hub_cache / "models--SomeOrg--some-model"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("abc123")
    snapshot = repo / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    assert resolve_model("SomeOrg/some-model") == snapshot


def test_reachable_hub_model_is_downloaded_with_safetensors_only(hub_cache, monkeypatch, tmp_path) -> None:
    files = ["config.json", "model.safetensors", "pytorch_model.bin", "onnx/model.onnx"]
    monkeypatch.setattr(huggingface_hub, "model_info",
                        lambda repo_id, **kw: SimpleNamespace(siblings=[SimpleNamespace(rfilename=f) for f in files]))
    asked = []
    real = huggingface_hub.snapshot_download

    def download(repo_id, **kwargs):
        if kwargs.get("local_files_only"):
            return real(repo_id, **kwargs)
        asked.append(kwargs)
        return str(tmp_path / "snap")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", download)
    assert resolve_model("SomeOrg/some-model") == tmp_path / "snap"
    assert "*.safetensors" in asked[0]["allow_patterns"] and "*.bin" not in asked[0]["allow_patterns"]
    assert asked[0]["ignore_patterns"] == ["*/*"]


# --- loading -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A 2-layer random Llama with a word-level tokenizer that has no pad token."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    folder = tmp_path_factory.mktemp("tiny-llama")
    words = ["<unk>", "<s>", "</s>", "hello", "world"]
    backend = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    tokenizer.save_pretrained(folder)
    config = LlamaConfig(vocab_size=len(words), hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
                         tie_word_embeddings=True)
    LlamaForCausalLM(config).save_pretrained(folder)
    return folder


def test_load_model_is_eval_sdpa_and_typed(tiny_model_dir) -> None:
    import torch

    model = load_model(tiny_model_dir)
    assert not model.training
    assert model.config._attn_implementation == "sdpa"
    assert next(model.parameters()).dtype == torch.float32
    assert next(load_model(tiny_model_dir, dtype="bfloat16").parameters()).dtype == torch.bfloat16


def test_load_model_rejects_bad_dtype_and_names(tiny_model_dir, no_hub) -> None:
    with pytest.raises(ConfigError, match="float32, bfloat16, float16"):
        load_model(tiny_model_dir, dtype="float8")
    with pytest.raises(ModelNotFoundError, match="resolve_model"):
        load_model("smollm2")


def test_load_tokenizer_pads_left_with_eos_when_it_has_no_pad(tiny_model_dir) -> None:
    tokenizer = load_tokenizer(tiny_model_dir)
    assert tokenizer.padding_side == "left"
    assert tokenizer.pad_token == "</s>"
    batch = tokenizer(["hello", "hello world"], padding=True)
    assert batch["input_ids"][0][0] == tokenizer.pad_token_id and batch["attention_mask"][0][0] == 0
    assert load_tokenizer(tiny_model_dir, padding_side="right").padding_side == "right"
    with pytest.raises(ConfigError):
        load_tokenizer(tiny_model_dir, padding_side="middle")


def test_model_info_counts_tied_weights_once(tiny_model_dir) -> None:
    info = model_info(tiny_model_dir)
    model = load_model(tiny_model_dir)
    assert info["n_params"] == sum(p.numel() for p in model.parameters())
    assert info["architecture"] == "LlamaForCausalLM" and info["model_type"] == "llama"
    assert info["vocab_size"] == 5 and info["num_hidden_layers"] == 2 and info["tie_word_embeddings"]
