"""A full disk while saving a checkpoint, exporting or storing one: the previous one stays loadable,
no partial folder is left, one DiskFullError names the path and the free space, and saving again works."""

from __future__ import annotations

import errno
import shutil
from pathlib import Path

import pytest
import torch
import transformers.modeling_utils
from safetensors import SafetensorError

import agentrl_core.checkpoints.atomic as atomic
import agentrl_core.system.diskfull as diskfull
from agentrl_core.checkpoints import export_hf, load_checkpoint, resolve_resume, save_checkpoint
from agentrl_core.checkpoints.storage import LocalStorage
from agentrl_core.errors import DiskFullError

ENOSPC = OSError(errno.ENOSPC, "No space left on device")
# What torch.save really raises when its zip writer runs out of space (seen on a full tmpfs): no errno.
TORCH_SHORT_WRITE = RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534")


def _fail_when(monkeypatch, owner, name: str, error: BaseException, when=None, partial=None):
    """Replace `owner.name` by a function that (optionally writes a partial file and) raises `error`
    when `when(*args)` holds, and calls the original otherwise; returns the list of failed calls."""
    original = getattr(owner, name)
    failed: list[tuple] = []

    def fake(*args, **kwargs):
        if when is None or when(*args, **kwargs):
            failed.append(args)
            if partial is not None:
                partial(*args)
            raise error
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, fake)
    return failed


def _half_file(_obj, path, *rest) -> None:
    """What a write cut short leaves: some bytes under the final file name."""
    Path(path).write_bytes(b"PK\x03\x04 half a zip")


def _leftovers(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.name.startswith("."))


def _save(root: Path, step: int, trained, tokenizer) -> Path:
    model, optimizer, scheduler = trained
    return save_checkpoint(root, step, model=model, tokenizer=tokenizer, optimizer=optimizer, scheduler=scheduler,
                           state={"note": step})


# Each fault at a different write of the save: the weights (safetensors), the optimizer (torch.save's
# errno-less short write), the trainer state (open/write), the marker (written last) and the fsync.
ALWAYS = lambda *a, **k: True  # noqa: E731
FAULTS = {
    "weights": (transformers.modeling_utils, "safe_save_file",
                SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)"),
                ALWAYS, None),
    "optimizer": (torch, "save", TORCH_SHORT_WRITE, ALWAYS, _half_file),
    "trainer_state": (Path, "write_text", ENOSPC, lambda path, *a, **k: path.name == "trainer_state.json", None),
    "marker": (atomic, "write_marker", ENOSPC, ALWAYS, None),
    "fsync": (atomic, "fsync_tree", ENOSPC, ALWAYS, None),
}


@pytest.mark.parametrize("where", sorted(FAULTS))
def test_a_full_disk_mid_save_keeps_the_previous_checkpoint(where, tmp_path, trained, tokenizer, monkeypatch):
    root = tmp_path / "checkpoints"
    previous = _save(root, 2, trained, tokenizer)
    weights = {k: v.clone() for k, v in trained[0].state_dict().items()}
    monkeypatch.setattr(diskfull, "free_bytes", lambda path: 3 * 2**20)  # the filesystem is (nearly) full
    owner, name, error, when, partial = FAULTS[where]
    failed = _fail_when(monkeypatch, owner, name, error, when=when, partial=partial)

    with pytest.raises(DiskFullError) as info:
        _save(root, 4, trained, tokenizer)
    assert failed, "the fault was never reached"
    message = str(info.value)
    assert str(root / "step_000004") in message and "3 MiB free on" in message and "free space" in message
    assert info.value.__cause__ is error  # the library's own error stays attached, for the traceback
    assert sorted(p.name for p in root.iterdir()) == ["step_000002"]  # no partial step_000004, no temp folder
    monkeypatch.undo()

    assert resolve_resume(root) == previous  # resume picks the last complete checkpoint
    model = type(trained[0])(trained[0].config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    assert load_checkpoint(previous, model=model, optimizer=optimizer)["note"] == 2
    assert all(torch.equal(model.state_dict()[k], v) for k, v in weights.items())

    assert _save(root, 4, trained, tokenizer) == root / "step_000004"  # space freed: the same save works
    assert resolve_resume(root) == root / "step_000004" and _leftovers(root) == []


def test_a_short_write_with_space_left_is_not_called_a_full_disk(tmp_path, trained, tokenizer, monkeypatch):
    """torch's errno-less error means a full disk only when the disk is full; otherwise it stays itself."""
    root = tmp_path / "checkpoints"
    monkeypatch.setattr(diskfull, "free_bytes", lambda path: 50 * 2**30)
    _fail_when(monkeypatch, torch, "save", TORCH_SHORT_WRITE, partial=_half_file)
    with pytest.raises(RuntimeError, match="unexpected pos") as info:
        _save(root, 1, trained, tokenizer)
    assert not isinstance(info.value, DiskFullError)
    assert list(root.iterdir()) == []


def test_other_errors_pass_through_unchanged(tmp_path, trained, tokenizer, monkeypatch):
    _fail_when(monkeypatch, torch, "save", PermissionError(errno.EACCES, "Permission denied"))
    with pytest.raises(PermissionError):
        _save(tmp_path / "checkpoints", 1, trained, tokenizer)


def test_a_full_disk_mid_export_keeps_the_previous_export(tmp_path, trained, tokenizer, monkeypatch):
    root, out = tmp_path / "checkpoints", tmp_path / "export"
    first = _save(root, 2, trained, tokenizer)
    export_hf(first, out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    second = _save(root, 4, trained, tokenizer)
    # the copy of the weights (the second file copied, so the temp folder is not empty) runs out of space
    failed = _fail_when(monkeypatch, shutil, "copy2", ENOSPC, when=lambda src, dst, **k: "safetensors" in str(src))

    with pytest.raises(DiskFullError) as info:
        export_hf(second, out)
    assert failed and str(out) in str(info.value) and "MiB free on" in str(info.value)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # the old export, whole
    assert _leftovers(tmp_path) == []
    monkeypatch.undo()

    export_hf(second, out)
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(out)
    assert torch.equal(reloaded.lm_head.weight, trained[0].lm_head.weight)
    assert _leftovers(tmp_path) == []


def test_a_full_disk_while_storing_leaves_no_partial_folder(tmp_path, trained, tokenizer, monkeypatch):
    ckpt = _save(tmp_path / "checkpoints", 2, trained, tokenizer)
    storage = LocalStorage(tmp_path / "store")
    _fail_when(monkeypatch, shutil, "copy2", ENOSPC, when=lambda src, dst, **k: "safetensors" in str(src))
    with pytest.raises(DiskFullError) as info:
        storage.put_dir(ckpt, "run/step_000002")
    assert str(tmp_path / "store" / "run" / "step_000002") in str(info.value)
    assert not storage.exists("run/step_000002") and _leftovers(tmp_path / "store" / "run") == []
    monkeypatch.undo()
    assert storage.put_dir(ckpt, "run/step_000002") and storage.exists("run/step_000002")


def test_the_error_survives_pickling_with_its_fields() -> None:
    """Prefect stores task results and Ray ships actor errors by pickling: nothing may be lost."""
    import pickle

    err = DiskFullError("/runs/a/metrics.jsonl", 5 * 2**20, "/runs", resume_step=6)
    back = pickle.loads(pickle.dumps(err))
    assert str(back) == str(err) == ("no space left on device writing /runs/a/metrics.jsonl (5 MiB free on /runs): "
                                     "free space and run the same command again to resume from step 6")
