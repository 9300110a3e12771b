"""The Prefect UI as the dashboard: a real train run's artifacts, rendered by headless Chromium from a real server."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from agentrl_core.web.ports import free_port
from tests.browser import CHROMIUM, Browser
from tests.flows.conftest import tiny_overrides
from tests.prefect_home import seed_home

ROOT = Path(__file__).resolve().parents[2]
NO_CHROMIUM = f"Debian's chromium is not installed ({CHROMIUM} missing): apt-get install -y chromium"
pytestmark = [pytest.mark.slow, pytest.mark.skipif(not CHROMIUM.exists(), reason=NO_CHROMIUM)]
# Smaller than tiny_overrides (the UI is under test, not the learning; tests/flows/test_train_flow.py runs SFT):
# no SFT stage (saves its training and its evaluation, ~40 s here), 8 train tasks, 1 test task.
FAST = ["sft.enabled=false", "env.train_tasks=8", "env.test_tasks=1"]
MODELS = ["base", "grpo"]
ARTIFACT_KEYS = {"evaluation", "run-summary", "checkpoint-grpo", "grpo-progress"}



def _wait_healthy(api: str, proc: subprocess.Popen, log: Path, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"prefect server exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(f"{api}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise TimeoutError(f"prefect server not healthy after {timeout:.0f} s:\n{log.read_text()[-3000:]}")


@pytest.fixture(scope="module")
def server(tmp_path_factory, prefect_database):
    """A real Prefect server with the v1 UI (no outside requests) on a free 127.0.0.1 port; yields (ui, env)."""
    home = seed_home(tmp_path_factory.mktemp("prefect-ui-home"), prefect_database)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(PREFECT_HOME=str(home), PREFECT_API_URL=f"http://127.0.0.1:{port}/api", DO_NOT_TRACK="1",
               PREFECT_SERVER_ANALYTICS_ENABLED="false", PREFECT_SERVER_UI_V2_ENABLED="false",
               HF_HUB_OFFLINE="1", PYTHONPATH=str(ROOT))
    log = home / "server.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([str(Path(sys.executable).with_name("prefect")), "server", "start", "--host",
                                 "127.0.0.1", "--port", str(port)], cwd=ROOT, env=env, stdout=out,
                                stderr=subprocess.STDOUT)
        try:
            _wait_healthy(env["PREFECT_API_URL"], proc, log)
            yield f"http://127.0.0.1:{port}", env
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


@pytest.fixture(scope="module")
def train_run(server, tiny_model_path, tmp_path_factory):
    """Run the real `train` flow against the server; yields its flow run id, artifact ids by key and run folder."""
    ui, env = server
    root = tmp_path_factory.mktemp("ui-runs")
    overrides = tiny_overrides(tiny_model_path, root) + FAST
    code = ("from flows.train import train; import json, sys; "
            "train(recipe_file='household_grpo', overrides=json.loads(sys.argv[1]))")
    done = subprocess.run([sys.executable, "-c", code, json.dumps(overrides)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    api = env["PREFECT_API_URL"]
    runs = httpx.post(f"{api}/flow_runs/filter", json={"flows": {"name": {"any_": ["train"]}}}, timeout=10).json()
    assert len(runs) == 1 and runs[0]["state_type"] == "COMPLETED", runs
    flow_run_id = runs[0]["id"]
    arts = httpx.post(f"{api}/artifacts/filter", timeout=10,
                      json={"artifacts": {"flow_run_id": {"any_": [flow_run_id]}}}).json()
    return {"ui": ui, "flow_run_id": flow_run_id, "artifacts": {a["key"]: a["id"] for a in arts},
            "run_dir": root / "tiny"}


@pytest.fixture(scope="module")
def chromium():
    """One headless Chromium for the module's pages."""
    with Browser(timeout=45) as b:
        yield b


def _png_size(path: Path) -> tuple[int, int]:
    """Width and height from a PNG's IHDR chunk; fails unless the file starts like a PNG."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR", f"{path} is not a PNG"
    return struct.unpack(">II", data[16:24])


def _card_links(b: Browser) -> dict[str, str]:
    """Artifact cards of the flow run's Artifacts tab: title -> the page it links to."""
    return b.evaluate("Object.fromEntries([...document.querySelectorAll('#artifacts-content a')]"
                      ".filter(a => a.querySelector('.artifact-card__title'))"
                      ".map(a => [a.querySelector('.artifact-card__title').innerText.trim(), a.getAttribute('href')]))")


