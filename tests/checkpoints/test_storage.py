"""Object storage: local and S3 (moto's real server on 127.0.0.1) round trips, half uploads, secrets."""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

import pytest

from agentrl_core.checkpoints import export_hf, save_checkpoint
from agentrl_core.checkpoints.storage import (
    UPLOAD_MARKER,
    LocalStorage,
    StorageError,
    open_storage,
    storage_from_config,
)
from agentrl_core.config import StoreConfig
from tests.s3_fixtures import s3_endpoint  # noqa: F401  (the session fixture)


def digests(folder: Path) -> dict[str, str]:
    """sha256 of every file under `folder`, by relative path."""
    return {
        p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*")) if p.is_file()
    }


@pytest.fixture
def sample_dir(tmp_path: Path) -> Path:
    """A folder with a nested file, an empty file and a binary file."""
    src = tmp_path / "src"
    (src / "sub" / "deeper").mkdir(parents=True)
    (src / "config.json").write_text('{"a": 1}')
    (src / "sub" / "deeper" / "weights.bin").write_bytes(bytes(range(256)) * 40)
    (src / "sub" / "empty.txt").write_bytes(b"")
    return src


@pytest.fixture
def bucket(s3_endpoint, request) -> str:  # noqa: F811
    """A fresh bucket per test (named after it)."""
    name = "t-" + hashlib.sha1(request.node.name.encode()).hexdigest()[:12]
    return s3_endpoint.make_bucket(name)


# -- local ----------------------------------------------------------------------------------------
def test_open_storage_picks_backend(tmp_path):
    assert isinstance(open_storage(None, root=tmp_path), LocalStorage)
    assert open_storage(None, root=tmp_path).root == tmp_path.resolve()
    assert open_storage(f"file://{tmp_path}/other", root=tmp_path).root == (tmp_path / "other").resolve()
    with pytest.raises(StorageError, match="unsupported storage URI"):
        open_storage("gs://bucket/x", root=tmp_path)


def test_local_round_trip(tmp_path, sample_dir):
    store = open_storage(None, root=tmp_path / "run")
    uri = store.put_dir(sample_dir, "checkpoints/step_000001")
    assert uri == str((tmp_path / "run" / "checkpoints" / "step_000001").resolve())
    assert store.exists("checkpoints/step_000001") and not store.exists("checkpoints/step_000002")
    manifest = json.loads((Path(uri) / UPLOAD_MARKER).read_text())["files"]
    assert manifest == {"config.json": 8, "sub/deeper/weights.bin": 10240, "sub/empty.txt": 0}
    out = store.get_dir(uri, tmp_path / "download")
    assert digests(out) == digests(sample_dir)  # the marker is not copied into the download
    store.put_file(sample_dir / "config.json", "reports/c.json")
    assert store.list("reports") == ["reports/c.json"]
    assert store.get_file("reports/c.json", tmp_path / "c.json").read_text() == '{"a": 1}'
    assert len(store.list("checkpoints")) == 4  # three files and the marker


