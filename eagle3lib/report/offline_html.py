"""Open a report the way a reader offline does: headless Chromium, network off, and what it saw as data.

`Browser` starts Chromium (``--headless --no-sandbox --disable-gpu --disable-background-networking``, every
host mapped to NOTFOUND and a proxy on a closed port, so nothing can leave the machine) and talks the DevTools
protocol over ``--remote-debugging-pipe`` (JSON messages on file descriptors 3 and 4: no port, no websocket).
`Browser.open(path)` returns a `PageView`: every request and which failed, console errors and uncaught
exceptions, each image and whether it decoded (``naturalWidth > 0``), the page's visible text, its heading
anchors and the static widget views. `Browser.screenshot` writes a PNG of the whole page.
`Browser(loopback=True).page(url)` drives a live page on 127.0.0.1 (a JupyterLab server): `Page.evaluate`,
`Page.wait_for` (a condition, bounded), `Page.key`.
Usage: ``with Browser() as b: view = b.open("reports/02_training_sample_replay.html"); view.problems()``.
"""
from __future__ import annotations

import base64
import contextlib
import dataclasses
import fcntl
import json
import os
import queue
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from ..errors import MissingFileError, ReportError
from .static_widgets import CSS_CLASS

NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
ENV_VAR = "EAGLE3LIB_CHROMIUM"          # a browser binary to use instead of the first of NAMES on PATH
OFFLINE_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--proxy-server=127.0.0.1:9", "--no-first-run",
                 "--no-default-browser-check", "--disable-extensions", "--disable-sync",
                 "--disable-component-update", "--disable-default-apps", "--mute-audio", "--hide-scrollbars")
OFFLINE = ("--host-resolver-rules=MAP * ~NOTFOUND", "--proxy-bypass-list=<-loopback>")  # 127.0.0.1 too: no
LOOPBACK = ("--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",)                # 127.0.0.1 only

_INSPECT = """(async () => {
  await Promise.all([...document.images].map(i => i.decode().catch(() => null)));
  const shown = e => !!(e.offsetWidth || e.offsetHeight || e.getClientRects().length);
  return {
    title: document.title,
    text: document.body ? document.body.innerText : "",
    images: [...document.images].map(i => ({src: i.currentSrc.slice(0, 300), width: i.naturalWidth,
                                            complete: i.complete, shown: shown(i)})),
    anchors: [...document.querySelectorAll("h1[id],h2[id],h3[id],h4[id],h5[id],h6[id]")].map(h => h.id),
    widgets: [...document.querySelectorAll(".%s")].map(w => ({shown: shown(w), text: w.innerText})),
    scripts: [...document.scripts].filter(s => s.src).map(s => s.src),
    height: Math.ceil(document.documentElement.scrollHeight),
    target: (document.querySelector(":target") || {}).id || null,
  };
})()""" % CSS_CLASS


@dataclasses.dataclass(frozen=True)
class PageView:
    """What the browser saw of one page."""
    url: str
    title: str
    text: str                       # document.body.innerText: what a reader sees, hidden elements left out
    requests: tuple[str, ...]       # every address the page asked for but its own file and data: URIs
    failed: tuple[str, ...]         # "address: net error" / "address: HTTP status"
    console_errors: tuple[str, ...]  # console.error / uncaught exceptions / browser log errors
    images: tuple[dict, ...]        # {src, width (naturalWidth), complete, shown}
    anchors: tuple[str, ...]        # ids of the headings
    widgets: tuple[dict, ...]       # the static widget views: {shown, text}
    scripts: tuple[str, ...]        # external <script src>
    height: int
    target: str | None = None       # the id of the element the URL's #fragment landed on (None: no such element)

    def undecoded_images(self) -> list[str]:
        """The images that did not decode (naturalWidth 0)."""
        return [i["src"] for i in self.images if not i["width"]]

    def problems(self) -> list[str]:
        """Everything that makes the page incomplete offline, as lines; empty for a good page."""
        return ([f"request failed: {f}" for f in self.failed] + [f"console: {c}" for c in self.console_errors]
                + [f"image not decoded: {s}" for s in self.undecoded_images()]
                + [f"loads from outside: {r}" for r in self.requests])


def find_chromium() -> str | None:
    """The browser binary: ``$EAGLE3LIB_CHROMIUM``, else the first of `NAMES` on PATH; None when absent."""
    given = os.environ.get(ENV_VAR)
    if given:
        return given if shutil.which(given) else None
    return next((p for p in map(shutil.which, NAMES) if p), None)


def _high_fd(fd: int) -> int:
    """A close-on-exec copy of `fd` above 9, so that moving it to 3 or 4 in the child clobbers nothing."""
    return fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)


