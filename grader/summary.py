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

from .report import Report
from .verdicts import Verdict

STYLE = {
    Verdict.PASS: "green", Verdict.FAIL: "red", Verdict.ERROR: "red", Verdict.TIMEOUT: "yellow",
    Verdict.CRASHED: "yellow", Verdict.SKIPPED: "dim", Verdict.JUDGE_ERROR: "bold magenta",
}


def _console() -> Console:
    return Console(width=140, soft_wrap=False)


def print_report(report: Report, path: Path) -> None:
    table = Table(title=f"{report.problem} · {escape(report.submission)} · {report.score:g}/{report.max_score:g} "
                        f"({report.status})", show_lines=False)
    for column in ("tier", "check", "verdict", "score", "message"):
        table.add_column(column, overflow="fold", max_width=70 if column == "message" else None)
    for tier in report.tiers:
        for check in tier.checks:
            message = "" if check.verdict == Verdict.PASS else escape(check.message)  # learner text, not markup
            table.add_row(tier.tier, check.id, f"[{STYLE[check.verdict]}]{check.verdict}[/]",
                          f"{check.score:g}/{check.max_score:g}", message)
    console = _console()
    console.print(table)
    if report.message:
        console.print(f"[red]{escape(report.message)}[/]")
    console.print(f"report: {path}  ·  isolation: {report.isolation.level if report.isolation else 'none'}")


def print_class_table(reports: list[Report], summary: Path, dashboard: Path | None = None) -> None:
    table = Table(title=f"{reports[0].problem}: {len(reports)} submissions")
    for column in ("submission", "status", "score", "T0", "T1", "T2", "T3"):
        table.add_column(column)
    for r in sorted(reports, key=lambda r: r.submission):
        tiers = {t.tier: t for t in r.tiers}
        table.add_row(escape(r.submission), str(r.status), f"{r.score:g}/{r.max_score:g}",
                      *(f"{tiers[t].score:g}" if t in tiers else "-" for t in ("T0", "T1", "T2", "T3")))
    console = _console()
    console.print(table)
    console.print(f"summary: {summary}")
    if dashboard:
        console.print(f"dashboard: {dashboard}")


@contextmanager
def grading_progress(total: int) -> Iterator[Callable[[Report], None]]:
    """A progress bar for grade-all (done/total, elapsed, ETA); the callback is safe to call from any thread."""
    columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("elapsed"), TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn())
    with Progress(*columns, console=_console()) as progress:
        task = progress.add_task("grading", total=total)

        def advance(report: Report) -> None:
            progress.update(task, advance=1, description=f"graded {escape(report.submission)}")

        yield advance