def test_local_refuses_folder_without_marker(tmp_path, sample_dir):
    store = open_storage(None, root=tmp_path)
    with pytest.raises(StorageError, match="no _UPLOAD_COMPLETE.json"):
        store.get_dir(str(sample_dir), tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_local_reads_folder_published_by_atomic_dir(tmp_path, sample_dir):
    """A run-folder checkpoint (COMPLETE marker from atomic_dir) is complete without put_dir."""
    from agentrl_core.checkpoints.atomic import MARKER, atomic_dir

    with atomic_dir(tmp_path / "run" / "checkpoints" / "step_000002") as tmp:
        (tmp / "w.bin").write_bytes(b"abc")
    store = open_storage(None, root=tmp_path / "run")
    assert store.exists("checkpoints/step_000002")
    in_place = tmp_path / "run" / "checkpoints" / "step_000002"
    assert store.put_dir(in_place, "checkpoints/step_000002") == str(in_place.resolve())
    out = store.get_dir("checkpoints/step_000002", tmp_path / "copy")
    assert sorted(digests(out)) == [MARKER, "w.bin"]


def test_local_put_dir_replaces_previous_upload(tmp_path, sample_dir):
    store = open_storage(None, root=tmp_path / "run")
    store.put_dir(sample_dir, "data/set")
    (sample_dir / "sub" / "empty.txt").unlink()
    (sample_dir / "new.txt").write_text("new")
    store.put_dir(sample_dir, "data/set")
    assert sorted(store.list("data/set")) == [
        "data/set/_UPLOAD_COMPLETE.json", "data/set/config.json", "data/set/new.txt", "data/set/sub/deeper/weights.bin",
    ]


# -- S3 (moto's real HTTP server) --------------------------------------------------------------
def test_s3_round_trip(tmp_path, sample_dir, s3_endpoint, bucket):  # noqa: F811
    store = open_storage(f"s3://{bucket}/runs/r1", root=tmp_path, **s3_endpoint.settings)
    uri = store.put_dir(sample_dir, "checkpoints/step_000001")
    assert uri == f"s3://{bucket}/runs/r1/checkpoints/step_000001" == store.uri_for("checkpoints/step_000001")
    keys = s3_endpoint.client().list_objects_v2(Bucket=bucket)["Contents"]
    assert sorted(o["Key"] for o in keys) == [
        "runs/r1/checkpoints/step_000001/" + rel
        for rel in ("_UPLOAD_COMPLETE.json", "config.json", "sub/deeper/weights.bin", "sub/empty.txt")
    ]
    assert store.exists("checkpoints/step_000001") and not store.exists("checkpoints/step_000009")
    out = store.get_dir(uri, tmp_path / "dl" / "step_000001")
    assert digests(out) == digests(sample_dir)
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".")]  # no temporary folder left
    store.put_file(sample_dir / "config.json", "reports/eval.json")
    assert store.exists("reports/eval.json")
    assert store.list("reports") == ["reports/eval.json"]
    assert store.get_file(store.uri_for("reports/eval.json"), tmp_path / "e.json").read_text() == '{"a": 1}'


def test_s3_marker_is_written_last(tmp_path, sample_dir, s3_endpoint, bucket):  # noqa: F811
    store = open_storage(f"s3://{bucket}", root=tmp_path, **s3_endpoint.settings)
    seen_at_marker: list[list[str]] = []
    real_put = store._client.put_object

    def put_object(**kw):
        if kw["Key"].endswith(UPLOAD_MARKER):  # what a reader could list at the moment the marker lands
            listing = s3_endpoint.client().list_objects_v2(Bucket=bucket).get("Contents", [])
            seen_at_marker.append(sorted(o["Key"] for o in listing))
        return real_put(**kw)

    store._client.put_object = put_object  # upload_file also goes through it for small files
    store.put_dir(sample_dir, "ck")
    assert seen_at_marker == [["ck/config.json", "ck/sub/deeper/weights.bin", "ck/sub/empty.txt"]]


def test_s3_half_upload_is_refused(tmp_path, sample_dir, s3_endpoint, bucket):  # noqa: F811
    store = open_storage(f"s3://{bucket}/p", root=tmp_path, **s3_endpoint.settings)
    store.put_dir(sample_dir, "ck")  # a complete first upload …
    real_upload = store._client.upload_file
    uploaded: list[str] = []

    def crash_on_second(filename, bucket_name, key):
        if uploaded:
            raise KeyboardInterrupt("writer killed mid-upload")
        uploaded.append(key)
        real_upload(filename, bucket_name, key)

    store._client.upload_file = crash_on_second
    with pytest.raises(KeyboardInterrupt):
        store.put_dir(sample_dir, "ck")  # … then a re-upload dies after one file
    store._client.upload_file = real_upload
    assert len(uploaded) == 1
    with pytest.raises(StorageError, match=r"no _UPLOAD_COMPLETE.json marker \(3 objects under it\)"):
        store.get_dir("ck", tmp_path / "out")
    assert not (tmp_path / "out").exists() and not store.exists("ck")
    # objects put there by hand, without put_dir, are refused too
    s3_endpoint.client().put_object(Bucket=bucket, Key="p/manual/model.safetensors", Body=b"x")
    with pytest.raises(StorageError, match="incomplete or still running"):
        store.get_dir(f"s3://{bucket}/p/manual", tmp_path / "out")