class Browser:
    """A headless Chromium with the network off, driven over the DevTools pipe. Use as a context manager."""

    def __init__(self, binary: str | None = None, width: int = 1280, height: int = 900, timeout: float = 60.0,
                 loopback: bool = False):
        self.binary = binary or find_chromium()
        if not self.binary:
            raise MissingFileError("chromium", "no headless browser found", expected=f"one of {NAMES} on PATH or "
                                   f"${ENV_VAR}", found="none", cause="install it: apt-get install -y chromium")
        self.width, self.height, self.timeout, self.loopback = width, height, timeout, loopback
        self._next_id, self._events, self._replies = 0, [], {}
        self._inbox: queue.Queue = queue.Queue()
        self._proc = None

    # ------------------------------------------------------------------ process and pipe
    def __enter__(self) -> "Browser":
        self._profile = tempfile.mkdtemp(prefix="eagle3lib-chromium-")
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()
        a, b = _high_fd(to_chrome_r), _high_fd(from_chrome_w)

        def child_fds():  # the pipe's ends at fds 3 (commands in) and 4 (replies out); dup2 makes them inherited
            os.dup2(a, 3)
            os.dup2(b, 4)

        argv = [self.binary, *OFFLINE_FLAGS, *(LOOPBACK if self.loopback else OFFLINE), "--remote-debugging-pipe",
                f"--user-data-dir={self._profile}", f"--window-size={self.width},{self.height}", "about:blank"]
        try:
            self._proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.PIPE, preexec_fn=child_fds, close_fds=False)
        finally:
            for fd in (to_chrome_r, from_chrome_w, a, b):
                os.close(fd)
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._proc.stderr.read, daemon=True).start()   # drain, never block on it
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Stop the browser (politely, then by force) and remove its profile folder."""
        if self._proc is not None and self._proc.poll() is None:
            try:
                self._send("Browser.close", wait=False)
                self._proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self._proc.kill()
                self._proc.wait(timeout=10)
        fd, self._to_chrome = getattr(self, "_to_chrome", None), None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)
        shutil.rmtree(getattr(self, "_profile", ""), ignore_errors=True)

    def _read(self) -> None:
        buf = b""
        with os.fdopen(self._from_chrome, "rb", buffering=0) as f:
            while True:
                chunk = f.read(65536)
                if not chunk:
                    self._inbox.put(None)
                    return
                buf += chunk
                *messages, buf = buf.split(b"\0")
                for m in messages:
                    self._inbox.put(json.loads(m))

    def _pump(self, deadline: float) -> None:
        """Move one message (or none before `deadline`) from the pipe into replies / events."""
        try:
            msg = self._inbox.get(timeout=max(0.0, min(0.2, deadline - time.monotonic())))
        except queue.Empty:
            return
        if msg is None:
            raise ReportError("chromium", "the browser closed the DevTools pipe", expected="a running browser",
                              found=f"exit code {self._proc.poll()}", cause="it crashed or could not start")
        if "id" in msg:
            self._replies[msg["id"]] = msg
        else:
            self._events.append(msg)

    def _send(self, method: str, params: dict | None = None, session: str | None = None, wait: bool = True):
        self._next_id += 1
        msg = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._to_chrome, json.dumps(msg).encode() + b"\0")
        if not wait:
            return None
        deadline = time.monotonic() + self.timeout
        while self._next_id not in self._replies:
            if time.monotonic() > deadline:
                raise ReportError("chromium", f"no answer to {method} within {self.timeout:g} s",
                                  expected="a DevTools reply", found="none", cause="the page hangs")
            self._pump(deadline)
        reply = self._replies.pop(self._next_id)
        if "error" in reply:
            raise ReportError("chromium", f"{method} failed", expected="a result", found=reply["error"])
        return reply.get("result", {})

    def _wait_for(self, method: str, session: str, since: int) -> None:
        deadline = time.monotonic() + self.timeout
        while not any(e.get("method") == method and e.get("sessionId") == session for e in self._events[since:]):
            if time.monotonic() > deadline:
                raise ReportError("chromium", f"the page sent no {method} within {self.timeout:g} s",
                                  expected="a page that finishes loading", found="none")
            self._pump(deadline)

    # ------------------------------------------------------------------ pages
    def _load(self, path: str | os.PathLike, fragment: str = "", url: str | None = None) -> tuple[str, str, str, int]:
        if url is None:
            path = Path(path).resolve()
            if not path.is_file():
                raise MissingFileError(str(path), "report page not found", expected="an HTML file",
                                       found="nothing")
            url = path.as_uri() + (f"#{fragment}" if fragment else "")
        target = self._send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self._send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Network", "Runtime", "Log"):
            self._send(f"{domain}.enable", session=session)
        self._send("Emulation.setDeviceMetricsOverride", {"width": self.width, "height": self.height,
                                                          "deviceScaleFactor": 1, "mobile": False}, session)
        since = len(self._events)
        self._send("Page.navigate", {"url": url}, session)
        self._wait_for("Page.loadEventFired", session, since)
        return target, session, url, since

    def page(self, url: str) -> "Page":
        """A live page at `url` (loaded), to drive with `Page.evaluate` / `wait_for` / `key`; close it after."""
        target, session, _, _ = self._load(None, url=url)
        return Page(self, target, session)

    def open(self, path: str | os.PathLike, fragment: str = "") -> PageView:
        """Load a page (at ``#fragment``, as a link would), let its images decode, and report what a reader
        would see and what went wrong."""
        target, session, url, since = self._load(path, fragment)
        try:
            got = self._send("Runtime.evaluate", {"expression": _INSPECT, "awaitPromise": True,
                                                  "returnByValue": True}, session)
            if "exceptionDetails" in got:
                raise ReportError(url, "the inspection script failed in the page", found=got["exceptionDetails"])
            seen = got["result"]["value"]
            self._drain(0.3)
            return self._view(url, session, since, seen)
        finally:
            self._send("Target.closeTarget", {"targetId": target})

    def _drain(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self._pump(deadline)

    def _view(self, url: str, session: str, since: int, seen: dict) -> PageView:
        events = [e for e in self._events[since:] if e.get("sessionId") == session]
        asked, failed, errors = {}, [], []
        for e in events:
            p, m = e.get("params", {}), e.get("method")
            if m == "Network.requestWillBeSent":
                asked[p["requestId"]] = p["request"]["url"]
            elif m == "Network.loadingFailed":
                failed.append(f"{asked.get(p['requestId'], '?')[:120]}: {p.get('errorText', '?')}")
            elif m == "Network.responseReceived" and p["response"].get("status", 200) >= 400:
                failed.append(f"{p['response']['url'][:120]}: HTTP {p['response']['status']}")
            elif m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                errors.append(" ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", [])))
            elif m == "Runtime.exceptionThrown":
                d = p.get("exceptionDetails", {})
                errors.append(d.get("exception", {}).get("description") or d.get("text", "exception"))
            elif m == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                errors.append(p["entry"].get("text", ""))
        own = url.split("#", 1)[0]
        requests = tuple(u for u in asked.values() if not u.startswith("data:") and u.split("#", 1)[0] != own)
        return PageView(url=url, title=seen["title"], text=seen["text"], requests=requests, failed=tuple(failed),
                        console_errors=tuple(errors), images=tuple(seen["images"]), anchors=tuple(seen["anchors"]),
                        widgets=tuple(seen["widgets"]), scripts=tuple(seen["scripts"]), height=seen["height"],
                        target=seen["target"])

    def screenshot(self, path: str | os.PathLike, out: str | os.PathLike, max_height: int = 6000) -> Path:
        """A PNG of the whole page (up to `max_height` CSS pixels tall) written to `out`."""
        target, session, _, _ = self._load(path)
        try:
            got = self._send("Runtime.evaluate", {"expression": _INSPECT, "awaitPromise": True,
                                                  "returnByValue": True}, session)
            height = min(int(got["result"]["value"]["height"]), max_height)
            shot = self._send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True, "clip": {
                "x": 0, "y": 0, "width": self.width, "height": height, "scale": 1}}, session)
        finally:
            self._send("Target.closeTarget", {"targetId": target})
        out = Path(out)
        out.write_bytes(base64.b64decode(shot["data"]))
        return out


class Page:
    """One live tab of a `Browser`."""

    def __init__(self, browser: Browser, target: str, session: str):
        self.browser, self.target, self.session = browser, target, session

    def evaluate(self, expression: str):
        """The JSON value of a JavaScript expression in the page (promises awaited)."""
        got = self.browser._send("Runtime.evaluate", {"expression": expression, "awaitPromise": True,
                                                      "returnByValue": True}, self.session)
        if "exceptionDetails" in got:
            d = got["exceptionDetails"]
            raise ReportError("page script", "a script raised in the page", expected="a value",
                              found=d.get("exception", {}).get("description") or d.get("text"))
        return got.get("result", {}).get("value")

    def wait_for(self, expression: str, timeout: float, what: str, every: float = 0.25):
        """Poll `expression` until it is truthy (returns its value); ReportError after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise ReportError("live page", f"{what}: not within {timeout:g} s", expected=what,
                                  found=repr(value))
            self.browser._drain(every)

    def key(self, key: str, code: str | None = None, key_code: int | None = None) -> None:
        """Press and release one key in the focused element ("ArrowRight", code "ArrowRight", keyCode 39)."""
        params = {"key": key, "code": code or key, **({"windowsVirtualKeyCode": key_code} if key_code else {})}
        for kind in ("keyDown", "keyUp"):
            self.browser._send("Input.dispatchKeyEvent", {"type": kind, **params}, self.session)

    def close(self) -> None:
        self.browser._send("Target.closeTarget", {"targetId": self.target})
