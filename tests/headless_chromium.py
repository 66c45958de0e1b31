"""Drive Debian's headless Chromium over the DevTools protocol, for page tests.

No browser download and no extra Python package: Chromium is started with
``--remote-debugging-port=0``, the port is read from ``DevToolsActivePort`` in its
fresh profile directory, and one page target is driven over a websocket
(``websockets``, already installed with Prefect). Every console message,
uncaught exception, log entry and network request of the page is recorded, so a
test can assert that a page loaded offline and without errors.
"""

from __future__ import annotations

import base64
import itertools
import json
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--remote-debugging-port=0",
    "--window-size=1280,900",
)
STARTUP_SECONDS = 60  # give up waiting for the DevTools port after this long
REPLY_SECONDS = 60  # give up waiting for one protocol reply after this long


def chromium_path() -> str | None:
    """The Chromium executable on PATH (Debian's ``chromium``), or ``None``."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Page:
    """One headless Chromium with one page, recording what the page reports.

    Use as a context manager; the browser process and its temporary profile
    are removed on exit.
    """

    def __init__(self, executable: str) -> None:
        self.executable = executable
        self.events: list[dict[str, Any]] = []
        self._ids = itertools.count(1)

    def __enter__(self) -> Page:
        from websockets.sync.client import connect

        self._profile = Path(tempfile.mkdtemp(prefix="fedpipe-chromium-"))
        self._proc = subprocess.Popen(
            [
                self.executable,
                *CHROMIUM_FLAGS,
                f"--user-data-dir={self._profile}",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            port = self._wait_port()
            with urllib.request.urlopen(
                f"http://127.0.0.1:{port}/json/list", timeout=REPLY_SECONDS
            ) as reply:
                targets = json.load(reply)
            page = next(t for t in targets if t["type"] == "page")
            self._ws = connect(page["webSocketDebuggerUrl"], max_size=None)
            for domain in ("Page", "Runtime", "Log", "Network"):
                self.send(f"{domain}.enable")
        except BaseException:
            self._stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self._ws.close()
        finally:
            self._stop()

    def _stop(self) -> None:
        self._proc.terminate()
        try:
            self._proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        shutil.rmtree(self._profile, ignore_errors=True)

    def _wait_port(self) -> int:
        marker = self._profile / "DevToolsActivePort"
        deadline = time.monotonic() + STARTUP_SECONDS
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(
                    f"{self.executable} exited with {self._proc.returncode} "
                    "before opening its DevTools port"
                )
            if marker.is_file():
                lines = marker.read_text().splitlines()
                if lines and lines[0].strip().isdigit():
                    return int(lines[0])
            time.sleep(0.1)
        raise RuntimeError(f"{self.executable}: no DevTools port after 60 s")

    # ------------------------------------------------------------ protocol

    def send(self, method: str, **params: Any) -> dict[str, Any]:
        """Call a DevTools method; return its result, recording events meanwhile."""
        call_id = next(self._ids)
        self._ws.send(json.dumps({"id": call_id, "method": method, "params": params}))
        while True:
            message = json.loads(self._ws.recv(timeout=REPLY_SECONDS))
            if message.get("id") == call_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            if "method" in message:
                self.events.append(message)

    def wait_event(self, method: str) -> dict[str, Any]:
        """Block until the page sends event ``method`` (or one already came)."""
        for event in self.events:
            if event["method"] == method:
                return event
        while True:
            message = json.loads(self._ws.recv(timeout=REPLY_SECONDS))
            if "method" in message:
                self.events.append(message)
                if message["method"] == method:
                    return message

    def open(self, url: str) -> None:
        """Navigate to ``url`` and wait for its load event."""
        self.events.clear()
        result = self.send("Page.navigate", url=url)
        if result.get("errorText"):
            raise RuntimeError(f"{url}: {result['errorText']}")
        self.wait_event("Page.loadEventFired")

    def evaluate(self, expression: str) -> Any:
        """Evaluate JavaScript in the page; return its JSON value."""
        result = self.send(
            "Runtime.evaluate",
            expression=expression,
            returnByValue=True,
            awaitPromise=True,
        )
        if "exceptionDetails" in result:
            raise RuntimeError(f"page script failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def screenshot(self, path: Path) -> Path:
        """Write a PNG of the whole page to ``path``."""
        data = self.send(
            "Page.captureScreenshot", format="png", captureBeyondViewport=True
        )
        path.write_bytes(base64.b64decode(data["data"]))
        return path

    # ------------------------------------------------------------ what happened

    def errors(self) -> list[str]:
        """Console errors, uncaught exceptions and error log entries so far."""
        found = []
        for event in self.events:
            method, params = event["method"], event.get("params", {})
            if method == "Runtime.exceptionThrown":
                details = params.get("exceptionDetails", {})
                text = details.get("exception", {}).get("description") or details.get(
                    "text", ""
                )
                found.append(f"exception: {text}")
            elif method == "Runtime.consoleAPICalled" and params.get("type") in (
                "error",
                "assert",
            ):
                args = [
                    str(a.get("value", a.get("description"))) for a in params["args"]
                ]
                found.append("console." + params["type"] + ": " + " ".join(args))
            elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
                entry = params["entry"]
                found.append(f"log: {entry.get('text')} {entry.get('url', '')}".strip())
            elif method == "Network.loadingFailed":
                found.append(f"network: {params.get('errorText')}")
        return found

    def requested_urls(self) -> list[str]:
        """Every URL the page asked the network stack for."""
        return [
            e["params"]["request"]["url"]
            for e in self.events
            if e["method"] == "Network.requestWillBeSent"
        ]
