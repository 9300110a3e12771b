"""Names that become paths are one safe component, refused at the config boundary: Python API, CLI, flow parameter."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pydantic import ValidationError

from agentrl_core.checkpoints.storage_base import StorageError, normalize_key
from agentrl_core.config import RecipeConfig, RunConfig, StoreConfig
from agentrl_core.errors import ConfigError
from agentrl_core.recipes import load_recipe
from agentrl_core.system.safe_names import MAX_NAME_CHARS, check_name, path_under

ROOT = Path(__file__).resolve().parent.parent

BAD_NAMES = {
    "../../etc": "path separator",
    "..": "relative folder reference",
    ".": "relative folder reference",
    "/etc/passwd": "path separator",
    "a/b": "path separator",
    "a\\b": "path separator",
    "run\x00x": "control character",
    "run\nx": "control character",
    "run\u202ex": "control character",  # a right-to-left override hides the real name in a listing
    "x" * (MAX_NAME_CHARS + 1): "characters long",
    "": "empty",
    ".hidden": "starts with",
    "-rf": "starts with",
    "run name": "' '",
    "ünïcode": "'ï' 'ü'",
}


@pytest.mark.parametrize("name, why", BAD_NAMES.items(), ids=[repr(n[:12]) for n in BAD_NAMES])
def test_unsafe_names_are_refused_saying_why_and_what_to_use(name: str, why: str) -> None:
    with pytest.raises(ValueError) as err:
        check_name(name)
    assert why in str(err.value) and "letters, digits" in str(err.value)


@pytest.mark.parametrize("name", ["demo", "household-demo", "run_2.v3", "A", "x" * MAX_NAME_CHARS, "stage1"])
def test_plain_names_pass(name: str) -> None:
    assert check_name(name) == name


@pytest.mark.parametrize("name", ["../../etc", "/abs", "a/b", "a\x00b", "x" * 300])
def test_run_name_is_checked_at_construction(name: str) -> None:
    with pytest.raises(ValidationError, match="run.name"):
        RecipeConfig(run={"name": name})
    with pytest.raises(ValidationError):
        RunConfig(name=name)


def test_run_root_may_be_any_folder_but_not_hold_a_nul(tmp_path: Path) -> None:
    assert RunConfig(root=tmp_path / "deep" / "runs", name="r").root == tmp_path / "deep" / "runs"
    with pytest.raises(ValidationError, match="control character"):
        RunConfig(root="runs\x00/x", name="r")


def test_a_symlinked_run_folder_that_leaves_the_root_is_refused(tmp_path: Path) -> None:
    root, elsewhere = tmp_path / "runs", tmp_path / "elsewhere"
    root.mkdir()
    elsewhere.mkdir()
    (root / "evil").symlink_to(elsewhere)
    with pytest.raises(ValidationError, match="outside its root"):
        RecipeConfig(run={"root": str(root), "name": "evil"})
    (root / "fine").symlink_to(root / "real")  # a link that stays inside is a folder like any other
    assert path_under(root, "fine") == root / "fine"


def test_overrides_are_refused_with_the_key_and_a_clean_message() -> None:
    with pytest.raises(ConfigError) as err:
        load_recipe("household_grpo", ["run.name=../../etc"])
    message = str(err.value)
    assert "run.name: '../../etc' cannot be a folder name" in message and "Value error" not in message
    with pytest.raises(ConfigError, match="not valid YAML.*#x0000"):
        load_recipe("household_grpo", ["run.name=a\x00b"])


def test_cli_refuses_an_escaping_run_name_fast_and_writes_nothing(tmp_path: Path) -> None:
    """A path traversal through the run name: `agentrl run household_grpo run.root=... run.name=../../etc`."""
    root = tmp_path / "runs"
    start = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "agentrl.cli", "run", "household_grpo", f"run.root={root}",
                          "run.name=../../etc"], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "AGENTRL_HOME": str(tmp_path / "home"), "COLUMNS": "400"})
    elapsed = time.monotonic() - start
    assert out.returncode == 2, out.stderr
    assert "run.name" in out.stderr and "cannot be a folder name" in out.stderr
    assert elapsed < 30, f"took {elapsed:.1f} s"
    assert sorted(p.name for p in tmp_path.iterdir()) == [], "the refused run wrote files"
    assert not (tmp_path.parent / "etc").exists()


def test_flow_parameters_are_checked_before_the_flow_runs(tmp_path: Path) -> None:
    """What the Prefect UI or a deployment sends: the recipe as a dict, validated into a RecipeConfig."""
    from prefect.exceptions import ParameterTypeError

    from flows.train import train

    with pytest.raises(ParameterTypeError, match="recipe.run.name"):
        train.validate_parameters({"recipe": {"run": {"root": str(tmp_path), "name": "../../etc"}}})
    with pytest.raises(ConfigError, match="run.name"):  # overrides on top of a recipe file
        train.fn(recipe_file="household_grpo", overrides=[f"run.root={tmp_path}", "run.name=/etc"])
    assert list(tmp_path.iterdir()) == []


def test_curriculum_stage_names_are_safe_and_not_reserved() -> None:
    from flows.curriculum import curriculum
    from prefect.exceptions import ParameterTypeError

    from agentrl_core.curriculum import CurriculumConfig

    for name, why in [("../x", "path separator"), ("export", "taken by the run folder"), ("base", "taken")]:
        with pytest.raises(ValidationError, match=why):
            CurriculumConfig(stages=[{"name": name}])
    with pytest.raises(ParameterTypeError, match="stages.0.name"):
        curriculum.validate_parameters({"curriculum": {"stages": [{"name": "/tmp/x"}]}})


@pytest.mark.parametrize("uri, why", [
    ("s3://b/x", "bucket"), ("s3://Bad_Bucket/x", "bucket"), ("s3://bucket/../x", "'..'"),
    ("s3://bucket/a//b", "empty"), ("s3://bucket/a\x00", "control"), ("gs://bucket/x", "unsupported storage scheme"),
    ("s3://bucket/" + "p" * 600, "bytes long"),
])
def test_storage_uris_are_checked_at_construction(uri: str, why: str) -> None:
    with pytest.raises(ValidationError, match=why):
        StoreConfig(storage=uri)


def test_storage_keys_refuse_traversal_control_characters_and_overlong_keys() -> None:
    assert normalize_key("/runs/r1/./export/") == "runs/r1/export"
    for key in ["../x", "a/../../b", "", "a\x00b", "k" * 1025]:
        with pytest.raises(StorageError, match="invalid storage key"):
            normalize_key(key)


def test_batch_evaluation_names_that_enter_its_file_names_are_safe(tmp_path: Path) -> None:
    """EvalGrid (the batch-eval flow's parameter) puts env and split into <out_dir>/<job slug>/."""
    from agentrl_core.evaluation.batch import EvalGrid

    for bad in ({"envs": ["../../x"]}, {"split": "../y"}, {"split": "a/b"}):
        with pytest.raises(ValidationError, match="cannot be a folder name"):
            EvalGrid(**{"checkpoints": ["ck"], "envs": ["household"], "out_dir": tmp_path, **bad})
