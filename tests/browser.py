"""A headless Debian Chromium driven over the DevTools protocol: open a page, click, read its DOM, screenshot it.

Only the standard library, `httpx` and `websockets` (both already Prefect dependencies) are used: no
Selenium, no Playwright. Chromium runs with a fresh profile and every background-network feature off,
so it talks to nothing but the 127.0.0.1 pages it is sent to.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Self

import httpx

CHROMIUM = Path("/usr/bin/chromium")
VIEWPORT = (1600, 1000)
QUIET_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               f"--window-size={VIEWPORT[0]},{VIEWPORT[1]}"]


class BrowserError(RuntimeError):
    """Chromium did not start, a page did not load, or a condition never became true."""


class Browser:
    """One headless Chromium process and a DevTools connection to its single tab."""

    def __init__(self, *, timeout: float = 30.0) -> None:
        if not CHROMIUM.exists():
            raise BrowserError(f"{CHROMIUM} is missing: install Debian's browser with `apt-get install -y chromium`")
        self._timeout = timeout
        self._ids = itertools.count(1)
        self._profile = tempfile.TemporaryDirectory(prefix="chromium-profile-")
        self._log = Path(self._profile.name) / "chromium.log"
        args = [str(CHROMIUM), *QUIET_FLAGS, f"--user-data-dir={self._profile.name}", "--remote-debugging-port=0",
                "about:blank"]
        with open(self._log, "w") as log:  # the child keeps its own copy of the descriptor
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            self._ws = self._connect()
            width, height = VIEWPORT  # a fixed CSS viewport: the wide layout, screenshots of a known size
            self.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1,
                      mobile=False)
        except BaseException:
            self.close()
            raise

    def _connect(self):
        from websockets.sync.client import connect

        port = self._devtools_port()
        targets = httpx.get(f"http://127.0.0.1:{port}/json/list", timeout=5).json()
        pages = [t for t in targets if t.get("type") == "page"]
        if not pages:
            raise BrowserError(f"chromium on port {port} has no page target: {targets}")
        return connect(pages[0]["webSocketDebuggerUrl"], max_size=64 * 2**20, open_timeout=10)

    def _devtools_port(self) -> int:
        """Chromium writes the port it picked (for --remote-debugging-port=0) to <profile>/DevToolsActivePort."""
        marker = Path(self._profile.name) / "DevToolsActivePort"
        deadline = time.monotonic() + self._timeout
        while time.monotonic() < deadline:
            if _exited(self.proc):
                raise BrowserError(f"chromium exited at startup:\n{self._log.read_text()[-2000:]}")
            if marker.exists() and marker.read_text().strip():
                return int(marker.read_text().split()[0])
            time.sleep(0.1)
        raise BrowserError(f"chromium did not open its DevTools port within {self._timeout:.0f} s")

    def call(self, method: str, **params) -> dict:
        """Send one DevTools command and return its result (events arriving meanwhile are skipped)."""
        msg_id = next(self._ids)
        self._ws.send(json.dumps({"id": msg_id, "method": method, "params": params}))
        deadline = time.monotonic() + self._timeout
        while (left := deadline - time.monotonic()) > 0:
            reply = json.loads(self._ws.recv(timeout=left))
            if reply.get("id") != msg_id:
                continue
            if "error" in reply:
                raise BrowserError(f"{method} failed: {reply['error']}")
            return reply["result"]
        raise BrowserError(f"{method} got no answer within {self._timeout:.0f} s")

    def evaluate(self, expression: str):
        """The JSON value of a JavaScript expression evaluated in the page."""
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise BrowserError(f"{expression!r} raised in the page: {result['exceptionDetails'].get('text')}")
        return result["result"].get("value")

    def open(self, url: str) -> None:
        """Navigate the tab to `url` (the single-page app then renders on its own; use `wait_for_text`)."""
        result = self.call("Page.navigate", url=url)
        if result.get("errorText"):
            raise BrowserError(f"cannot open {url}: {result['errorText']}")

    def text(self) -> str:
        """The rendered text of the page (what a user reads), tables included."""
        return self.evaluate("document.body ? document.body.innerText : ''") or ""

    def wait_until(self, expression: str, timeout: float | None = None):
        """Poll a JavaScript expression (one giving a JSON value, e.g. `!!el`) until it is truthy; returns it."""
        deadline = time.monotonic() + (timeout or self._timeout)
        while time.monotonic() < deadline:
            if value := self.evaluate(expression):
                return value
            time.sleep(0.25)
        raise BrowserError(f"{expression!r} stayed false on {self.evaluate('location.href')}; the page shows:\n"
                           f"{self.text()[:2000]}")

    def wait_for_text(self, *needles: str, timeout: float | None = None) -> str:
        """Poll the page text until it contains every needle; returns the text."""
        self.wait_until(f"(() => {{ const t = document.body ? document.body.innerText : '';"
                        f" return {json.dumps(list(needles))}.every(n => t.includes(n)); }})()", timeout)
        return self.text()

    def click(self, selector: str) -> None:
        """Click the first element matching a CSS selector (raises if there is none)."""
        found = self.evaluate(f"(() => {{ const e = document.querySelector({json.dumps(selector)});"
                              " if (!e) return false; e.click(); return true; })()")
        if not found:
            raise BrowserError(f"no element matches {selector!r} on {self.evaluate('location.href')}")

    def screenshot(self, path: Path) -> Path:
        """Write a PNG of the visible page to `path`."""
        data = self.call("Page.captureScreenshot", format="png")["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        """Close the connection, end Chromium (its process group, by the id of the process started here)."""
        if getattr(self, "_ws", None) is not None:
            self._ws.close()
        _end_group(self.proc)
        self._profile.cleanup()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _end_group(proc: subprocess.Popen, grace: float = 10.0) -> None:
    """SIGTERM the process group led by `proc`, then SIGKILL what is left, and only then reap `proc`.

    Not reaping the leader before the final SIGKILL keeps its id (= the group id) from being reused
    by an unrelated process in between.
    """
    _signal_group(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while not _exited(proc) and time.monotonic() < deadline:
        time.sleep(0.1)
    _signal_group(proc.pid, signal.SIGKILL)  # renderer/GPU children that outlived the browser process
    proc.wait(grace)


def _exited(proc: subprocess.Popen) -> bool:
    """Whether `proc` has exited, without reaping it (its id stays reserved until `proc.wait`)."""
    if proc.returncode is not None:
        return True
    try:
        return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:  # reaped elsewhere
        return True


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:  # the whole group is gone already
        pass
