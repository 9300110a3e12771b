"""bench/bench_test_suite.py's parsing: pytest's durations, the worker count, coverage's report, CPU busy share."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.bench_test_suite import PACKAGES, busy_share, coverage_figures, coverage_rc, durations, workers

OUTPUT = """\
============================= slowest durations =============================
12.50s call     tests/a/test_x.py::test_one[p]
2.00s setup    tests/a/test_x.py::test_one[p]
0.50s teardown tests/a/test_x.py::test_one[p]
3.00s call     tests/b/test_y.py::test_two
ran on 2 parallel workers (pytest-xdist; -n 0 runs the tests in one process)
3 passed in 20.00s
"""


def test_durations_sum_setup_call_and_teardown_per_test_and_module() -> None:
    modules, tests = durations(OUTPUT)
    assert tests["tests/a/test_x.py::test_one[p]"] == pytest.approx(15.0)
    assert modules == {"tests/a/test_x.py": pytest.approx(15.0), "tests/b/test_y.py": pytest.approx(3.0)}


def test_workers_come_from_the_suites_summary_line_and_default_to_one() -> None:
    assert workers(OUTPUT) == 2.0
    assert workers("3 passed in 2.0s") == 1.0


def test_coverage_figures_total_and_per_package(tmp_path: Path) -> None:
    report = {"totals": {"num_statements": 30, "covered_lines": 15, "percent_covered": 50.0},
              "files": {str(tmp_path / "agentrl_core" / "a.py"): {"summary": {"num_statements": 20, "covered_lines": 15}},
                        str(tmp_path / "tasks" / "b.py"): {"summary": {"num_statements": 10, "covered_lines": 0}}}}
    figures = coverage_figures(report, tmp_path)
    assert figures["line_coverage_pct"] == 50.0 and figures["agentrl_core/line_coverage_pct"] == 75.0
    assert figures["tasks/lines_total"] == 10 and figures["flows/lines_total"] == 0


def test_the_coverage_configuration_measures_every_process(tmp_path: Path) -> None:
    rc = coverage_rc(tmp_path / ".coverage", tmp_path)
    assert "patch = subprocess" in rc and "parallel = true" in rc and "sigterm = true" in rc
    assert all(str(tmp_path / p) in rc for p in PACKAGES)


def test_busy_share_is_the_busy_part_of_the_cpu_time_between_two_readings() -> None:
    assert busy_share((100.0, 400.0), (250.0, 600.0)) == pytest.approx(75.0)
    assert busy_share((0.0, 0.0), (0.0, 0.0)) == 0.0


def test_process_kinds_come_from_the_first_words_of_the_command_line() -> None:
    from bench.process_cpu import OTHER, kind_of

    assert kind_of("/v/bin/python -u -c import sys;exec(eval(sys.stdin.readline()))").startswith("pytest")
    assert kind_of("python3 -m agentrl.prefect_server --port 1 --parent-pid 2") == \
        "Prefect temporary server of agentrl run"
    assert kind_of("python -m agentrl_core.env_service.worker --fd 5 /tmp/pytest-of-root/x") == "env workers"
    assert kind_of("ray::RolloutWorker.run") == "Ray actors and workers"
    for flow_run in ("/v/bin/python -m prefect.runner._workspace_supervisor /tmp/w/config.json",  # Prefect 3.8's
                     "/v/bin/python /v/site-packages/prefect/runner/_workspace_runtime_bootstrap.py engine",
                     "/v/bin/python -m prefect.engine"):
        assert kind_of(flow_run) == "Prefect flow-run processes", flow_run
    assert kind_of("/v/bin/prefect worker start --pool p") == "Prefect servers, workers and CLI"
    assert kind_of("/usr/lib/gcc/x86_64-linux-gnu/12/cc1plus -quiet shm.cpp") == "C/C++ compilers"
    assert kind_of("/usr/bin/python3 /tmp/guide/checks.py") == "other Python processes"
    assert kind_of("sleep 5") == OTHER


def test_the_sampler_counts_the_cpu_of_processes_started_after_it_by_kind() -> None:
    import os
    import subprocess
    import sys

    from bench.process_cpu import ProcessSampler

    sampler = ProcessSampler(period_s=0.05)
    sampler.start()
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.6: pass\ntime.sleep(0.3)"
    child = subprocess.Popen([sys.executable, "-c", burn])
    assert child.wait() == 0
    sampler.stop()
    # the sampler sees every process of the machine (other tests' too, run in parallel): look at this test's own
    mine = {pid: entry for (pid, _), entry in sampler.seen.items() if pid in (child.pid, os.getpid())}
    assert list(mine) == [child.pid]  # this process, started before the sampler, is left out
    kind, ticks, _ = mine[child.pid]
    assert kind == "other Python processes"
    assert 0.4 <= ticks / os.sysconf("SC_CLK_TCK") <= 1.5  # its 0.6 s of CPU, seen to the last sample
    figures = sampler.figures()
    assert figures["processes/other Python processes"] >= 1.0
    assert figures["process_cpu_s_total"] == pytest.approx(sum(v for k, v in figures.items() if k.startswith("cpu_s/")))


def kinds_of(sampler, pid: int) -> list[str]:
    return [entry[0] for (p, _), entry in sampler.seen.items() if p == pid]


def test_a_child_seen_before_its_exec_takes_the_kind_of_what_it_execs() -> None:
    import subprocess
    import sys
    import time

    from bench.process_cpu import ProcessSampler

    sampler = ProcessSampler(period_s=600)  # samples once as it starts, then only when asked (and at stop)
    sampler.start()
    code = "import os, sys; sys.stdin.readline(); os.execvp('sleep', ['sleep', '5'])"  # python until told
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE)
    try:
        time.sleep(0.5)
        sampler.sample()
        assert kinds_of(sampler, child.pid) == ["other Python processes"]  # other tests' processes aside
        child.stdin.write(b"go\n")
        child.stdin.flush()
        time.sleep(0.5)
        sampler.sample()
        assert kinds_of(sampler, child.pid) == ["other processes"]  # now `sleep`
    finally:
        child.kill()
        child.wait()
        sampler.stop()
