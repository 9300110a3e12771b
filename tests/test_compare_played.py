"""bench/compare_played.py: the same comparison from a run's trajectory files and from its recorded results file."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bench.compare_played import main

A = {1: 1, 2: 1, 3: 0, 4: 1, 5: 0, 6: 1}
B = {1: 0, 2: 1, 3: 0, 4: 0, 5: 0, 6: 1}


def trajectories(path: Path, outcomes: dict[int, int]) -> str:
    pq.write_table(pa.table({"task_id": list(outcomes), "success": [bool(v) for v in outcomes.values()]}), path)
    return str(path)


def record(path: Path, arms: dict[str, dict[int, int]], dirty: bool = False) -> str:
    tests = {arm: {"success_rate": sum(o.values()) / len(o), "task_success": {str(k): float(v) for k, v in o.items()}}
             for arm, o in arms.items()}
    machine = {"model": "CPU Y", "generation": "family 25 model 17", "flags": ["avx2", "avx512f", "avx512_bf16"],
               "cores": 2, "usable_cores": 2}
    path.write_text(json.dumps({"git_revision": "0123456789abcdef", "git_dirty": dirty, "tests": tests,
                                "machine": machine, "compute_dtype": "float32"}))
    return str(path)


def lines(capsys: pytest.CaptureFixture[str]) -> list[str]:
    return capsys.readouterr().out.splitlines()


def test_a_recorded_arm_gives_the_comparison_its_trajectories_give(tmp_path, capsys):
    assert main([f"a={trajectories(tmp_path / 'a.parquet', A)}", f"b={trajectories(tmp_path / 'b.parquet', B)}"]) == 0
    from_files = lines(capsys)
    rec = record(tmp_path / "r.json", {"x": A, "y": B})
    assert main([f"a={rec}#x", f"b={rec}#y"]) == 0
    from_record = lines(capsys)
    assert from_record[2] == from_files[2]  # the paired difference, its interval and p
    assert "+33.3 points" in from_record[2] and "on 6 tasks" in from_record[2]
    assert from_record[0].startswith("a: 66.7%") and "#x, recorded at 01234567, clean" in from_record[0]


def test_a_record_from_a_modified_tree_is_refused_unless_allowed(tmp_path, capsys):
    rec = record(tmp_path / "r.json", {"x": A, "y": B}, dirty=True)
    assert main([f"a={rec}#x", f"b={rec}#y"]) == 2
    assert "modified working tree" in capsys.readouterr().err
    assert main(["--allow-dirty-source", f"a={rec}#x", f"b={rec}#y"]) == 0
    assert "MODIFIED working tree" in lines(capsys)[0]


def test_an_unknown_arm_or_missing_file_says_what_there_is(tmp_path, capsys):
    rec = record(tmp_path / "r.json", {"x": A, "y": B})
    assert main([f"a={rec}#z", f"b={rec}#y"]) == 2
    assert "no scored model 'z'; its models are ['x', 'y']" in capsys.readouterr().err
    assert main([f"a={tmp_path / 'none.parquet'}", f"b={rec}#y"]) == 2
    assert "no such trajectory file" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["just-a-path", f"b={rec}#y"])


def test_the_first_model_is_compared_with_each_other_and_the_json_keeps_it(tmp_path, capsys):
    c = {1: 1, 2: 1, 3: 1, 4: 1, 5: 1, 6: 1}
    rec = record(tmp_path / "r.json", {"x": A, "y": B, "z": c})
    out = tmp_path / "figures" / "cmp.json"
    assert main([f"a={rec}#x", f"b={rec}#y", f"c={rec}#z", "--json", str(out)]) == 0
    printed = lines(capsys)
    assert [line.split(":")[0] for line in printed[:3]] == ["a", "b", "c"]
    assert printed[3].startswith("a − b: +33.3 points") and printed[4].startswith("a − c: -33.3 points")
    data = json.loads(out.read_text())
    row = data["rows"]["c"]
    assert {k: row[k] for k in ("success_rate", "success_high", "n")} == {"success_rate": 1.0, "success_high": 1.0, "n": 6}
    assert row["success_low"] == pytest.approx(0.61, abs=0.01) and row["source"].endswith("#z, recorded at 01234567, clean")
    # the machine that played the episodes, from the source's results file (not the machine comparing them)
    assert row["cpu"] == "CPU Y (family 25 model 17), 2 cores, AVX512-BF16" and row["compute_dtype"] == "float32"
    assert set(data["comparisons"]) == {"a-b", "a-c"}
    assert data["comparisons"]["a-b"]["diff"] == pytest.approx(1 / 3)
    assert data["comparisons"]["a-c"]["a_only"] == 0 and data["comparisons"]["a-c"]["b_only"] == 2
    assert data["comparisons"]["a-b"]["verdict"] == "no difference shown"


def test_one_model_or_a_repeated_name_is_refused(tmp_path):
    rec = record(tmp_path / "r.json", {"x": A, "y": B})
    for argv in ([f"a={rec}#x"], [f"a={rec}#x", f"a={rec}#y"]):
        with pytest.raises(SystemExit):
            main(argv)
