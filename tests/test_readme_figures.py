"""Published figures come from recorded benchmark runs: the results format, the recorder, the tables of README.md
and docs/ rendered from the results, the figures of running text checked against them, and dirty results."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from bench import prose_figures as pf
from bench import readme_figures as rf
from bench import recording
from bench.record_command import flatten, json_figures, pytest_figures

ROOT = Path(__file__).resolve().parents[1]


def _real_pages() -> dict[Path, str]:
    return {path: path.read_text() for path in rf.page_files()}


def _real_spec() -> dict:
    return yaml.safe_load(rf.SPEC.read_text())


def test_readme_matches_the_recorded_results() -> None:
    """Every figure table of README.md and docs/ equals what bench/results/ gives, and every row has its results
    file; running text and dirty results are checked too (the two tests below say which of those fails)."""
    assert rf.main(["--check"]) == 0, "run .venv/bin/python bench/readme_figures.py (see its message above)"


def test_figures_in_running_text_are_in_their_results_files() -> None:
    problems = pf.check_pages(_real_pages())
    assert not problems, ("figures in running text that no linked results file holds (bench/prose_figures.py says "
                          "the rule; fix the figure, or link the results file that holds it):\n" + "\n".join(problems))


def test_no_new_dirty_results_back_a_published_figure() -> None:
    dirty = rf.dirty_published(_real_spec(), _real_pages())
    problems = rf.dirty_problems(dirty, rf.dirty_allowed())
    assert not problems, "\n".join(problems)


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
    tmp_path.mkdir(parents=True, exist_ok=True)
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
    if "--help" in sys.argv:
        raise SystemExit(0)  # as argparse's --help: before any figure
    current().report({{"x": 1.5}}, texts={{"mode": "m"}})
    if "--report-then-exit" in sys.argv:
        code = sys.argv[-1]
        sys.exit(int(code) if code.isdigit() else code)  # after its figures: a status, a message, or 0
    if "--report-then-return" in sys.argv:
        return 4
sys.exit(run_recorded("demo", main, results_dir=__import__("pathlib").Path({out!r})))
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


@pytest.mark.parametrize("args, status", [(("--report-then-return",), 4), (("--report-then-exit", "5"), 5),
                                          (("--report-then-exit", "why"), 1)])
def test_a_run_that_reports_figures_then_fails_records_nothing(tmp_path: Path, args: tuple, status: int) -> None:
    proc = _run_script(tmp_path, *args)
    assert proc.returncode == status, proc.stderr
    assert "nothing recorded" in proc.stderr and "though it reported figures" in proc.stderr
    assert not (tmp_path / "results").exists() or not list((tmp_path / "results").iterdir())


def test_help_exits_zero_and_records_nothing(tmp_path: Path) -> None:
    proc = _run_script(tmp_path, "--help")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert not (tmp_path / "results").exists() or not list((tmp_path / "results").iterdir())


def test_a_run_that_exits_zero_after_its_figures_is_recorded(tmp_path: Path) -> None:
    proc = _run_script(tmp_path, "--record", "ok", "--report-then-exit", "0")
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "results" / "ok.json").read_text())["figures"] == {"x": 1.5}


def test_a_results_file_left_by_an_earlier_run_does_not_make_the_checkout_dirty(tmp_path: Path) -> None:
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    (tmp_path / "bench" / "results").mkdir(parents=True)
    (tmp_path / "bench" / "results" / "a.json").write_text("{}")
    (tmp_path / "code.py").write_text("x = 1\n")
    for cmd in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "c"]):
        subprocess.run([*git, *cmd], cwd=tmp_path, check=True)
    revision = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tmp_path, capture_output=True, text=True).stdout
    (tmp_path / "bench" / "results" / "a.json").write_text('{"figures": {}}')  # an earlier bench of the sequence
    assert recording.git_state(tmp_path) == (revision.strip(), False)
    (tmp_path / "code.py").write_text("x = 2\n")  # what a bench runs
    assert recording.git_state(tmp_path) == (revision.strip(), True)


def test_exit_status_of_a_return_value_or_exit_code() -> None:
    assert [recording.exit_status(c) for c in (None, 0, 3, "message")] == [0, 0, 3, 1]


def test_record_command_records_a_failing_command_only_when_allowed(tmp_path: Path) -> None:
    """--allow-failure makes the failure the figure (exit_status) and the recorder's own run a success."""
    def record(*extra: str) -> subprocess.CompletedProcess:
        script = tmp_path / "rec.py"
        out = str(tmp_path / "r")
        script.write_text(f"import sys, pathlib\nsys.path.insert(0, {str(ROOT)!r})\nfrom bench import record_command\n"
                          "from bench.recording import run_recorded\n"
                          f"sys.exit(run_recorded('command', record_command.main, pathlib.Path({out!r})))\n")
        return subprocess.run([sys.executable, str(script), "--record", "c", *extra, "--", sys.executable, "-c",
                               "import sys; sys.exit(2)"], capture_output=True, text=True, timeout=120)
    assert record().returncode == 2 and not (tmp_path / "r").exists()
    proc = record("--allow-failure")
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "r" / "c.json").read_text())["figures"]["exit_status"] == 2.0


