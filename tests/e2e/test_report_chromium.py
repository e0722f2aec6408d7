"""A minimal headless-Chromium driver for the report tests (no package beyond the stdlib).

Chromium speaks the DevTools protocol over a pipe (``--remote-debugging-pipe``: it reads
commands on fd 3 and writes replies and events on fd 4, each a JSON message ended by a
NUL byte), so no websocket client is needed. The page is opened with a proxy that
refuses everything: a request that tries to leave the file is both seen (Network events)
and fails.

This module holds no tests; ``tests/e2e/test_report_browser.py`` uses it.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

CHROMIUM = next(
    (p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None
)

# What the page reports about itself once drawn: marks per chart, and its visible text.
_INSPECT = """JSON.stringify({
  drawn: document.body.getAttribute('data-charts-drawn'),
  charts: Array.from(document.querySelectorAll('.tw-chart')).map(function (el) {
    return {id: el.id,
            lines: el.querySelectorAll('.scatterlayer path.js-line').length,
            points: el.querySelectorAll('.scatterlayer path.point').length,
            fills: el.querySelectorAll('.scatterlayer path.js-fill').length};
  }),
  text: document.body.innerText,
  all_text: document.body.textContent,
  chart_errors: document.getElementById('tw-chart-errors') ?
      document.getElementById('tw-chart-errors').textContent : ''
})"""


class Page:
    """What the browser saw of one page: console errors, requests, marks, text, screenshot."""

    def __init__(self) -> None:
        self.console_errors: list[str] = []
        self.requests: list[str] = []
        self.info: dict[str, Any] = {}
        self.screenshot: Path | None = None


class _Pipe:
    def __init__(self, proc: subprocess.Popen, write_fd: int, read_fd: int) -> None:
        self.proc, self.wfd, self.rfd = proc, write_fd, read_fd
        self.buffer = b""
        self.next_id = 0
        self.events: list[dict[str, Any]] = []

    def send(self, method: str, params: dict | None = None, session: str | None = None,
             timeout: float = 30) -> dict[str, Any]:  # fmt: skip
        self.next_id += 1
        message: dict[str, Any] = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self.wfd, json.dumps(message).encode() + b"\0")
        deadline = time.time() + timeout
        while time.time() < deadline:
            reply = self._read()
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)
        raise TimeoutError(method)

    def _read(self) -> dict[str, Any]:
        while b"\0" not in self.buffer:
            chunk = os.read(self.rfd, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium closed the pipe")
            self.buffer += chunk
        raw, self.buffer = self.buffer.split(b"\0", 1)
        return json.loads(raw)


class Browser:
    """One headless Chromium for several pages (starting it is most of the cost).

    Example:
        with Browser() as browser:
            page = browser.open(Path("report.html"), screenshot=Path("shot.png"))
    """

    def __enter__(self) -> Browser:
        assert CHROMIUM, "no chromium binary"
        to_chrome_r, to_chrome_w = os.pipe()
        from_chrome_r, from_chrome_w = os.pipe()
        self.profile = tempfile.mkdtemp(prefix="tw-chromium-")
        args = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                "--disable-extensions", "--disable-background-networking", "--disable-sync",
                "--disable-dev-shm-usage", "--proxy-server=127.0.0.1:9",
                "--proxy-bypass-list=<-loopback>", f"--user-data-dir={self.profile}",
                "--remote-debugging-pipe", "about:blank"]  # fmt: skip
        # Chromium expects the pipe on fds 3 (commands in) and 4 (replies out): bash (dash
        # takes only one-digit fds)
        # moves them there before it becomes Chromium.
        wrapper = f'exec "$0" "$@" 3<&{to_chrome_r} 4>&{from_chrome_w}'
        self.log = Path(self.profile) / "chromium.log"
        with open(self.log, "wb") as log:
            proc = subprocess.Popen(["bash", "-c", wrapper, *args],
                                    pass_fds=(to_chrome_r, from_chrome_w),
                                    stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self.pipe = _Pipe(proc, to_chrome_w, from_chrome_r)
        try:
            self.pipe.send("Target.getTargets")
        except (OSError, RuntimeError, TimeoutError) as exc:
            tail = self.log.read_text(errors="replace")[-2000:]
            self.__exit__()
            raise RuntimeError(f"chromium did not start ({exc}); its output:\n{tail}") from None
        return self

    def __exit__(self, *exc: object) -> None:
        self.pipe.proc.kill()
        self.pipe.proc.wait(timeout=30)
        os.close(self.pipe.wfd)
        os.close(self.pipe.rfd)
        shutil.rmtree(self.profile, ignore_errors=True)

    def open(self, html: Path, screenshot: Path | None = None, width: int = 1400,
             timeout: float = 60) -> Page:  # fmt: skip
        """Open ``html`` in a new tab, wait for its charts, and say what happened."""
        pipe = self.pipe
        pipe.events.clear()
        target = pipe.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        try:
            return _drive(pipe, target, html, screenshot, width, timeout)
        finally:
            pipe.send("Target.closeTarget", {"targetId": target})


def _drive(pipe: _Pipe, target: str, html: Path, screenshot: Path | None, width: int,
           timeout: float) -> Page:  # fmt: skip
    session = pipe.send("Target.attachToTarget", {"targetId": target, "flatten": True})[
        "sessionId"
    ]
    for domain in ("Runtime", "Log", "Network", "Page"):
        pipe.send(f"{domain}.enable", session=session)
    pipe.send("Emulation.setDeviceMetricsOverride",
              {"width": width, "height": 900, "deviceScaleFactor": 1, "mobile": False},
              session=session)  # fmt: skip
    pipe.send("Page.navigate", {"url": html.resolve().as_uri()}, session=session)
    page = Page()
    deadline = time.time() + timeout
    while time.time() < deadline:
        done = _evaluate(pipe, session, "document.readyState === 'complete' && "
                         "document.body.getAttribute('data-charts-drawn') !== '0'")  # fmt: skip
        if done:
            break
        time.sleep(0.1)
    time.sleep(0.3)  # let late console messages arrive
    page.info = json.loads(_evaluate(pipe, session, _INSPECT))
    if screenshot is not None:
        height = _evaluate(pipe, session, "document.documentElement.scrollHeight")
        pipe.send("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": int(min(height, 12000)), "deviceScaleFactor": 1,
                   "mobile": False}, session=session)  # fmt: skip
        time.sleep(0.3)  # responsive charts redraw at the new size
        shot = pipe.send("Page.captureScreenshot", {"format": "png"}, session=session)
        screenshot.write_bytes(base64.b64decode(shot["data"]))
        page.screenshot = screenshot
    _collect(pipe.events, page, session)
    return page


def _evaluate(pipe: _Pipe, session: str, expression: str) -> Any:
    result = pipe.send("Runtime.evaluate", {"expression": expression, "returnByValue": True},
                       session=session)  # fmt: skip
    return result.get("result", {}).get("value")


def _collect(events: list[dict[str, Any]], page: Page, session: str) -> None:
    for event in events:
        if event.get("sessionId") != session:
            continue
        method, params = event.get("method"), event.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            page.console_errors.append(" ".join(str(a.get("value", a.get("description")))
                                                for a in params.get("args", [])))  # fmt: skip
        elif method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            page.console_errors.append(str(details.get("exception", {}).get("description")
                                           or details.get("text")))  # fmt: skip
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            page.console_errors.append(str(params["entry"].get("text")))
        elif method == "Network.requestWillBeSent":
            page.requests.append(params.get("request", {}).get("url", ""))
