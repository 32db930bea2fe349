"""The report page and the class dashboard as headless Chromium renders them: DOM, sorting, images, console."""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import MARKUP, SUBMISSIONS, Batch

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
REQUIRE_ENV = "PAPERLEET_REQUIRE_BROWSER"
FLAGS = (
    "--headless",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-dev-shm-usage",
    "--disable-extensions",
    "--mute-audio",
    "--window-size=1280,1000",
    "--remote-debugging-pipe",
)

pytestmark = pytest.mark.browser
# Puts the pipe ends on fds 3 and 4, where --remote-debugging-pipe expects them, then becomes Chromium.
TRAMPOLINE = """
import fcntl, os, sys
read_end, write_end = (fcntl.fcntl(int(fd), fcntl.F_DUPFD, 10) for fd in sys.argv[1:3])
os.dup2(read_end, 3)
os.dup2(write_end, 4)
os.execv(sys.argv[3], sys.argv[3:])
"""

PAYLOAD = MARKUP  # stdout, stderr and each check's message of `markup_page`'s report


class BrowserError(Exception):
    """Chromium did not start, answered with an error, or went quiet."""


class Chromium:
    """Headless Chromium driven over the DevTools protocol on a pipe (fd 3 in, fd 4 out), no extra packages."""

    def __init__(self, binary: str, profile: Path) -> None:
        to_browser, self._to_browser = os.pipe()
        self._from_browser, from_browser = os.pipe()
        flags = [*FLAGS, f"--user-data-dir={profile}"] + (["--no-sandbox"] if os.geteuid() == 0 else [])
        self._process = subprocess.Popen(
            [sys.executable, "-c", TRAMPOLINE, str(to_browser), str(from_browser), binary, *flags],
            pass_fds=(to_browser, from_browser),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        os.close(to_browser)
        os.close(from_browser)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict[str, Any]] = []
        try:
            self.call("Browser.getVersion", timeout=30)
        except BrowserError:
            self.close()
            raise

    def _receive(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            remaining = deadline - time.monotonic()
            ready = select.select([self._from_browser], [], [], max(0.0, remaining))[0] if remaining > 0 else []
            if not ready:
                raise BrowserError("Chromium did not answer in time")
            chunk = os.read(self._from_browser, 1 << 20)
            if not chunk:
                err = self._process.stderr.read().decode(errors="replace")[-2000:] if self._process.stderr else ""
                raise BrowserError(f"Chromium closed its DevTools pipe: {err}")
            self._buffer += chunk
        message, _, self._buffer = self._buffer.partition(b"\0")
        return json.loads(message)

    def call(
        self, method: str, params: dict[str, Any] | None = None, session: str | None = None, timeout: float = 30
    ) -> dict[str, Any]:
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._receive(deadline)
            if reply.get("id") != self._next_id:
                self.events.append(reply)
            elif "error" in reply:
                raise BrowserError(f"{method}: {reply['error']}")
            else:
                return reply.get("result", {})

    def wait_for(self, method: str, session: str, timeout: float = 30) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        seen = 0
        while True:
            for event in self.events[seen:]:
                if event.get("method") == method and event.get("sessionId") == session:
                    self.events.remove(event)
                    return event
            seen = len(self.events)
            self.events.append(self._receive(deadline))

    def open(self, path: Path) -> Tab:
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.call(f"{domain}.enable", session=session)
        tab = Tab(self, session)
        tab.navigate(path.resolve().as_uri())
        return tab

    def close(self) -> None:
        try:
            self.call("Browser.close", timeout=5)
        except (BrowserError, OSError):
            pass
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        for fd in (self._to_browser, self._from_browser):
            os.close(fd)
        if self._process.stderr is not None:
            self._process.stderr.close()


class Tab:
    """One page: evaluate JavaScript, click like a mouse, and collect what the console reported."""

    def __init__(self, browser: Chromium, session: str) -> None:
        self.browser, self.session = browser, session

    def navigate(self, url: str) -> None:
        self.browser.call("Page.navigate", {"url": url}, self.session)
        self.browser.wait_for("Page.loadEventFired", self.session)

    def js(self, expression: str) -> Any:
        reply = self.browser.call(
            "Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True}, self.session
        )
        if "exceptionDetails" in reply:
            raise BrowserError(f"{expression}: {reply['exceptionDetails']}")
        return reply["result"].get("value")

    def click(self, selector: str) -> None:
        """A real left click at the element's centre, so what covers it or ignores clicks is caught too."""
        box = self.js(
            f"(() => {{ const e = document.querySelector({json.dumps(selector)});"
            "e.scrollIntoView({block: 'center'}); const r = e.getBoundingClientRect();"
            "return {x: r.x + r.width / 2, y: r.y + r.height / 2}; })()"
        )
        for kind in ("mousePressed", "mouseReleased"):
            self.browser.call(
                "Input.dispatchMouseEvent",
                {"type": kind, "x": box["x"], "y": box["y"], "button": "left", "clickCount": 1},
                self.session,
            )

    def external_requests(self) -> list[str]:
        """Every URL this tab asked for that is neither a local file nor inline data."""
        return [
            event["params"]["request"]["url"]
            for event in self.browser.events
            if event.get("sessionId") == self.session
            and event.get("method") == "Network.requestWillBeSent"
            and not event["params"]["request"]["url"].startswith(("file:", "data:"))
        ]

    def errors(self) -> list[str]:
        """Console errors, uncaught exceptions and policy violations this tab reported."""
        found = []
        for event in self.browser.events:
            if event.get("sessionId") != self.session:
                continue
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.exceptionThrown":
                found.append(json.dumps(params["exceptionDetails"])[:500])
            elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                found.append(json.dumps(params.get("args"))[:500])
            elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
                found.append(params["entry"].get("text", "")[:500])
        return found


def find_chromium() -> str | None:
    explicit = os.environ.get("PAPERLEET_CHROMIUM")
    if explicit:
        return shutil.which(explicit)
    return next((path for name in BROWSERS if (path := shutil.which(name))), None)


def no_browser(reason: str) -> None:
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{reason}, and {REQUIRE_ENV}=1 requires the browser tests to run")
    pytest.skip(f"{reason}: install the Debian package `chromium` or set PAPERLEET_CHROMIUM to a Chromium binary")


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Chromium]:
    binary = find_chromium()
    if binary is None:
        no_browser("no headless Chromium found on PATH")
    assert binary is not None
    try:
        chromium = Chromium(binary, tmp_path_factory.mktemp("chromium-profile"))
    except (BrowserError, OSError) as exc:
        no_browser(f"{binary} did not start: {exc}")
        raise
    yield chromium
    chromium.close()


