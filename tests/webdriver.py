"""A small W3C WebDriver client (standard library only) for Debian's chromium and
chromedriver: enough to sign in through a form, read the page's numbers, and take
screenshots at a window size. `Browser.start()` returns None where either is missing, so
a test can skip cleanly."""

from __future__ import annotations

import base64
import json
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
ELEMENT = "element-6066-11e4-a52e-4f735466cecf"
#: as the machine's notes say: without the background-networking flags Chromium keeps
#: trying the closed network
ARGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
        "--disable-dev-shm-usage"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Browser:
    def __init__(self, driver: subprocess.Popen, port: int, session: str, profile: str):
        self.driver, self.port, self.session, self.profile = driver, port, session, profile

    @classmethod
    def start(cls) -> Browser | None:
        if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
            return None
        port = _free_port()
        driver = subprocess.Popen([CHROMEDRIVER, f"--port={port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        profile = tempfile.mkdtemp(prefix="batchd-chrome-")
        deadline = time.time() + 20
        while True:
            try:
                _call(port, "GET", "/status")
                break
            except OSError:
                if time.time() > deadline:
                    driver.kill()
                    raise
                time.sleep(0.2)
        caps = {"capabilities": {"alwaysMatch": {"browserName": "chrome", "goog:chromeOptions": {
            "binary": CHROMIUM, "args": [*ARGS, f"--user-data-dir={profile}"]}}}}
        reply = _call(port, "POST", "/session", caps)
        return cls(driver, port, reply["sessionId"], profile)

    def _s(self, method: str, path: str, body: Any = None) -> Any:
        return _call(self.port, method, f"/session/{self.session}{path}", body)

    def get(self, url: str) -> None:
        self._s("POST", "/url", {"url": url})

    def url(self) -> str:
        return str(self._s("GET", "/url"))

    def size(self, width: int, height: int) -> None:
        self._s("POST", "/window/rect", {"width": width, "height": height})

    def run(self, script: str, *args: Any) -> Any:
        return self._s("POST", "/execute/sync", {"script": script, "args": list(args)})

    def find(self, css: str) -> str:
        found = self._s("POST", "/element", {"using": "css selector", "value": css})
        if not isinstance(found, dict) or ELEMENT not in found:
            raise RuntimeError(f"no element {css} on {self.url()}: {found}; the page: "
                               f"{self.run('return document.documentElement.outerHTML;')[:800]}")
        return str(found[ELEMENT])

    def type(self, css: str, text: str) -> None:
        self._s("POST", f"/element/{self.find(css)}/value", {"text": text})

    def click(self, css: str) -> None:
        self._s("POST", f"/element/{self.find(css)}/click", {})

    def screenshot(self, path: Path) -> bytes:
        data = base64.b64decode(self._s("GET", "/screenshot"))
        path.write_bytes(data)
        return data

    def full_screenshot(self, path: Path, width: int, min_height: int) -> bytes:
        """The whole page at `width`: the window grown to the page's height first."""
        height = int(self.run("return Math.max(document.documentElement.scrollHeight, arguments[0]);", min_height))
        self.size(width, min(height, 8000))
        return self.screenshot(path)

    def close(self) -> None:
        try:
            _call(self.port, "DELETE", f"/session/{self.session}")
        except OSError:
            pass
        self.driver.terminate()
        try:
            self.driver.wait(10)
        except subprocess.TimeoutExpired:
            self.driver.kill()
        shutil.rmtree(self.profile, ignore_errors=True)


def _call(port: int, method: str, path: str, body: Any = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return json.loads(r.read() or b"{}").get("value")
    except urllib.error.HTTPError as e:
        raise RuntimeError(f"webdriver {method} {path}: {e.read()[:500]!r}") from None
