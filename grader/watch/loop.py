"""Re-grade one file each time it is saved: notice the save, grade a snapshot, print what changed.

The loop knows nothing of how a file is graded: `watch` (the grader's, `grader.watch.warm`) and the learner pack's
`check --watch` (`grader.course.pack_check`) hand it a `Judge` that grades a snapshot of the file, shows its verdicts
once the loop says they may be published, then writes its outputs. A save is noticed by polling the file's
type, modification time, size and content hash, never following a link; its grade starts at once, on the bytes
seen (read once by `intake.read_submission`, or its refusal of a link or a FIFO), and is published only once the
file has stayed unchanged for the debounce time and still reads the same, so an editor's half-written file is
never reported as the file's grade unless it stays that way. SIGINT and SIGTERM
end the loop with exit code 0, after the judge's `close` has ended every process it started.
"""

from __future__ import annotations

import signal
import stat
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from types import FrameType
from typing import Protocol

from rich.console import Console
from rich.table import Table
from rich.text import Text

from grader.confine.intake import Submission, read_submission
from grader.model.report import Report
from grader.model.verdicts import ExitCode, Verdict
from grader.outputs.learner_view import learner_message
from grader.outputs.terminal import STYLE, fit_message, full_messages
from grader.text import clean_line

POLL_S = 0.04  # how often the file is looked at: an lstat and, for a regular file of sane size, a hash of its bytes
DEBOUNCE_S = 0.2  # how long a save must stay unchanged before its grade is published
HASHED_BYTES = 1 << 22  # a larger file is compared by modification time and size alone
MESSAGE_CHARS = 160  # a check's message in the watch table: one line; a longer one is printed whole below it


class Stopped(BaseException):
    """SIGINT or SIGTERM arrived: leave whatever is running, let its cleanup run, and end the loop."""


@dataclass(frozen=True)
class Fingerprint:
    """What a save changes: the file's type, modification time, size and (for a regular file of sane size)
    content hash, all of the name itself: a link is looked at, never followed, and a FIFO never read."""

    mtime_ns: int
    size: int
    digest: str
    mode: int = stat.S_IFREG


def fingerprint(path: Path) -> Fingerprint | None:
    """The file's fingerprint now; None while it is missing or unreadable (an editor replacing it)."""
    try:
        info = path.lstat()
    except OSError:
        return None
    regular = stat.S_ISREG(info.st_mode) and info.st_size <= HASHED_BYTES
    digest = read_submission(path).sha256 if regular else ""
    return Fingerprint(info.st_mtime_ns, info.st_size, digest, stat.S_IFMT(info.st_mode))


@dataclass
class Snapshot:
    """The file as it was when a save was noticed: its bytes, read once, or why it is refused."""

    source: Path
    seen: Fingerprint
    noticed: float  # time.monotonic() when this version was first seen
    submission: Submission = field(init=False)

    def __post_init__(self) -> None:
        self.submission = read_submission(self.source)

    def matches(self) -> bool:
        """Whether the file still reads as it did, so its grade is the file's grade."""
        return read_submission(self.source) == self.submission

    def discard(self) -> None:
        """Nothing lies on disk: the bytes are held in memory."""


class SaveWatcher:
    """Notices each new version of one file."""

    def __init__(self, path: Path, poll_s: float = POLL_S) -> None:
        self.path, self.poll_s = path, poll_s
        self.graded: Fingerprint | None = None  # the version whose grade was published last

    def next_version(self) -> Snapshot:
        """Wait until the file differs from the version graded last; return a snapshot of it."""
        missing_said = False
        while True:
            seen = fingerprint(self.path)
            if seen is not None and seen != self.graded:
                return Snapshot(self.path, seen, time.monotonic())  # gone since the look: refused, then looked at again
            elif seen is None and not missing_said:
                print(f"{clean_line(self.path, 1024)} is missing; waiting for it to be saved again", flush=True)
                missing_said = True
            time.sleep(self.poll_s)

    def settled(self, snapshot: Snapshot, debounce_s: float = DEBOUNCE_S) -> bool:
        """Wait out what is left of the debounce time; True when the file still holds the snapshot's bytes then.

        The file counts as unchanged since its modification time or since the save was noticed, whichever is
        earlier, so a grade that took longer than the debounce time is published at once."""
        while True:
            if fingerprint(self.path) != snapshot.seen:
                return False
            quiet = max(time.monotonic() - snapshot.noticed, time.time() - snapshot.seen.mtime_ns / 1e9)
            if quiet >= debounce_s:
                return snapshot.matches()
            time.sleep(min(self.poll_s, debounce_s - quiet))


