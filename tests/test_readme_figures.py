"""README figures come from recorded benchmark runs: the results format, the recorder and the README generator."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from bench import readme_figures as rf
from bench import recording
from bench.record_command import flatten, json_figures, pytest_figures

ROOT = Path(__file__).resolve().parents[1]


def test_readme_matches_the_recorded_results() -> None:
    """Every README figure table equals what bench/results/ gives, and every row has its results file."""
    assert rf.main(["--check"]) == 0, "run .venv/bin/python bench/readme_figures.py (see its message above)"


def test_every_results_file_is_complete() -> None:
    for path in sorted((ROOT / "bench" / "results").glob("*.json")):
        data = json.loads(path.read_text())
        for key in ("command", "cpu", "git_revision", "date", "figures"):
            assert data.get(key) not in (None, "", {}), f"{path.name} has no {key}"
        # the machine it ran on: the CPU's facts, or a device run's card (bench/gpu_checks.py keep)
        assert data.get("machine") or (data.get("device") or {}).get("name"), f"{path.name} names no machine"
        assert path.with_suffix(".txt").exists(), f"{path.name} has no raw output beside it"
        assert path.with_suffix(".txt").read_text().startswith(f"$ {data['command']}")


def _results(tmp_path: Path, figures: dict, **extra) -> Path:
    (tmp_path / "one.json").write_text(json.dumps({"command": ".venv/bin/python bench/x.py", "figures": figures,
                                                   "machine": {"model": "CPU X", "flags": ["avx2"], "cores": 2,
                                                               "usable_cores": 2}, **extra}))
    return tmp_path


SPEC = {"tables": {"t": {"columns": ["what", "figure", "CPU", "command"],
                         "rows": [{"what": "speed", "figure": "{a|.1f} s, {share|pct}, {d|signed_pct}, {n}",
                                   "result": "one"}]}}}


def test_a_table_is_rendered_from_the_results(tmp_path: Path) -> None:
    results = _results(tmp_path, {"a": 2.345, "share": 0.5, "d": -0.125, "n": 1200.0})
    text = "intro\n<!-- figures:t -->\nstale row\n<!-- /figures:t -->\nend\n"
    out = rf.render_readme(text, SPEC, results)
    assert "| speed | 2.3 s, 50.0%, -12.5, 1,200 | CPU X, 2 cores, AVX2 | `.venv/bin/python bench/x.py`" in out
    assert "stale row" not in out and out.startswith("intro\n") and out.endswith("end\n")


def test_a_changed_figure_makes_the_readme_disagree(tmp_path: Path) -> None:
    text = "<!-- figures:t -->\n<!-- /figures:t -->\n"
    rendered = rf.render_readme(text, SPEC, _results(tmp_path, {"a": 1.0, "share": 0.5, "d": 0.0, "n": 1.0}))
    changed = rf.render_readme(rendered, SPEC, _results(tmp_path, {"a": 9.0, "share": 0.5, "d": 0.0, "n": 1.0}))
    assert changed != rendered and "9.0 s" in changed


def test_a_row_can_quote_extra_fields_of_the_results(tmp_path: Path) -> None:
    results = _results(tmp_path, {"a": 1.0}, comparisons=[{"a": "rl", "b": "sft", "low": 0.051, "verdict": "rl > sft"}],
                       tests={"sft": {"success_rate": 0.25}})
    row = {"what": "gain", "figure": "{comparisons/rl-sft/low|signed_pct} ({comparisons/rl-sft/verdict}), "
                                     "{tests/sft/success_rate|pct}", "result": "one", "flatten": ["comparisons", "tests"]}
    spec = {"tables": {"t": {"columns": ["what", "figure"], "rows": [row]}}}
    out = rf.render_readme("<!-- figures:t -->\n<!-- /figures:t -->\n", spec, results)
    assert "| gain | +5.1 (rl > sft), 25.0% |" in out
    row["flatten"] = ["nothing"]
    with pytest.raises(rf.FiguresError, match="no field 'nothing'"):
        rf.render_readme("<!-- figures:t -->\n<!-- /figures:t -->\n", spec, results)


def test_a_row_without_results_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(rf.FiguresError, match="no results file .*--record one"):
        rf.render_readme("<!-- figures:t -->\n<!-- /figures:t -->\n", SPEC, tmp_path)


def test_a_missing_figure_or_section_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(rf.FiguresError, match="no figure 'share'"):
        rf.render_readme("<!-- figures:t -->\n<!-- /figures:t -->\n", SPEC, _results(tmp_path, {"a": 1.0}))
    with pytest.raises(rf.FiguresError, match="no section for table"):
        rf.render_readme("no markers\n", SPEC, tmp_path)


def test_the_spec_names_only_recorded_runs() -> None:
    spec = yaml.safe_load((ROOT / "bench" / "figures.yaml").read_text())
    for table in spec["tables"].values():
        for row in table["rows"]:
            assert (ROOT / "bench" / "results" / f"{row['result']}.json").exists(), row


def test_record_arguments_are_taken_out_before_the_benchmark_parses() -> None:
    assert recording.split_record_args(["--steps", "3", "--record", "x", "--no-record"]) == (["--steps", "3"], "x", False)
    assert recording.split_record_args(["--a", "--", "cmd", "--record", "y"]) == (["--a", "--", "cmd", "--record", "y"],
                                                                                  None, True)
    assert recording.default_record_name("speed", []) == "speed"
    assert recording.default_record_name("speed", ["--compute-dtype", "bfloat16"]) == "speed__compute-dtype-bfloat16"


SCRIPT = '''
import os, sys
sys.path.insert(0, {root!r})
from bench.recording import current, run_recorded
def main():
    print("from python", flush=True)
    os.system("echo from a child process")
    if "--fail" in sys.argv:
        raise SystemExit(3)
    current().report({{"x": 1.5}}, texts={{"mode": "m"}})
run_recorded("demo", main, results_dir=__import__("pathlib").Path({out!r}))
'''


def _run_script(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    script = tmp_path / "bench_demo.py"
    script.write_text(SCRIPT.format(root=str(ROOT), out=str(tmp_path / "results")))
    return subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_a_recorded_run_keeps_its_console_command_cpu_and_figures(tmp_path: Path) -> None:
    proc = _run_script(tmp_path, "--record", "mine")
    assert proc.returncode == 0, proc.stderr
    assert "from python" in proc.stdout and "from a child process" in proc.stdout  # still shown while teed
    data = json.loads((tmp_path / "results" / "mine.json").read_text())
    assert data["figures"] == {"x": 1.5} and data["texts"] == {"mode": "m"}
    assert data["command"].endswith("bench_demo.py --record mine") and data["cpu"].startswith("CPU: ")
    assert data["git_revision"] and data["date"] and data["machine"]["cores"] >= 1
    raw = (tmp_path / "results" / "mine.txt").read_text()
    assert raw.startswith(f"$ {data['command']}\n") and "from python" in raw and "from a child process" in raw


def test_a_failed_run_records_nothing(tmp_path: Path) -> None:
    proc = _run_script(tmp_path, "--fail")
    assert proc.returncode == 3
    assert not (tmp_path / "results").exists() or not list((tmp_path / "results").iterdir())


def test_pytest_counts_and_report_numbers_become_figures() -> None:
    assert pytest_figures("...\n1365 passed, 2 skipped, 3 warnings in 905.12s (0:15:05)\n") == {
        "passed": 1365.0, "failed": 0.0, "skipped": 2.0, "errors": 0.0, "warning": 3.0, "pytest_seconds": 905.12}
    with pytest.raises(ValueError, match="closing line"):
        pytest_figures("no summary")
    report = {"rows": [{"model": "sft", "success_rate": 0.63, "success [95% CI] n": "63.0% [56.1, 69.4] n=200"}],
              "comparisons": [{"a": "grpo", "b": "sft", "diff": 0.175, "verdict": "grpo > sft"}], "evals": {"x": 1}}
    numbers, texts = json_figures(report, ["rows", "comparisons"])
    assert numbers == {"rows/sft/success_rate": 0.63, "comparisons/grpo-sft/diff": 0.175}
    assert texts["rows/sft/success [95% CI] n"] == "63.0% [56.1, 69.4] n=200"
    assert texts["comparisons/grpo-sft/verdict"] == "grpo > sft" and "evals/x" not in numbers
    assert flatten({"a": [1, True, None, "s"]}) == {"a/0": 1, "a/3": "s"}
