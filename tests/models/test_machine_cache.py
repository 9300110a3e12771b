"""The per-machine decision cache: measured once, read after, one measurer at a time, never a torn file."""

from __future__ import annotations

import fcntl
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from agentrl_core.system import machine_cache

ROOT = Path(__file__).resolve().parents[2]


def _counting(verdicts: list[dict]):
    calls: list[int] = []

    def measure() -> dict:
        calls.append(1)
        return verdicts[len(calls) - 1]
    return measure, calls


def test_measured_once_then_read_from_the_file(home):
    measure, calls = _counting([{"answer": 1}, {"answer": 2}])
    first = machine_cache.cached_decision("demo", "k1", measure)
    again = machine_cache.cached_decision("demo", "k1", measure)
    assert (first[0]["answer"], first[1], again[0]["answer"], again[1], len(calls)) == (1, False, 1, True, 1)
    stored = json.loads(machine_cache.cache_path("demo").read_text())["k1"]
    assert stored["answer"] == 1 and stored["cpu"] and stored["measured_at"]
    assert machine_cache.cache_path("demo") == home / "machine" / "demo.json"
    machine_cache.cached_decision("demo", "k2", measure)  # another key: measured, the first one kept
    assert set(json.loads(machine_cache.cache_path("demo").read_text())) == {"k1", "k2"}


def test_unkept_invalid_and_unreadable_entries_are_measured_again(home):
    measure, calls = _counting([{"answer": None}, {"answer": 3}, {"answer": 4}])
    entry, cached = machine_cache.cached_decision("demo", "k", measure, keep=lambda e: e["answer"] is not None)
    assert (entry["answer"], cached) == (None, False) and not machine_cache.cache_path("demo").exists()
    machine_cache.cached_decision("demo", "k", measure)
    assert machine_cache.cached_decision("demo", "k", measure, valid=lambda e: e["answer"] == 4)[0]["answer"] == 4
    machine_cache.cache_path("demo").write_text("{not json")
    measure, calls = _counting([{"answer": 5}])
    assert machine_cache.cached_decision("demo", "k", measure)[0]["answer"] == 5 and len(calls) == 1


def test_key_changes_with_every_fact(home):
    facts = machine_cache.machine_facts()
    assert {"cpu", "torch"} <= set(facts)
    base = machine_cache.cache_key({**facts, "shape": [64, 32]})
    assert base == machine_cache.cache_key({"shape": [64, 32], **facts})  # order does not matter
    assert base != machine_cache.cache_key({**facts, "shape": [64, 33]})
    assert base != machine_cache.cache_key({**facts, "torch": "9.9.9", "shape": [64, 32]})


def test_a_held_lock_is_waited_for_then_measured_without_it(home):
    path = machine_cache.cache_path("demo")
    path.parent.mkdir(parents=True)
    with open(path.with_name(path.name + ".lock"), "a") as other:  # another open file: flock conflicts
        fcntl.flock(other, fcntl.LOCK_EX)
        measure, calls = _counting([{"answer": 7}])
        entry, cached = machine_cache.cached_decision("demo", "k", measure, wait_s=0.2)
    assert (entry["answer"], cached, len(calls)) == (7, False, 1)
    assert json.loads(path.read_text())["k"]["answer"] == 7


DECIDER = textwrap.dedent("""
    import json, os, sys, time
    from agentrl_core.system import machine_cache

    def measure():
        with open(sys.argv[1], "a") as log:  # record that this process measured
            log.write(f"{os.getpid()}\\n")
        time.sleep(1.0)  # long enough for the other process to arrive while this one measures
        return {"pid": os.getpid()}

    entry, cached = machine_cache.cached_decision("demo", "shared", measure)
    print(json.dumps({"pid": entry["pid"], "cached": cached}))
""")


@pytest.mark.slow
def test_two_processes_deciding_at_once_measure_once_and_agree(home, tmp_path):
    """Both start before either has written: one measures, the other waits for its lock and reads its answer."""
    log = tmp_path / "measured"
    procs = [subprocess.Popen([sys.executable, "-c", DECIDER, str(log)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [json.loads(p.communicate(timeout=120)[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert len(log.read_text().split()) == 1  # one probe, not two
    assert outs[0]["pid"] == outs[1]["pid"] and sorted(o["cached"] for o in outs) == [False, True]
    assert json.loads(machine_cache.cache_path("demo").read_text())["shared"]["pid"] == outs[0]["pid"]
    assert not list(machine_cache.cache_path("demo").parent.glob(".*.tmp"))  # no temporary file left behind


def test_an_unwritable_home_still_decides(tmp_path, monkeypatch, caplog):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("AGENTRL_HOME", str(blocker / "home"))  # below a file: nothing can be created there
    measure, calls = _counting([{"answer": 1}, {"answer": 2}])
    assert machine_cache.cached_decision("demo", "k", measure) == ({"answer": 1}, False)
    assert "deciding without the lock" in caplog.text and "the next process measures again" in caplog.text