# ---------------------------------------------------------------------------------------------- what is shown


@dataclass(frozen=True)
class Row:
    tier: str
    check: str
    verdict: Verdict
    score: float
    max_score: float
    message: str


@dataclass(frozen=True)
class Outcome:
    """One published grade, once its outputs are written."""

    report: Report
    report_path: Path
    note: str = ""  # said beside the report's path (the learner pack: what its public checks leave out)


def rows_of(report: Report) -> list[Row]:
    return [
        # the learner's sentence: report.json keeps the evidence of hidden cases and grading-seed series
        Row(tier.tier, check.id, Verdict(check.verdict), check.score, check.max_score, learner_message(check))
        for tier in report.tiers
        for check in tier.checks
    ]


def render(report: Report, before: dict[str, Verdict], seconds: float) -> list[Text | Table]:
    """The diagnosis, then a table of the checks that do not pass or whose verdict changed, then a count of the
    others: what a learner reads after a save. A changed verdict is highlighted and says what it was."""
    tiers = "  ".join(f"{t.tier} {t.score:g}/{t.max_score:g}" for t in report.tiers)
    head = Text(f"{time.strftime('%H:%M:%S')}  {clean_line(report.submission)}  ", style="bold")
    head.append(f"{report.score:g}/{report.max_score:g} ({report.status})  ", style="bold")
    head.append(f"{tiers}  ·  graded in {seconds:.2f} s", style="dim")
    shown: list[Text | Table] = [head]
    for entry in report.diagnosis:
        line = Text("likely misreading: ", style="bold yellow")
        line.append(f"{clean_line(entry.explanation, 600)} ")
        line.append(
            f"({entry.cases_explained} of {entry.cases_failing} failing cases; charged in {', '.join(entry.owners)})",
            style="dim",
        )
        if entry.convention:
            line.append(f" A library's convention: {clean_line(entry.convention, 600)}", style="dim")
        shown.append(line)
        shown.extend(
            Text(f"  left unexplained in {clean_line(u.describe(), 600)}", style="dim") for u in entry.unexplained
        )
    if report.message:
        shown.append(Text(clean_line(report.message, 600), style="red"))
    table = Table(show_header=True, box=None, pad_edge=False)
    for column in ("tier", "check", "verdict", "score", "message"):
        table.add_column(column, overflow="fold", max_width=MESSAGE_CHARS if column == "message" else None)
    quiet, not_run = 0, 0
    shortened: list[tuple[str, str]] = []
    for row in rows_of(report):
        was = before.get(row.check)
        # a check that did not run before (the file could not be imported) has no verdict to change from
        changed = was not in (None, Verdict.SKIPPED) and was != row.verdict
        if row.verdict == Verdict.PASS and not changed:
            quiet += 1
            continue
        if row.verdict == Verdict.SKIPPED and row.message == report.message:
            not_run += 1  # every check skipped for the one reason printed above: one line says so
            continue
        verdict = Text(str(row.verdict), style=STYLE[row.verdict])
        if changed:
            verdict.append(f" (was {was})", style="bold reverse")
        table.add_row(
            row.tier,
            Text(row.check, style="bold reverse" if changed else ""),
            verdict,
            f"{row.score:g}/{row.max_score:g}",
            Text("" if row.verdict == Verdict.PASS else fit_message(row.message, MESSAGE_CHARS)),
        )
        if row.verdict != Verdict.PASS:
            shortened.append((row.check, row.message))
    if table.row_count:
        shown.append(table)
        shown.extend(full_messages(shortened, MESSAGE_CHARS))
    rows = len(rows_of(report))
    if not_run:
        shown.append(Text(f"{not_run} of {rows} checks not run, for the reason above", style="dim"))
    elif all(row.verdict == Verdict.PASS for row in rows_of(report)):
        shown.append(Text(f"all {rows} checks pass", style="green"))
    else:
        shown.append(Text(f"{quiet} of {rows} checks pass, unchanged", style="dim"))
    return shown


