"""Rich terminal summaries of one report and of a class."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
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
    table = Table(title=f"{report.problem} · {report.submission} · {report.score:g}/{report.max_score:g} "
                        f"({report.status})", show_lines=False)
    for column in ("tier", "check", "verdict", "score", "message"):
        table.add_column(column, overflow="fold", max_width=70 if column == "message" else None)
    for tier in report.tiers:
        for check in tier.checks:
            message = "" if check.verdict == Verdict.PASS else check.message
            table.add_row(tier.tier, check.id, f"[{STYLE[check.verdict]}]{check.verdict}[/]",
                          f"{check.score:g}/{check.max_score:g}", message)
    console = _console()
    console.print(table)
    if report.message:
        console.print(f"[red]{report.message}[/]")
    console.print(f"report: {path}  ·  isolation: {report.isolation.level if report.isolation else 'none'}")


def print_class_table(reports: list[Report], summary: Path) -> None:
    table = Table(title=f"{reports[0].problem}: {len(reports)} submissions")
    for column in ("submission", "status", "score", "T0", "T1", "T2", "T3"):
        table.add_column(column)
    for r in sorted(reports, key=lambda r: r.submission):
        tiers = {t.tier: t for t in r.tiers}
        table.add_row(r.submission, str(r.status), f"{r.score:g}/{r.max_score:g}",
                      *(f"{tiers[t].score:g}" if t in tiers else "-" for t in ("T0", "T1", "T2", "T3")))
    console = _console()
    console.print(table)
    console.print(f"summary: {summary}")