def test_s3_reupload_removes_stale_objects(tmp_path, sample_dir, s3_endpoint, bucket):  # noqa: F811
    store = open_storage(f"s3://{bucket}", root=tmp_path, **s3_endpoint.settings)
    store.put_dir(sample_dir, "ck")
    (sample_dir / "config.json").unlink()
    store.put_dir(sample_dir, "ck")
    assert store.list("ck") == ["ck/_UPLOAD_COMPLETE.json", "ck/sub/deeper/weights.bin", "ck/sub/empty.txt"]
    assert digests(store.get_dir("ck", tmp_path / "o")) == digests(sample_dir)


def test_s3_hf_export_round_trip_is_byte_identical(tmp_path, s3_endpoint, bucket, model, tokenizer):  # noqa: F811
    from transformers import AutoModelForCausalLM

    ckpt = save_checkpoint(tmp_path / "ckpt", 3, model=model, tokenizer=tokenizer)
    export = export_hf(ckpt, tmp_path / "export")
    store = open_storage(f"s3://{bucket}/models", root=tmp_path, **s3_endpoint.settings)
    uri = store.put_dir(export, "sft/final")
    out = store.get_dir(uri, tmp_path / "restored")
    assert digests(out) == digests(export) and "model.safetensors" in digests(out)
    restored = AutoModelForCausalLM.from_pretrained(out)
    assert all((a == b).all() for a, b in zip(model.state_dict().values(), restored.state_dict().values()))


def test_s3_settings_from_standard_aws_environment(
    tmp_path, sample_dir, s3_endpoint, bucket, monkeypatch  # noqa: F811
):
    """No explicit endpoint or keys: boto3's own AWS_ENDPOINT_URL / AWS_* lookup finds moto."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_endpoint.url)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3_endpoint.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3_endpoint.secret_key)
    monkeypatch.setenv("AWS_DEFAULT_REGION", s3_endpoint.region)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    store = storage_from_config(StoreConfig(storage=f"s3://{bucket}/env"), root=tmp_path)
    store.put_file(sample_dir / "config.json", "x.json")
    assert s3_endpoint.client().get_object(Bucket=bucket, Key="env/x.json")["Body"].read() == b'{"a": 1}'


def test_s3_secrets_never_in_errors_repr_or_logs(tmp_path, sample_dir, s3_endpoint, caplog):  # noqa: F811
    secret = s3_endpoint.secret_key
    caplog.set_level(logging.DEBUG)  # botocore logs requests and signing at DEBUG
    store = open_storage("s3://no-such-bucket/p", root=tmp_path, **s3_endpoint.settings)
    with pytest.raises(StorageError) as info:
        store.put_dir(sample_dir, "ck")
    message = str(info.value)
    assert "NoSuchBucket" in message and "s3://no-such-bucket/p/ck/" in message
    with pytest.raises(StorageError) as missing:
        store.get_dir("ck", tmp_path / "o")
    for text in (message, repr(info.value), str(info.value.__context__), str(missing.value), repr(store), caplog.text):
        assert secret not in text
    assert info.value.__cause__ is None and info.value.__suppress_context__
    assert len(caplog.text) > 0  # botocore did log: the check above looked at real output


def test_s3_endpoint_userinfo_is_redacted(tmp_path):
    pytest.importorskip("boto3")
    store = open_storage("s3://bkt/p", root=tmp_path, endpoint_url="http://user:hunter2@127.0.0.1:9",
                         region_name="us-east-1", aws_access_key_id="AKIA", aws_secret_access_key="s3cr3t-value")
    assert "hunter2" not in repr(store) and "***@127.0.0.1:9" in repr(store)


def test_s3_uri_checks(tmp_path, s3_endpoint):  # noqa: F811
    with pytest.raises(StorageError, match="invalid S3 bucket name"):
        open_storage("s3://Bad_Bucket/x", root=tmp_path, **s3_endpoint.settings)
    store = open_storage("s3://bkt-a/p", root=tmp_path, **s3_endpoint.settings)
    with pytest.raises(StorageError, match="not an object of"):
        store.get_dir("s3://bkt-b/p/ck", tmp_path / "o")
    with pytest.raises(StorageError, match="invalid storage key"):
        store.uri_for("../escape")
