"""Finding the latest complete checkpoint and the resume policy (auto / never)."""

from __future__ import annotations

import logging
import os

import pytest

from agentrl_core.checkpoints import MARKER, latest_checkpoint, parse_step, resolve_resume, save_checkpoint, step_dir
from agentrl_core.errors import CheckpointError


def test_step_names_are_zero_padded_and_parsed_back(tmp_path):
    assert step_dir(tmp_path, 10).name == "step_000010"
    assert step_dir(tmp_path, 1234567).name == "step_1234567"
    assert parse_step(step_dir(tmp_path, 42)) == 42
    assert parse_step(tmp_path / ".step_000001.tmp-1-ab") is None
    with pytest.raises(ValueError, match=">= 0"):
        step_dir(tmp_path, -1)


def test_latest_is_none_for_missing_or_empty_folder(tmp_path):
    assert latest_checkpoint(tmp_path / "absent") is None
    assert latest_checkpoint(tmp_path) is None


def test_latest_picks_highest_complete_step_and_warns_about_incomplete(tmp_path, model, tokenizer, caplog):
    save_checkpoint(tmp_path, 9, model=model, tokenizer=tokenizer)
    save_checkpoint(tmp_path, 10, model=model, tokenizer=tokenizer)
    (tmp_path / "step_000011" / "model").mkdir(parents=True)  # a half-written folder, no marker
    (tmp_path / "notes").mkdir()
    with caplog.at_level(logging.WARNING):
        assert latest_checkpoint(tmp_path) == tmp_path / "step_000010"
    assert "step_000011" in caplog.text and MARKER in caplog.text


def test_auto_resumes_from_latest_and_logs_it(tmp_path, model, tokenizer, caplog):
    save_checkpoint(tmp_path, 4, model=model, tokenizer=tokenizer)
    with caplog.at_level(logging.INFO):
        assert resolve_resume(tmp_path, "auto") == tmp_path / "step_000004"
    assert "resuming from checkpoint" in caplog.text


def test_auto_and_never_start_fresh_without_complete_checkpoint(tmp_path, caplog):
    (tmp_path / "step_000001").mkdir()
    with caplog.at_level(logging.INFO):
        assert resolve_resume(tmp_path, "auto") is None
        assert resolve_resume(tmp_path / "new_run", "never") is None
    assert "starting from scratch" in caplog.text


def test_never_refuses_a_folder_that_has_a_checkpoint(tmp_path, model, tokenizer):
    save_checkpoint(tmp_path, 2, model=model, tokenizer=tokenizer)
    with pytest.raises(CheckpointError, match="pick a new run name, delete the folder"):
        resolve_resume(tmp_path, "never")


def test_unknown_mode_lists_valid_modes(tmp_path):
    with pytest.raises(ValueError, match=r"\['auto', 'never'\]"):
        resolve_resume(tmp_path, "sometimes")


def test_resume_scan_restores_a_checkpoint_moved_aside_by_a_crash(tmp_path, model, tokenizer, dead_pid):
    save_checkpoint(tmp_path, 6, model=model, tokenizer=tokenizer)
    # The crashed process had moved step 6 aside to replace it and died before renaming the new one in.
    os.replace(step_dir(tmp_path, 6), tmp_path / f".step_000006.old-{dead_pid}-12ab")
    (tmp_path / f".step_000006.tmp-{dead_pid}-34cd").mkdir()
    assert latest_checkpoint(tmp_path) is None
    assert resolve_resume(tmp_path, "auto") == step_dir(tmp_path, 6)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_000006"]