def _open_artifacts_tab(b: Browser, run: dict) -> None:
    """The flow run's page, Artifacts tab, with every artifact card shown."""
    b.open(f"{run['ui']}/runs/flow-run/{run['flow_run_id']}")
    b.wait_for_text("Completed", "Artifacts")
    b.click("#artifacts")  # the UI resets ?tab=Artifacts to Logs (the tab is hidden until the run has loaded)
    b.wait_for_text(*ARTIFACT_KEYS)


def test_artifacts_tab_lists_every_artifact_of_the_run(train_run, chromium, tmp_path):
    assert ARTIFACT_KEYS <= set(train_run["artifacts"]), train_run["artifacts"]
    _open_artifacts_tab(chromium, train_run)
    links = _card_links(chromium)
    assert {key: links.get(key) for key in ARTIFACT_KEYS} == {
        key: f"/artifacts/artifact/{train_run['artifacts'][key]}" for key in ARTIFACT_KEYS}
    shot = chromium.screenshot(tmp_path / "artifacts-tab.png")
    assert _png_size(shot) == (1600, 1000)


def test_evaluation_table_renders_from_the_card(train_run, chromium, tmp_path):
    rows = json.loads((train_run["run_dir"] / "report" / "eval.json").read_text())["rows"]
    _open_artifacts_tab(chromium, train_run)
    page = f"/artifacts/artifact/{train_run['artifacts']['evaluation']}"
    chromium.click(f"a[href='{page}']")
    chromium.wait_until(f"location.pathname === '{page}' && document.querySelectorAll('table td').length > 0")
    headers = chromium.evaluate("[...document.querySelectorAll('table th')].map(th => th.innerText.trim())")
    cells = chromium.evaluate("[...document.querySelectorAll('table tbody tr')]"
                              ".map(tr => [...tr.querySelectorAll('td')].map(td => td.innerText.trim()))")
    assert headers == list(rows[0])  # model, success_rate, pass@1, pass@k, k, mean_reward, ...
    assert [c[0] for c in cells] == MODELS
    assert [c[headers.index("n_errors")] for c in cells] == [str(r["n_errors"]) for r in rows]
    shot = chromium.screenshot(tmp_path / "evaluation.png")
    assert _png_size(shot) == (1600, 1000) and shot.stat().st_size > 10_000


def test_run_summary_markdown_renders_heading_table_and_plot(train_run, chromium):
    chromium.open(f"{train_run['ui']}/artifacts/artifact/{train_run['artifacts']['run-summary']}")
    chromium.wait_for_text("agentrl run tiny", "Evaluation on held-out tasks", "Reward curve")
    headings = chromium.evaluate("[...document.querySelectorAll('h1, h2')].map(h => h.innerText.trim())")
    assert {"agentrl run tiny", "Evaluation on held-out tasks", "Reward curve"} <= set(headings)
    assert chromium.evaluate("document.querySelectorAll('table tbody tr').length") == len(MODELS)
    width = chromium.evaluate("(async () => { const i = document.querySelector('img[src^=\"data:image/png\"]');"
                              " if (!i) return 0; await i.decode(); return i.naturalWidth; })()")
    assert width == _png_size(train_run["run_dir"] / "report" / "curves.png")[0]


def test_checkpoint_link_points_at_the_exported_folder(train_run, chromium):
    chromium.open(f"{train_run['ui']}/artifacts/artifact/{train_run['artifacts']['checkpoint-grpo']}")
    folder = (train_run["run_dir"] / "export" / "grpo").resolve()
    chromium.wait_for_text(str(folder))  # the link shows the folder's path, the artifact says what it is
    href = chromium.evaluate(f"[...document.querySelectorAll('a')].filter(a => a.innerText.includes({str(folder)!r}))"
                             ".map(a => a.getAttribute('href'))[0]")
    assert href == folder.as_uri()