def footer(outcome: Outcome, seconds: float) -> Text:
    return Text(
        f"report: {clean_line(outcome.report_path, 1024)}, written {seconds:.2f} s after the save was seen"
        + (f"  ·  {outcome.note}" if outcome.note else ""),
        style="dim",
    )


# ---------------------------------------------------------------------------------------------- the loop


@contextmanager
def stop_on_signals() -> Iterator[None]:
    """SIGINT and SIGTERM raise Stopped in the main thread, once: a second signal does not cut the cleanup short."""

    def stop(signum: int, frame: FrameType | None) -> None:
        for number in (signal.SIGINT, signal.SIGTERM):
            signal.signal(number, signal.SIG_IGN)
        raise Stopped(signal.Signals(signum).name)

    previous = {number: signal.signal(number, stop) for number in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


class Judge(Protocol):
    """What the loop needs of whoever grades: warm up, grade a snapshot, end every process it started."""

    def start(self) -> None: ...

    def grade(
        self,
        snapshot: Snapshot,
        publish: Callable[[], bool],
        show: Callable[[Report], None],
    ) -> Outcome | None:
        """Grade the snapshot; only if `publish()` is true once the grade is done, `show` its report (the first
        answer, before plots are waited for), write its outputs and return its Outcome; None when the file
        changed meanwhile (its next version is graded next)."""

    def close(self) -> None: ...


class Screen:
    """What the loop prints: each published grade against the verdicts of the one before."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.before: dict[str, Verdict] = {}
        self.shown: Report | None = None

    def show(self, report: Report, since: float) -> None:
        for part in render(report, self.before, time.monotonic() - since):
            self.console.print(part)
        self.shown = report

    def done(self, outcome: Outcome, since: float) -> None:
        if self.shown is not outcome.report:  # the judge failed on this grade: its report says so
            self.show(outcome.report, since)
        self.console.print(footer(outcome, time.monotonic() - since))
        self.before = {row.check: row.verdict for row in rows_of(outcome.report)}
        self.shown = None


def watch(
    file: Path, judge: Judge, debounce_s: float = DEBOUNCE_S, poll_s: float = POLL_S, console: Console | None = None
) -> ExitCode:
    """Grade `file` now and after every save until SIGINT or SIGTERM; always close the judge, then return 0."""
    screen = Screen(console or Console(width=140, soft_wrap=False, highlight=False))
    watcher = SaveWatcher(file, poll_s)
    with stop_on_signals():
        try:
            screen.console.print(
                Text(f"watching {clean_line(file, 1024)}: every save is graded; Ctrl-C ends", style="dim")
            )
            judge.start()
            while True:
                snapshot = watcher.next_version()
                try:
                    outcome = judge.grade(
                        snapshot,
                        partial(watcher.settled, snapshot, debounce_s),
                        partial(screen.show, since=snapshot.noticed),
                    )
                finally:
                    snapshot.discard()
                if outcome is not None:
                    watcher.graded = snapshot.seen
                    screen.done(outcome, snapshot.noticed)
        except Stopped:
            pass
        finally:
            judge.close()
    screen.console.print(Text("stopped watching", style="dim"))
    return ExitCode.OK
