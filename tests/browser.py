"""Test-only: open a report the way a reader offline does, in the system's headless Chromium driven by Playwright.

`find_chromium()` is the browser binary (``$EAGLE3LIB_CHROMIUM``, else the first of `NAMES` on PATH); Playwright
launches it through ``executable_path`` (it never downloads a browser of its own). `skip_reason()` says why the
browser tests cannot run here (no Playwright, no Chromium), or None.

`Browser()` has the network off three ways: the context is offline, every host name resolves to NOTFOUND and
any proxied request goes to a closed port, so nothing can leave the machine. `Browser.open(path, fragment)`
returns a `PageView`: every request and which failed, console errors and uncaught exceptions, each image and
whether it decoded (``naturalWidth > 0``), the page's visible text, its heading anchors and the static widget views.
`Browser(loopback=True).page(url)` is a live Playwright page on 127.0.0.1 (a JupyterLab server), nothing else.
`Browser(width=1400).layout(path, screenshot)` says how a page lays out in that window (horizontal overflow, the
order of its headings, its folded parts) and screenshots it.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import os
import shutil
from pathlib import Path

from eagle3lib.report.static_widgets import CSS_CLASS

NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
ENV_VAR = "EAGLE3LIB_CHROMIUM"          # a browser binary to use instead of the first of NAMES on PATH
OFFLINE_ARGS = ("--host-resolver-rules=MAP * ~NOTFOUND", "--proxy-server=127.0.0.1:9",
                "--proxy-bypass-list=<-loopback>", "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--no-first-run", "--no-default-browser-check")   # 127.0.0.1 too: no
LOOPBACK_ARGS = ("--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1", "--disable-background-networking",
                 "--no-first-run", "--no-default-browser-check")                     # 127.0.0.1 only

_INSPECT = """async () => {
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
}""" % CSS_CLASS


@dataclasses.dataclass(frozen=True)
class PageView:
    """What the browser saw of one page."""
    url: str
    title: str
    text: str                       # document.body.innerText: what a reader sees, hidden elements left out
    requests: tuple[str, ...]       # every address the page asked for but its own file and data: URIs
    failed: tuple[str, ...]         # "address: net error" / "address: HTTP status"
    console_errors: tuple[str, ...]  # console.error / console.assert / uncaught exceptions
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
        return shutil.which(given)
    return next((p for p in map(shutil.which, NAMES) if p), None)


def skip_reason() -> str | None:
    """Why the browser tests cannot run here, or None when they can."""
    if importlib.util.find_spec("playwright") is None:
        return "playwright is not installed (pip install -e '.[dev]')"
    if find_chromium() is None:
        given = os.environ.get(ENV_VAR)
        where = f"${ENV_VAR}={given!r} is no executable" if given else \
            f"none of {', '.join(NAMES)} on PATH and ${ENV_VAR} unset"
        return f"no Chromium binary: {where} (apt-get install -y chromium; .ci/run installs it when apt is available)"
    return None


class Browser:
    """The system Chromium under Playwright, headless, network off (or loopback only). A context manager."""

    def __init__(self, width: int = 1280, height: int = 900, timeout: float = 60.0, loopback: bool = False):
        self.width, self.height, self.timeout, self.loopback = width, height, timeout, loopback

    def __enter__(self) -> "Browser":
        from playwright.sync_api import sync_playwright

        self._pw = sync_playwright().start()
        try:
            self._browser = self._pw.chromium.launch(
                executable_path=find_chromium(), headless=True, timeout=self.timeout * 1000,
                args=list(LOOPBACK_ARGS if self.loopback else OFFLINE_ARGS))
            self._context = self._browser.new_context(offline=not self.loopback,
                                                      viewport={"width": self.width, "height": self.height})
            self._context.set_default_timeout(self.timeout * 1000)
        except BaseException:
            self._pw.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self._browser.close()
        self._pw.stop()

    def page(self, url: str):
        """A live Playwright page at `url`, loaded; close it after."""
        page = self._context.new_page()
        page.goto(url)
        return page

    def layout(self, path: str | os.PathLike, screenshot: str | os.PathLike | None = None,
               width: int | None = None) -> dict:
        """How a page lays out in this window (or one `width` px wide): its scroll width against the window's
        (``scroll_width`` > ``client_width`` is a horizontal scrollbar), its ``h2`` headings top to bottom, each
        ``<details>`` (id, open, summary), the visible text; a full-page screenshot to `screenshot` when given."""
        page = self._context.new_page()
        try:
            if width:
                page.set_viewport_size({"width": width, "height": self.height})
            page.goto(Path(path).resolve().as_uri(), wait_until="load")
            got = page.evaluate("""() => ({
              scroll_width: document.documentElement.scrollWidth, client_width: document.documentElement.clientWidth,
              headings: [...document.querySelectorAll("h2")].sort((a, b) => a.getBoundingClientRect().top -
                         b.getBoundingClientRect().top).map(h => h.innerText),
              details: [...document.querySelectorAll("details")].map(d => ({id: d.id, open: d.open,
                         summary: (d.querySelector("summary") || {}).innerText || ""})),
              text: document.body.innerText})""")
            if screenshot is not None:
                page.screenshot(path=str(screenshot), full_page=True)
        finally:
            page.close()
        return got

    def open(self, path: str | os.PathLike, fragment: str = "") -> PageView:
        """Load a page (at ``#fragment``, as a link would), let its images decode, and report what a reader
        would see and what went wrong."""
        path = Path(path).resolve()
        assert path.is_file(), f"report page not found: {path}"
        url = path.as_uri() + (f"#{fragment}" if fragment else "")
        asked, failed, errors = [], [], []

        def on_response(response):
            if response.status >= 400:
                failed.append(f"{response.url[:120]}: HTTP {response.status}")

        def on_console(message):
            if message.type in ("error", "assert"):
                errors.append(message.text)

        page = self._context.new_page()
        page.on("request", lambda request: asked.append(request.url))
        page.on("requestfailed", lambda request: failed.append(f"{request.url[:120]}: {request.failure}"))
        page.on("response", on_response)
        page.on("console", on_console)
        page.on("pageerror", lambda error: errors.append(str(error)))
        try:
            page.goto(url, wait_until="load")
            seen = page.evaluate(_INSPECT)
            page.wait_for_load_state("networkidle")    # every request answered or failed before we read them
        finally:
            page.close()
        own = url.split("#", 1)[0]
        requests = tuple(u for u in asked if not u.startswith("data:") and u.split("#", 1)[0] != own)
        return PageView(url=url, title=seen["title"], text=seen["text"], requests=requests, failed=tuple(failed),
                        console_errors=tuple(errors), images=tuple(seen["images"]), anchors=tuple(seen["anchors"]),
                        widgets=tuple(seen["widgets"]), scripts=tuple(seen["scripts"]), height=seen["height"],
                        target=seen["target"])