def test_pytest_counts_and_report_numbers_become_figures() -> None:
    assert pytest_figures("...\n1365 passed, 2 skipped, 3 warnings in 905.12s (0:15:05)\n") == {
        "passed": 1365.0, "failed": 0.0, "skipped": 2.0, "errors": 0.0, "warning": 3.0, "pytest_seconds": 905.12}
    with pytest.raises(ValueError, match="closing line"):
        pytest_figures("no summary")
    report = {"rows": [{"model": "sft", "success_rate": 0.63, "success [95% CI] n": "63.0% [56.1, 69.4] n=200"}],
              "comparisons": [{"a": "grpo", "b": "sft", "diff": 0.175, "verdict": "grpo > sft"},
                              {"a": "grpo", "b": "sft", "diff": 0.3, "metric": "well_formed"}], "evals": {"x": 1}}
    numbers, texts = json_figures(report, ["rows", "comparisons"])
    assert numbers == {"rows/sft/success_rate": 0.63, "comparisons/grpo-sft/diff": 0.175,
                       "comparisons/well_formed:grpo-sft/diff": 0.3}  # a metric's comparison is named apart
    assert texts["rows/sft/success [95% CI] n"] == "63.0% [56.1, 69.4] n=200"
    assert texts["comparisons/grpo-sft/verdict"] == "grpo > sft" and "evals/x" not in numbers
    assert flatten({"a": [1, True, None, "s"]}) == {"a/0": 1, "a/3": "s"}


def _repo(tmp_path: Path, readme: str, docs: dict[str, str]) -> dict[Path, str]:
    """A README and docs pages under tmp_path (as a repository root), as the pages render_pages takes."""
    pages = {tmp_path / "README.md": readme} | {tmp_path / "docs" / name: text for name, text in docs.items()}
    for path, text in pages.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return pages


TWO = {"tables": {"t": SPEC["tables"]["t"],
                  "u": {"columns": ["what", "command"], "rows": [{"what": "x", "result": "one"}]}}}


def test_tables_render_in_readme_and_docs_with_links_relative_to_each_page(tmp_path: Path) -> None:
    results = _results(tmp_path / "bench" / "results", {"a": 1.0, "share": 0.5, "d": 0.0, "n": 1.0})
    _repo(tmp_path, "<!-- figures:t -->\n<!-- /figures:t -->\n",
          {"sub/page.md": "intro\n<!-- figures:u -->\nold\n<!-- /figures:u -->\n"})
    assert rf.page_files(tmp_path) == [tmp_path / "README.md", tmp_path / "docs" / "sub" / "page.md"]
    new = rf.render_pages({p: p.read_text() for p in rf.page_files(tmp_path)}, TWO, results, tmp_path)
    assert "([output](bench/results/one.txt))" in new[tmp_path / "README.md"]
    page = new[tmp_path / "docs" / "sub" / "page.md"]
    assert "| x | `.venv/bin/python bench/x.py` ([output](../../bench/results/one.txt)) |" in page and "old" not in page
    assert rf.results_link(tmp_path / "docs" / "page.md", tmp_path) == "../bench/results/"


def test_each_table_has_exactly_one_section_across_the_pages(tmp_path: Path) -> None:
    results = _results(tmp_path, {"a": 1.0, "share": 0.5, "d": 0.0, "n": 1.0})
    both = "<!-- figures:t -->\n<!-- /figures:t -->\n<!-- figures:u -->\n<!-- /figures:u -->\n"
    pages = _repo(tmp_path, both, {"page.md": "<!-- figures:u -->\n<!-- /figures:u -->\n"})
    with pytest.raises(rf.FiguresError, match=r"'u' is in README.md, docs/page.md"):
        rf.render_pages(pages, TWO, results, tmp_path)
    pages = _repo(tmp_path, "<!-- figures:t -->\n<!-- /figures:t -->\n", {"page.md": "no section\n"})
    with pytest.raises(rf.FiguresError, match=r"no section for table\(s\) \['u'\]"):
        rf.render_pages(pages, TWO, results, tmp_path)
    pages = _repo(tmp_path, both, {"page.md": "<!-- figures:v -->\n<!-- /figures:v -->\n"})
    with pytest.raises(rf.FiguresError, match=r"no table in figures.yaml: 'v' \(docs/page.md\)"):
        rf.render_pages(pages, TWO, results, tmp_path)


