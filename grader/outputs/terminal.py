"""Rich terminal summaries of one report and of a class."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text

from grader.model.report import Report
from grader.model.spec import TIERS
from grader.model.verdicts import Verdict
from grader.outputs.learner_view import learner_message
from grader.text import LINE_CHARS, MESSAGE_CHARS, clean_line

STYLE = {
    Verdict.PASS: "green",
    Verdict.FAIL: "red",
    Verdict.ERROR: "red",
    Verdict.TIMEOUT: "yellow",
    Verdict.CRASHED: "yellow",
    Verdict.SKIPPED: "dim",
    Verdict.JUDGE_ERROR: "bold magenta",
}


TERMINAL_MESSAGE_CHARS = 300  # a check's message in a table cell; a longer one is printed whole below the table

# The parts of a check's message, in the order they are dropped to fit a table cell: the case's label, the place
# of the first differing element, then everything but the head count and "expected X, got Y".
_CASE_LABEL = re.compile(r"First failure, case '.*?': ")
_PLACE = re.compile(r"(?<=: )[^:;]*?: (?=expected )")
_EVIDENCE = re.compile(r"expected .+?, got .+?(?= \(|; |\. |$)")
_HEAD = re.compile(r"^\d+/\d+ cases passed\. ")


def _console() -> Console:
    # no highlighting: learner text (names, messages) is shown as it is, never restyled by what it looks like
    return Console(width=140, soft_wrap=False, highlight=False)


def _learner(text: str, limit: int = LINE_CHARS) -> Text:
    """Learner text as a rich Text: never parsed as markup, control characters spelled out, bounded."""
    return Text(clean_line(text, limit))


def fit_message(message: str, limit: int = TERMINAL_MESSAGE_CHARS) -> str:
    """A check's message in at most `limit` characters, keeping "expected X, got Y" to the last: the case's label
    goes first, then the place of the element, then every other clause; only then is the evidence itself cut."""
    text = clean_line(message, MESSAGE_CHARS)
    if len(text) <= limit:
        return text
    unlabelled = _CASE_LABEL.sub("First failure: ", text, count=1)
    candidates = [unlabelled, _PLACE.sub("", unlabelled, count=1)]
    evidence = _EVIDENCE.search(text)
    if evidence is not None:
        head = _HEAD.match(text)
        candidates.append(f"{head.group(0) if head else ''}first failure: {evidence.group(0)} (more below)")
        candidates.append(evidence.group(0))
    for candidate in candidates:
        if len(candidate) <= limit:
            return candidate
    return clean_line(candidates[-1], limit)


def full_messages(rows: Iterable[tuple[str, str]], limit: int = TERMINAL_MESSAGE_CHARS) -> list[Text]:
    """The whole message of each (check, message) whose table cell had to shorten it, to print below the table."""
    return [
        Text.assemble((f"{check}: ", "bold"), clean_line(message, MESSAGE_CHARS))
        for check, message in rows
        if len(clean_line(message, MESSAGE_CHARS)) > limit
    ]


def diagnosis_lines(report: Report) -> list[str]:
    """The diagnosis in plain sentences, the misreading that explains most failing cases first, each with the
    failing cases it leaves unexplained; then those no misreading explains, and what separates them."""
    lines = []
    for finding in report.diagnosis:
        owners = ", ".join(finding.owners)
        convention = f" A library's convention: {finding.convention}" if finding.convention else ""
        lines.append(
            f"{finding.id}: explains {finding.cases_explained} of {finding.cases_failing} failing cases "
            f"(charged in {owners}). {finding.explanation}{convention}"
        )
        lines.extend(f"    left unexplained in {entry.describe()}" for entry in finding.unexplained)
    if report.diagnosis:
        lines.extend(f"explained by no misreading: {entry.describe()}" for entry in report.unexplained)
    return lines


def localisation_lines(report: Report) -> list[str]:
    """With no misreading diagnosed, the checks whose failing cases share a feature no passing case has."""
    return [entry.describe() for entry in report.unexplained if entry.features]


def print_diagnosis(report: Report, console: Console) -> None:
    """What most likely went wrong, before the table of symptoms."""
    if not report.diagnosis:
        located = localisation_lines(report)
        if located:
            console.print(Text("No known misreading explains the failures; where they lie:", style="bold"))
            for line in located:
                console.print(Text(f"  - {line}"))
        return
    console.print(Text("Diagnosis, the likeliest misreading first:", style="bold"))
    for line in diagnosis_lines(report):
        console.print(Text(f"  - {line}"))
    if report.follow_through:
        console.print(
            Text(
                "  Cases these misreadings explain earn their points in the checks that do not own them "
                "(follow-through); the owner checks charge them.",
                style="dim",
            )
        )


def print_report(report: Report, path: Path) -> None:
    table = Table(
        title=Text(
            f"{report.problem} · {clean_line(report.submission)} · "
            f"{report.score:g}/{report.max_score:g} ({report.status})"
        ),
        show_lines=False,
    )
    for column in ("tier", "check", "verdict", "score", "message"):
        table.add_column(column, overflow="fold", max_width=70 if column == "message" else None)
    # a check skipped for the reason printed below the table (an import that failed) says so once, there
    said_below = {
        c.id for c in report.checks() if c.verdict == Verdict.SKIPPED and report.message and c.message == report.message
    }
    failing = [
        (c.id, learner_message(c)) for c in report.checks() if c.verdict != Verdict.PASS and c.id not in said_below
    ]
    for tier in report.tiers:
        for check in tier.checks:
            # what a learner may read: report.json keeps the evidence of hidden cases and grading-seed series
            message = "" if check.verdict == Verdict.PASS else fit_message(learner_message(check))
            message = "not run: see below" if check.id in said_below else message
            table.add_row(
                tier.tier,
                check.id,
                f"[{STYLE[check.verdict]}]{check.verdict}[/]",
                f"{check.score:g}/{check.max_score:g}",
                Text(message),
            )
    console = _console()
    print_diagnosis(report, console)
    console.print(table)
    for line in full_messages(failing):
        console.print(line)
    if report.message:
        console.print(_learner(report.message, TERMINAL_MESSAGE_CHARS), style="red")
    isolation = report.isolation.level if report.isolation else "none"
    console.print(Text(f"report: {clean_line(path, 1024)}  ·  isolation: {isolation}"))


def print_class_table(reports: list[Report], summary: Path, dashboard: Path | None = None) -> None:
    table = Table(title=Text(f"{reports[0].problem}: {len(reports)} submissions"))
    for column in ("submission", "status", "score", *TIERS):
        table.add_column(column)
    for r in sorted(reports, key=lambda r: r.submission):
        tiers = {t.tier: t for t in r.tiers}
        table.add_row(
            _learner(r.submission),
            str(r.status),
            f"{r.score:g}/{r.max_score:g}",
            *(f"{tiers[t].score:g}" if t in tiers else "-" for t in TIERS),
        )
    console = _console()
    console.print(table)
    console.print(Text(f"summary: {clean_line(summary, 1024)}"))
    if dashboard:
        console.print(Text(f"dashboard: {clean_line(dashboard, 1024)}"))


@contextmanager
def grading_progress(total: int) -> Iterator[Callable[[Report], None]]:
    """A progress bar for grade-all (done/total, elapsed, ETA); the callback is safe to call from any thread."""
    columns = (
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("elapsed"),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=_console()) as progress:
        task = progress.add_task("grading", total=total)

        def advance(report: Report) -> None:
            progress.update(task, advance=1, description=f"graded {escape(clean_line(report.submission, 60))}")

        yield advance