def scores(batch: Batch) -> dict[str, float]:
    return {report["submission"]: report["score"] for report in batch.reports.values()}


def test_dashboard_lists_every_submission_and_sorts(browser: Chromium, submission_batch: Batch) -> None:
    tab = browser.open(submission_batch.out / "index.html")
    rows = "Array.from(document.querySelectorAll('#submissions tbody tr')).map(r => r.dataset.submission)"
    shown = tab.js(rows)
    assert shown == sorted(p.name for p in SUBMISSIONS.glob("*.py"))
    score = scores(submission_batch)
    tab.click("#submissions thead th:nth-child(3)")  # score: ascending; the sort is stable, as Python's
    assert tab.js(rows) == sorted(shown, key=score.__getitem__)
    tab.click("#submissions thead th:nth-child(3)")  # again: descending
    assert tab.js(rows) == sorted(sorted(shown, key=score.__getitem__), key=score.__getitem__, reverse=True)
    assert (
        tab.js("document.querySelector('#submissions thead th:nth-child(3)').getAttribute('aria-sort')") == "descending"
    )
    tab.click("#submissions thead th:nth-child(1)")  # back to names, ascending
    assert tab.js(rows) == shown
    assert tab.js(
        "Array.from(document.querySelectorAll('svg.hist g')).reduce((n, g) => n + +g.dataset.count, 0)"
    ) == len(shown)
    assert tab.js("document.querySelectorAll('#failed-checks a').length") > 0
    assert tab.errors() == [] and tab.external_requests() == []


def test_dashboard_links_open_the_reports(browser: Chromium, submission_batch: Batch) -> None:
    tab = browser.open(submission_batch.out / "index.html")
    first = tab.js("document.querySelector('#submissions tbody tr').dataset.submission")
    tab.click("#submissions tbody tr:first-child a")
    tab.browser.wait_for("Page.loadEventFired", tab.session)
    assert tab.js("location.pathname").endswith(f"/{Path(first).stem}/report.html")
    assert tab.js("document.querySelector('h1').textContent") == first
    assert tab.errors() == []


def test_the_console_watch_sees_errors(browser: Chromium, tmp_path: Path) -> None:
    """Guards the other tests: a page that breaks its policy and throws must not pass as clean."""
    page = tmp_path / "broken.html"
    page.write_text(
        "<!DOCTYPE html><meta http-equiv='Content-Security-Policy' content=\"script-src 'none'\">"
        "<script>console.error('blocked')</script><img src='https://example.invalid/x.png'>"
    )
    tab = browser.open(page)
    assert tab.errors(), "a blocked inline script should be reported as a console error"


@pytest.mark.parametrize("stem", ["alice_loops", "frank_starter"])
def test_report_page_shows_every_check_and_loads_its_images(
    browser: Chromium, submission_batch: Batch, stem: str
) -> None:
    report = submission_batch.reports[stem]
    tab = browser.open(submission_batch.out / stem / "report.html")
    check_ids = tab.js("Array.from(document.querySelectorAll('table.checks tbody tr')).map(r => r.id)")
    assert check_ids == [f"check-{c['id']}" for t in report["tiers"] for c in t["checks"]]
    widths = tab.js("Array.from(document.images).map(i => i.complete ? i.naturalWidth : -1)")
    plots = tab.js("document.querySelectorAll('.pair').length")
    assert plots > 0 and len(widths) == plots + len(report["artifacts"]), widths
    assert all(width > 0 for width in widths), widths
    assert tab.js("document.querySelectorAll('.placeholder').length") == plots - len(report["artifacts"])
    assert tab.js("document.querySelector('pre.command').textContent") == report["command"]
    assert tab.errors() == [] and tab.external_requests() == []


def test_learner_markup_is_shown_as_text_and_never_runs(browser: Chromium, markup_page: Path) -> None:
    tab = browser.open(markup_page / "report.html")
    assert tab.js("window.injected") is None
    assert tab.js("document.querySelectorAll('script').length") == 0
    assert tab.js("Array.from(document.images).every(i => i.src.startsWith('data:image/png;base64,'))")
    text = tab.js("document.body.innerText")
    assert text.count(PAYLOAD) >= 3  # stdout, stderr and the check messages, all as plain text
    assert tab.errors() == [] and tab.external_requests() == []