def test_main_renders_and_checks_every_page(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    results = _results(tmp_path / "bench" / "results", {"a": 1.0, "share": 0.5, "d": 0.0, "n": 1.0})
    (tmp_path / "bench" / "figures.yaml").write_text(yaml.safe_dump(TWO))
    pages = _repo(tmp_path, "<!-- figures:t -->\n<!-- /figures:t -->\n",
                  {"p.md": "<!-- figures:u -->\n<!-- /figures:u -->\n"})
    assert rf.main(["--check"], root=tmp_path) == 1 and "docs/p.md" in capsys.readouterr().err
    assert rf.main([], root=tmp_path) == 0
    assert "../bench/results/one.txt" in (tmp_path / "docs" / "p.md").read_text()
    assert rf.main(["--check"], root=tmp_path) == 0 and set(pages) == set(rf.page_files(tmp_path))
    assert results == tmp_path / "bench" / "results"


def _prose(tmp_path: Path, text: str, figures: dict, console: str = "") -> list[str]:
    results = tmp_path / "bench" / "results"
    results.mkdir(parents=True, exist_ok=True)
    (results / "x.json").write_text(json.dumps({"figures": figures, "texts": {"row": "63.0% [56.1, 69.4] n=200"}}))
    (results / "x.txt").write_text(f"$ .venv/bin/python bench/x.py lr=0.7\n{console}")
    pf.backing.cache_clear()
    return pf.check_pages({tmp_path / "docs" / "page.md": text}, tmp_path)


def test_a_figure_in_running_text_must_be_in_a_linked_results_file(tmp_path: Path) -> None:
    text = ("Intro, 2024, 3 steps.\n\nIt scored 42.5% (−21.5 points, 1.43x faster, p = 0.07, 63.0% [56.1, 69.4]) at "
            "temperature 0.7\nin 12.0 s ([output](../bench/results/x.txt)).\n\nAn unlinked 99.9% is not checked.\n")
    assert _prose(tmp_path, text, {"rate": 0.425, "diff": -0.215, "ratio": 1.4312, "secs": 12.0},
                  "p = 0.0703\n") == []
    problems = _prose(tmp_path, text.replace("42.5%", "42.6%").replace("12.0 s", "12.1 s"),
                      {"rate": 0.425, "diff": -0.215, "ratio": 1.4312, "secs": 12.0}, "p = 0.0703\n")
    assert problems == ["docs/page.md:3: '42.6%' is in no linked results file (bench/results/x.txt)",
                        "docs/page.md:4: '12.1' is in no linked results file (bench/results/x.txt)"]


def test_what_is_not_a_figure_is_not_checked(tmp_path: Path) -> None:
    text = ("- item 1. in 2024: torch 2.11.0, Qwen2.5-1.5B, lr 5e-5, a 128×2 grid, `--x 3.25`, 1,800 tests, "
            "[a 5.5 link](https://e.org/9.75) <!-- 8.5 --> ([output](bench/results/x.txt))\n"
            "```\n0.123 in code\n```\n| a | 7.25 | ([output](bench/results/x.txt)) |\n| b | 7.75 | no link |\n")
    assert _prose(tmp_path, text, {"a": 7.25}) == ["docs/page.md:1: '5.5' is in no linked results file "
                                                     "(bench/results/x.txt)"]


def test_a_link_to_a_missing_results_file_is_reported(tmp_path: Path) -> None:
    assert _prose(tmp_path, "Saw 1.5 ([o](bench/results/nothing.txt)).\n", {}) == [
        "docs/page.md:1: links bench/results/nothing.txt/.json, which does not exist (record it, or fix the link)"]


def test_dirty_results_fail_unless_allowed(tmp_path: Path) -> None:
    _results(tmp_path, {"a": 1.0, "share": 0.5, "d": 0.0, "n": 1.0}, git_dirty=True)
    (tmp_path / "clean.json").write_text(json.dumps({"figures": {"a": 1.0}, "git_dirty": False}))
    pages = {tmp_path / "README.md": "seen in [x](bench/results/clean.txt)\n"}
    dirty = rf.dirty_published(SPEC, pages, tmp_path, tmp_path)
    assert dirty == {"one": ["table t"]}
    (problem,) = rf.dirty_problems(dirty, set())
    assert problem.startswith("bench/results/one.json (table t) was recorded from a modified working tree")
    assert rf.dirty_problems(dirty, {"one"}) == []
    assert rf.dirty_problems(dirty, {"one", "gone"}) == [
        "DIRTY_ALLOWED.txt names 'gone', which backs no dirty published figure now: take it off the list"]
    (tmp_path / "allowed.txt").write_text("# header\n\none   # why\n")
    assert rf.dirty_allowed(tmp_path / "allowed.txt") == {"one"}
