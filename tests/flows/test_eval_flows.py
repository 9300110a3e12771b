"""Evaluation flows for real (Prefect test harness): nightly-eval evaluates only new checkpoints, and the
same flows run with the registry on PostgreSQL and storage on S3 (moto) by configuration alone."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from agentrl_core.store import open_registry
from tests.flows.conftest import tiny_overrides

pytestmark = pytest.mark.slow
NIGHTLY = {"envs": ["household"], "seeds": [0], "k": 1, "n_tasks": 1, "max_turns": 2}


def _checkpoint(reg, run_id: int, src: Path, dest: Path, step: int) -> str:
    shutil.copytree(src, dest)
    reg.add_checkpoint(run_id, stage="grpo", step=step, uri=str(dest), kind="hf")
    return str(dest)


def test_nightly_evaluates_only_new_checkpoints(prefect_harness, tiny_model_path, tmp_path):
    from flows.evaluate import nightly_eval

    root, board = tmp_path / "runs", str(tmp_path / "board")
    with open_registry(None, root) as reg:
        run_id = reg.ensure_run("r", recipe={})
        first = _checkpoint(reg, run_id, tiny_model_path, tmp_path / "ckpt1", 1)
    out = nightly_eval(**NIGHTLY, root=str(root), report_dir=board)
    assert [e["checkpoint"] for e in out["evaluated"]] == [first]
    with open_registry(None, root) as reg:
        second = _checkpoint(reg, run_id, tiny_model_path, tmp_path / "ckpt2", 2)
    out = nightly_eval(**NIGHTLY, root=str(root), report_dir=board)
    assert [e["checkpoint"] for e in out["evaluated"]] == [second]  # the first is not evaluated again
    assert nightly_eval(**NIGHTLY, root=str(root), report_dir=board)["evaluated"] == []
    rows = out["leaderboard"]["rows"]
    assert len(rows) == 2 and (tmp_path / "board" / "leaderboard.md").exists()


def test_flows_on_postgres_and_s3_by_configuration(prefect_harness, postgres_url, s3_endpoint, tiny_model_path,
                                                  tmp_path, monkeypatch):
    from flows.evaluate import batch_eval
    from flows.train import train
    from tests.pg_server import create_database

    db = create_database(postgres_url)
    bucket = s3_endpoint.make_bucket("agentrl-flows")
    for key, value in {"AWS_ACCESS_KEY_ID": s3_endpoint.access_key, "AWS_SECRET_ACCESS_KEY": s3_endpoint.secret_key,
                       "AWS_DEFAULT_REGION": s3_endpoint.region}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("TEST_REGISTRY_URL", db)  # a password never goes into a flow's parameters
    store = ["store.registry_url=env:TEST_REGISTRY_URL", f"store.storage=s3://{bucket}/runs",
             f"store.s3_endpoint_url={s3_endpoint.url}"]
    result = train(recipe_file="household_grpo",
                   overrides=tiny_overrides(tiny_model_path, tmp_path / "runs") + store + ["eval.enabled=false"])
    uris = result["checkpoints"]
    assert set(uris) == {"sft", "grpo"} and all(u.startswith(f"s3://{bucket}/runs/tiny/export/") for u in uris.values())
    keys = {o["Key"] for o in s3_endpoint.client().list_objects_v2(Bucket=bucket)["Contents"]}
    assert {"runs/tiny/export/grpo/model.safetensors", "runs/tiny/export/grpo/config.json"} <= keys
    assert not (tmp_path / "runs" / "registry.db").exists()  # nothing fell back to SQLite
    with open_registry(db, tmp_path / "unused") as reg:
        assert reg.run("tiny").status == "completed"
        assert {c.uri for c in reg.checkpoints(run="tiny", kind="hf")} == set(uris.values())
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_endpoint.url)  # the usual AWS setting, for the evaluation's download
    grid = {"checkpoints": [uris["grpo"]], "envs": ["household"], "seeds": [0], "k": 1, "n_tasks": 1, "max_turns": 2}
    out = batch_eval(grid=grid, registry_url=db, root=str(tmp_path / "runs"), report_dir=str(tmp_path / "board"))
    assert [e["checkpoint"] for e in out["evaluated"]] == [uris["grpo"]]
    with open_registry(db, tmp_path / "unused") as reg:
        assert [e.checkpoint_uri for e in reg.evals(env="household")] == [uris["grpo"]]


def test_eval_deployments_refuse_credentials_sent_as_parameters(monkeypatch):
    """A deployment run's parameters arrive as raw JSON that Prefect has stored: a password in them is
    refused (and said how to pass it); a reference or a credential-free URL is accepted."""
    from agentrl_core.errors import ConfigError
    from agentrl_core.secrets import Secret
    from tasks.secrets import check_sent_secrets

    canary = "postgresql+psycopg://alice:CANARY-pw@127.0.0.1:1/db"
    check_sent_secrets(registry_url=Secret(canary))  # not a deployment run: in-process objects are stored redacted
    monkeypatch.setenv("PREFECT__RUNTIME__DEPLOYMENT__ID", "00000000-0000-0000-0000-000000000001")
    with pytest.raises(ConfigError, match="registry_url: a password or key sent") as err:
        check_sent_secrets(registry_url=Secret(canary), **{"grid.engine.url": None})
    assert "CANARY" not in str(err.value) and "env:VARIABLE" in str(err.value)
    check_sent_secrets(registry_url=Secret("env:REGISTRY_URL"), **{"grid.engine.url": Secret("http://127.0.0.1:8000/v1")})
