"""Rich terminal summaries of one report and of a class."""

from __future__ import annotations

from collections.abc import Callable, Iterator
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

from grader.model.spec import TIERS
from grader.model.verdicts import Verdict
from grader.outputs.learner_view import learner_message
from grader.outputs.report import Report
from grader.text import LINE_CHARS, clean_line

STYLE = {
    Verdict.PASS: "green",
    Verdict.FAIL: "red",
    Verdict.ERROR: "red",
    Verdict.TIMEOUT: "yellow",
    Verdict.CRASHED: "yellow",
    Verdict.SKIPPED: "dim",
    Verdict.JUDGE_ERROR: "bold magenta",
}


TERMINAL_MESSAGE_CHARS = 300  # a check's message on the terminal; report.json and report.html keep it whole


def _console() -> Console:
    # no highlighting: learner text (names, messages) is shown as it is, never restyled by what it looks like
    return Console(width=140, soft_wrap=False, highlight=False)


def _learner(text: str, limit: int = LINE_CHARS) -> Text:
    """Learner text as a rich Text: never parsed as markup, control characters spelled out, bounded."""
    return Text(clean_line(text, limit))


def diagnosis_lines(report: Report) -> list[str]:
    """The diagnosis in plain sentences, the misreading that explains most failing cases first."""
    lines = []
    for finding in report.diagnosis:
        owners = ", ".join(finding.owners)
        lines.append(
            f"{finding.id}: explains {finding.cases_explained} of {finding.cases_failing} failing cases "
            f"(charged in {owners}). {finding.explanation}"
        )
    return lines


def print_diagnosis(report: Report, console: Console) -> None:
    """What most likely went wrong, before the table of symptoms."""
    if not report.diagnosis:
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
    for tier in report.tiers:
        for check in tier.checks:
            # what a learner may read: report.json keeps the evidence of hidden cases and grading-seed series
            shown = "" if check.verdict == Verdict.PASS else learner_message(check)
            message = _learner(shown, TERMINAL_MESSAGE_CHARS)
            table.add_row(
                tier.tier,
                check.id,
                f"[{STYLE[check.verdict]}]{check.verdict}[/]",
                f"{check.score:g}/{check.max_score:g}",
                message,
            )
    console = _console()
    print_diagnosis(report, console)
    console.print(table)
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
