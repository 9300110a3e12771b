"""verl-style parquet: export env tasks and read them back, read verl's own schema, clear errors."""

from __future__ import annotations


import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from agentrl_core.config import EnvConfig
from agentrl_core.tasksets import resolve_task_ids, task_file_ids
from agentrl_core.tasksets.verl_parquet import (
    TaskRecord,
    env_task_records,
    read_verl_parquet,
    write_verl_parquet,
)


def verl_gsm8k_rows() -> list[dict]:
    """Two rows shaped as verl's examples/data_preprocess/gsm8k_multiturn_w_interaction.py writes them."""
    rows = []
    for idx, (question, solution) in enumerate([("What is 2+3?", "5"), ("What is 7*6?", "42")]):
        rows.append({
            "data_source": "openai/gsm8k",
            "prompt": [
                {"role": "system", "content": "You are a math expert."},
                {"role": "user", "content": question + " Let's think step by step."},
            ],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": solution},
            "extra_info": {
                "split": "train", "index": idx, "answer": f"... #### {solution}", "question": question,
                "interaction_kwargs": {"name": "gsm8k", "query": question, "ground_truth": solution},
            },
        })
    return rows


def agentgym_webshop_row() -> dict:
    """The row format of verl's WebShop GRPO over AgentGym: no split, the task id in session_id."""
    return {
        "data_source": "webshop",
        "prompt": [{"role": "system", "content": "<system_prompt>"},
                   {"role": "user", "content": "Please help me with my shopping task..."}],
        "ability": "shopping",
        "reward_model": {"style": "interaction"},
        "extra_info": {"index": 0, "interaction_kwargs": {"name": "webshop", "session_id": 5238}},
    }


def test_export_env_tasks_and_read_back_identically(countdown_client, tmp_path):
    records = env_task_records(countdown_client, "countdown", "train", [3, 0, 7])
    assert [r.task_id for r in records] == [3, 0, 7]
    assert records[0].prompt[0] == {"role": "system", "content": countdown_client.env_info("countdown").system_prompt}
    assert records[0].prompt[1]["role"] == "user" and "Target:" in records[0].prompt[1]["content"]
    path = write_verl_parquet(records, tmp_path / "train.parquet")
    table = pq.read_table(path)
    assert table.column_names == ["data_source", "agent_name", "prompt", "ability", "reward_model", "extra_info"]
    assert table.to_pylist()[1]["extra_info"] == {
        "split": "train", "index": 1, "task_id": 0, "env": "countdown",
        "interaction_kwargs": {"name": "countdown", "task_id": 0},
    }
    assert read_verl_parquet(path) == records
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary file left


def test_read_verl_preprocessed_file(tmp_path):
    path = tmp_path / "gsm8k_train.parquet"
    pq.write_table(pa.Table.from_pylist(verl_gsm8k_rows()), path)  # schema inferred, as datasets does
    first, second = read_verl_parquet(path)
    assert (first.env, first.task_id, first.split, first.ground_truth) == ("gsm8k", 0, "train", "5")
    assert (second.env, second.task_id, second.ground_truth, second.reward_style) == ("gsm8k", 1, "42", "rule")
    assert second.prompt[1] == {"role": "user", "content": "What is 7*6? Let's think step by step."}
    assert first.data_source == "openai/gsm8k" and first.ability == "math" and first.agent_name is None


def test_read_agentgym_style_row_and_json_string_extra_info(tmp_path):
    path = tmp_path / "webshop.parquet"
    pq.write_table(pa.Table.from_pylist([agentgym_webshop_row()]), path)
    (record,) = read_verl_parquet(path)
    assert (record.env, record.task_id, record.split, record.ground_truth) == ("webshop", 5238, None, None)
    as_json = tmp_path / "json_extra.parquet"
    pq.write_table(pa.table({
        "data_source": ["countdown"], "prompt": ["Numbers: [1, 2]. Target: 3."],
        "extra_info": ['{"split": "test", "task_id": 5003}'],
    }), as_json)
    (record,) = read_verl_parquet(as_json)
    assert (record.env, record.task_id, record.split) == ("countdown", 5003, "test")
    assert record.prompt == [{"role": "user", "content": "Numbers: [1, 2]. Target: 3."}]


def test_missing_columns_error_lists_expected(tmp_path):
    path = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"data_source": ["x"], "question": ["q"]}), path)
    with pytest.raises(ValueError, match=r"lacks column\(s\) \['prompt', 'extra_info'\] .*"
                                         r"prompt \(list of \{role, content\}\).*reward_model"):
        read_verl_parquet(path)


def test_row_errors_name_the_row(tmp_path):
    rows = verl_gsm8k_rows()
    del rows[1]["extra_info"]["index"]
    del rows[1]["extra_info"]["interaction_kwargs"]
    path = tmp_path / "noid.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    with pytest.raises(ValueError, match=r"row 1: no task id: set extra_info.task_id"):
        read_verl_parquet(path)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        read_verl_parquet(tmp_path / "absent.parquet")


def test_task_file_selects_ids_per_split(countdown_client, tmp_path):
    train = env_task_records(countdown_client, "countdown", "train", [42, 7])
    test = [TaskRecord(env="countdown", task_id=5010, split="test", prompt=[{"role": "user", "content": "t"}],
                       extra_info={"split": "test", "task_id": 5010})]
    path = write_verl_parquet(train + test, tmp_path / "tasks.parquet")
    cfg = EnvConfig(name="countdown", task_file=path, test_tasks=2)
    assert resolve_task_ids(cfg, countdown_client, "train") == [42, 7]
    assert resolve_task_ids(cfg, countdown_client, "test") == [5010]
    with pytest.raises(ValueError, match="task_file and env.test_ids both choose the test tasks"):
        resolve_task_ids(cfg.model_copy(update={"test_ids": "5000"}), countdown_client, "test")
    train_only = write_verl_parquet(train, tmp_path / "train_only.parquet")
    assert task_file_ids(train_only, "countdown", "test") is None  # test falls to test_ids / test_tasks
    cfg = EnvConfig(name="countdown", task_file=train_only, test_tasks=2)
    assert resolve_task_ids(cfg, countdown_client, "test") == [5000, 5001]


def test_task_file_errors(countdown_client, tmp_path):
    path = tmp_path / "webshop.parquet"
    pq.write_table(pa.Table.from_pylist([agentgym_webshop_row()]), path)
    with pytest.raises(ValueError, match=r"no rows for env 'countdown' \(env names found: \['webshop'\]\)"):
        resolve_task_ids(EnvConfig(name="countdown", task_file=path), countdown_client, "train")
    rows = [TaskRecord(env="countdown", task_id=9999, split="train", prompt=[{"role": "user", "content": "x"}],
                       extra_info={"task_id": 9999})]
    bad = write_verl_parquet(rows, tmp_path / "bad_ids.parquet")
    with pytest.raises(ValueError, match=r"not offered by the env server's 'countdown' train split: 9999"):
        resolve_task_ids(EnvConfig(name="countdown", task_file=bad), countdown_client, "train")
    test_only = write_verl_parquet([TaskRecord(env="countdown", task_id=5000, split="test",
                                               prompt=[{"role": "user", "content": "x"}],
                                               extra_info={"split": "test", "task_id": 5000})],
                                   tmp_path / "test_only.parquet")
    with pytest.raises(ValueError, match=r"no train rows for env 'countdown' \(splits found: \['test'\]\)"):
        task_file_ids(test_only, "countdown", "train")
