"""Child processes: their own session, death with the parent (SIGKILL included), killed at once when asked."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import weakref
from pathlib import Path

import pytest

from agentrl_core.system import child_processes

ROOT = Path(__file__).resolve().parents[1]
BOUND_S = 10.0

# A parent that starts a child (which arms `{arm}` and sleeps), prints the child's pid, and sleeps.
PARENT = textwrap.dedent("""
    import signal, subprocess, sys, time
    signal.signal(signal.SIGINT, lambda *_: None)  # the parent survives Ctrl-C (as `agentrl run` does, to clean up)
    child = subprocess.Popen([sys.executable, "-c", {child!r}], **{session})
    print(child.pid, flush=True)
    time.sleep(120)
""")
CHILD = textwrap.dedent("""
    import os, time
    from agentrl_core.system import child_processes
    parent = os.getppid()
    {arm}
    time.sleep(120)
""")


def _gone(pid: int, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().split(")")[-1].split()[0] == "Z":
                    return True  # a zombie: dead, waiting for its parent to reap it
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


def _parent_with_child(arm: str) -> tuple[subprocess.Popen[str], int]:
    script = PARENT.format(child=CHILD.format(arm=arm), session=child_processes.CHILD_SESSION)
    parent = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, text=True, stdout=subprocess.PIPE,
                              start_new_session=True)
    assert parent.stdout is not None
    return parent, int(parent.stdout.readline())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux only")
@pytest.mark.parametrize("arm", ["child_processes.set_parent_death_signal(parent)",
                                 "child_processes.watch_parent(parent, period_s=0.2)"])
def test_child_dies_when_its_parent_is_killed(arm):
    parent, child = _parent_with_child(arm)
    try:
        time.sleep(1.0)  # the child has armed its watch
        assert os.getsid(child) == child  # its own session: a signal to the parent's group misses it
        os.killpg(parent.pid, signal.SIGINT)  # the terminal's Ctrl-C: the parent's group only
        assert not _gone(child, 0.5)
        parent.kill()  # SIGKILL: no clean-up code of the parent runs
        parent.wait()
        assert _gone(child, BOUND_S), f"child {child} outlived its parent"
    finally:
        parent.kill()
        if not _gone(child, 0):
            os.kill(child, signal.SIGKILL)


def test_kill_tracked_ends_a_child_and_its_own_children(monkeypatch):
    # only this test's child: kill_tracked must not end the session's env server (tracked too)
    monkeypatch.setattr(child_processes, "_tracked", weakref.WeakSet())
    script = "import subprocess, sys, time; g = subprocess.Popen([sys.executable, '-c', 'import time; " \
             "time.sleep(120)']); print(g.pid, flush=True); time.sleep(120)"
    child = child_processes.track(subprocess.Popen([sys.executable, "-c", script], text=True, stdout=subprocess.PIPE,
                                            **child_processes.CHILD_SESSION))
    assert child.stdout is not None
    grandchild = int(child.stdout.readline())
    try:
        assert child.pid in child_processes.tracked_pids()
        assert child.pid in child_processes.kill_tracked()
        child.wait(BOUND_S)
        assert _gone(grandchild, BOUND_S)
        assert child.pid not in child_processes.tracked_pids()
    finally:
        child.kill()


def test_servers_start_in_their_own_session_and_are_tracked():
    from agentrl_core.env_service import launch_server

    with launch_server(["countdown"]) as server:
        assert os.getsid(server.pid) == server.pid != os.getsid(0)
        assert server.pid in child_processes.tracked_pids()
    assert server.pid not in child_processes.tracked_pids()
