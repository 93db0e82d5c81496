"""Headless Chromium for the dashboard tests, driven over the DevTools protocol.

Debian's ``chromium`` is installed with apt-get when missing (as root, or through sudo); the
tests skip, saying why, only when that is impossible. The browser runs with a fresh profile,
no network services of its own, and a remote-debugging port it picks itself.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
    "--remote-debugging-port=0",
    "--remote-allow-origins=*",
]


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


def ensure_chromium() -> str:
    """The path of a Chromium binary, installing Debian's package first when missing.

    Raises RuntimeError with the reason when it cannot be installed.
    """
    found = find_chromium()
    if found:
        return found
    if os.geteuid() == 0:
        prefix: list[str] = []
    elif shutil.which("sudo"):
        prefix = ["sudo", "-n"]
    else:
        raise RuntimeError("chromium is missing and this user cannot run apt-get (not root, no sudo)")
    if not shutil.which("apt-get"):
        raise RuntimeError("chromium is missing and there is no apt-get to install it")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for command in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "chromium"]):
        result = subprocess.run(prefix + command, env=env, capture_output=True, text=True, timeout=900)
        if result.returncode != 0:
            raise RuntimeError(f"could not install chromium ({' '.join(command)}): {result.stderr[-500:]}")
    found = find_chromium()
    if not found:
        raise RuntimeError("apt-get installed chromium but no chromium binary is on PATH")
    return found


class Browser:
    """One headless Chromium process and a DevTools session on its first page."""

    def __init__(self, binary: str, profile: Path, width: int = 1400, height: int = 1100) -> None:
        import websocket  # websocket-client, from the dev group

        self.profile = profile
        profile.mkdir(parents=True, exist_ok=True)
        self.log = open(profile.parent / "chromium.log", "wb")
        self.process = subprocess.Popen(
            [binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}", "about:blank"],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        port = self._wait_port(profile / "DevToolsActivePort")
        pages = []
        deadline = time.monotonic() + 30
        while not pages:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5) as response:
                pages = [t for t in json.load(response) if t.get("type") == "page"]
            if not pages and time.monotonic() > deadline:
                raise TimeoutError("chromium opened no page")
        self.ws = websocket.create_connection(pages[0]["webSocketDebuggerUrl"], timeout=30, suppress_origin=True)
        self.ids = itertools.count(1)
        self.send("Page.enable")
        self.send("Runtime.enable")

    def _wait_port(self, path: Path, timeout: float = 30) -> int:
        deadline = time.monotonic() + timeout
        while True:
            if path.exists():
                text = path.read_text().split()
                if text:
                    return int(text[0])
            if self.process.poll() is not None:
                raise RuntimeError(f"chromium exited with {self.process.returncode}; see {self.log.name}")
            if time.monotonic() > deadline:
                raise TimeoutError("chromium did not open its debugging port")
            time.sleep(0.05)

    def send(self, method: str, **params: object) -> dict:
        """One DevTools command; returns its result (events that arrive meanwhile are dropped)."""
        ident = next(self.ids)
        self.ws.send(json.dumps({"id": ident, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == ident:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})

    def navigate(self, url: str) -> None:
        self.send("Page.navigate", url=url)

    def evaluate(self, expression: str) -> object:
        """The JSON value of a JavaScript expression in the page (promises are awaited)."""
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression!r} threw: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_until(self, expression: str, timeout: float = 20.0, what: str | None = None) -> object:
        """Poll a JavaScript expression until it is truthy (or fail after ``timeout`` seconds)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                value = self.evaluate(expression)
            except RuntimeError:
                value = None
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout}s waiting for {what or expression}")
            time.sleep(0.1)

    def screenshot(self, path: Path) -> Path:
        data = self.send("Page.captureScreenshot", format="png", captureBeyondViewport=True)["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        try:
            self.ws.close()
        except Exception:  # closing is best effort
            pass
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()
