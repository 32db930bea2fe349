"""Prove a problem's checks: the reference earns full marks on every hidden seed, each known-wrong solution fails
exactly the checks it declares (required) and no check outside its permitted list, each known-wrong solution and
convention port scores what the clauses it breaks declare, and the authoring rules hold (`course/authoring.py`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from rich.console import Console
from rich.table import Table

from grader.course.authoring import misreading_findings, seed_findings
from grader.course.catalog import catalog_errors, problem_specs
from grader.course.coverage import reference_coverage
from grader.model.misconceptions import Misconception
from grader.model.problem import Problem
from grader.model.report import Report
from grader.model.spec import CONSTRUCTED_KINDS, SpecError
from grader.model.verdicts import Verdict

MIN_SEEDS = 5
DECLARED_TOLERANCE = 2.0  # points a graded score may stray from the score its broken clauses declare


class GradeMany(Protocol):
    """Grades files on a seed, with the problem's own follow-through setting."""

    def __call__(self, files: list[Path], seed: int) -> list[Report]: ...


@dataclass(frozen=True)
class Finding:
    subject: str
    problem: str


def failed_checks(report: Report) -> set[str]:
    """Checks that lost points."""
    return {c.id for c in report.checks() if c.verdict != Verdict.PASS}


def strictly_failed_checks(report: Report) -> set[str]:
    """Checks that would have lost points without follow-through credit."""
    return failed_checks(report) | {c.id for c in report.checks() if c.cases_followed_through}


def reference_findings(problem: Problem, grade_many: GradeMany) -> list[Finding]:
    seeds = problem.grading_seeds
    findings = []
    if len(seeds) < MIN_SEEDS:
        findings.append(Finding("reference", f"needs at least {MIN_SEEDS} grading seeds, has {len(seeds)}"))
    reference = problem.reference_dir / "reference.py"
    for seed in seeds:
        (report,) = grade_many([reference], seed)
        if report.score != report.max_score:
            lost = ", ".join(f"{c.id} ({c.message})" for c in report.checks() if c.verdict != Verdict.PASS)
            findings.append(Finding("reference", f"seed {seed}: {report.score:g}/{report.max_score:g}; {lost}"))
    return findings


def wrong_findings(problem: Problem, grade_many: GradeMany) -> list[Finding]:
    wrong = problem.known_wrong()
    check_ids = {c.id for c in problem.spec.checks}
    findings = []
    for known in wrong:
        unknown = (known.must_fail | known.may_fail) - check_ids
        if unknown:
            findings.append(Finding(known.path.name, f"header names unknown checks {sorted(unknown)}"))
        if not known.must_fail:
            findings.append(Finding(known.path.name, "declares no check it must fail"))
    embodied = {m.solution: m for m in problem.misconceptions if m.solution is not None}
    reports = grade_many([k.path for k in wrong], problem.grading_seeds[0])
    for known, report in zip(wrong, reports, strict=True):
        failed = failed_checks(report)
        missed = known.must_fail - strictly_failed_checks(report)
        extra = failed - known.must_fail - known.may_fail
        misconception = embodied.get(known.path.name)
        if misconception is not None:
            findings += _diagnosis_findings(known.path.name, misconception, report, known.may_fail)
        if missed:
            findings.append(Finding(known.path.name, f"passed checks it must fail: {sorted(missed)}"))
        if extra:
            detail = "; ".join(f"{c.id}: {c.message}" for c in report.checks() if c.id in extra)
            findings.append(Finding(known.path.name, f"failed checks outside its declared lists: {detail}"))
    return findings


def _diagnosis_findings(
    name: str, misconception: Misconception, report: Report, may_fail: frozenset[str]
) -> list[Finding]:
    """A misreading's own solution is diagnosed as that misreading first and, with follow-through, charged only
    in its owner checks (and those it may also fail)."""
    findings = []
    top = report.diagnosis[0].id if report.diagnosis else None
    if top != misconception.id:
        found = ", ".join(f"{d.id} ({d.cases_explained}/{d.cases_failing})" for d in report.diagnosis) or "nothing"
        findings.append(Finding(name, f"top diagnosis should be {misconception.id}; the judge found {found}"))
    if report.follow_through:
        charged_elsewhere = failed_checks(report) - set(misconception.owners) - may_fail
        if charged_elsewhere:
            findings.append(
                Finding(
                    name,
                    f"with follow-through still loses points outside the owners of "
                    f"{misconception.id}: {sorted(charged_elsewhere)}",
                )
            )
    return findings


@dataclass(frozen=True)
class Declared:
    """A file that declares the clauses it breaks, its declared score and what it was graded."""

    name: str
    breaks: frozenset[str]
    declared: float
    graded: float
    diagnosis: str  # the top diagnosis of its report, or ""
    # graded with follow-through off, for a file whose broken clauses must be charged by construction; else None
    strict: float | None = None


def declared_scores(problem: Problem, grade_many: GradeMany) -> list[Declared]:
    """Every known-wrong solution and port graded on the first seed; for those that break only conventions, precision,
    validation or return types, also the score the same grade gives with follow-through off."""
    files = [(k.path, k.breaks) for k in problem.known_wrong()] + [(p.path, p.breaks) for p in problem.ports()]
    seed = problem.grading_seeds[0]
    reports = grade_many([path for path, _ in files], seed)
    kinds = {c.id: c.kind for c in problem.spec.clauses}
    constructed = [path for path, breaks in files if all(kinds[c] in CONSTRUCTED_KINDS for c in breaks)]
    return [
        Declared(
            path.name,
            breaks,
            problem.spec.declared_score(breaks),
            report.score,
            report.diagnosis[0].id if report.diagnosis else "",
            _without_follow_through(report) if path in constructed else None,
        )
        for (path, breaks), report in zip(files, reports, strict=True)
    ]


def _without_follow_through(report: Report) -> float:
    return report.score_without_follow_through() if report.follow_through else report.score


def declared_findings(rows: list[Declared]) -> list[Finding]:
    """A score more than DECLARED_TOLERANCE points off its declaration, with follow-through or without it."""
    findings = []
    for row in rows:
        charged = f"{row.declared:g} declared by breaking {', '.join(sorted(row.breaks)) or 'nothing'}"
        if abs(row.graded - row.declared) > DECLARED_TOLERANCE:
            top = f" (top diagnosis: {row.diagnosis})" if row.diagnosis else ""
            findings.append(Finding(row.name, f"scores {row.graded:.2f}, not {charged}{top}"))
        if row.strict is not None and abs(row.strict - row.declared) > DECLARED_TOLERANCE:
            findings.append(Finding(row.name, f"with follow-through off scores {row.strict:.2f}, not {charged}"))
    return findings


def declared_table(problem: Problem, rows: list[Declared]) -> Table:
    table = Table(title=f"{problem.id}: declared and graded scores (declared_scores = {problem.spec.declared_scores})")
    for column in ("file", "breaks", "declared", "graded", "follow-through off", "top diagnosis"):
        table.add_column(column, overflow="fold")
    for row in rows:
        strict = "" if row.strict is None else f"{row.strict:.2f}"
        off = abs(row.graded - row.declared) > DECLARED_TOLERANCE
        graded = f"[red]{row.graded:.2f}[/]" if off else f"{row.graded:.2f}"
        table.add_row(row.name, ", ".join(sorted(row.breaks)), f"{row.declared:g}", graded, strict, row.diagnosis)
    return table


def coverage_findings(problem: Problem) -> list[Finding]:
    """A line or branch of the reference that no case reaches is a clause a solution can break for free."""
    measured = reference_coverage(problem)
    if measured.complete:
        return []
    return [Finding("reference", f"reached by no case of any grading seed: {measured.describe()}")]


def catalog_findings(problem: Problem) -> list[Finding]:
    """The problem's `[catalog]` table is checked when its spec loads; with the other problems', ids and titles
    must be unique and every `builds_on` name a problem, without a circle."""
    try:
        specs = problem_specs(problem.root / "problems")
    except SpecError as exc:  # another problem's spec: the catalog cannot be checked without it
        return [Finding("catalog", str(exc))]
    return [Finding("catalog", error) for error in catalog_errors(specs)]


def authoring_findings(problem: Problem) -> list[Finding]:
    """The authoring rules (`course/authoring.py`): misreadings well explained and owned, hidden seeds hidden."""
    return [Finding(f"misreading {mid}", what) for mid, what in misreading_findings(problem)] + [
        Finding("seeds", what) for what in seed_findings(problem)
    ]


def run_validation(problem: Problem, grade_many: GradeMany) -> bool:
    console = Console(width=140)
    grade = _remembered(grade_many)
    findings = (
        catalog_findings(problem)
        + authoring_findings(problem)
        + coverage_findings(problem)
        + reference_findings(problem, grade)
        + wrong_findings(problem, grade)
    )
    rows = declared_scores(problem, grade)
    console.print(declared_table(problem, rows))
    off = declared_findings(rows)
    enforced = problem.spec.declared_scores == "enforced"
    findings += off if enforced else []
    for finding in [] if enforced else off:
        console.print(f"[yellow]warning: {finding.subject}[/]: {finding.problem}")
    count = len(problem.known_wrong())
    if not findings:
        console.print(
            f"[green]{problem.id}: valid[/] - every line and branch of the reference reached by a case; "
            f"reference full marks on {len(problem.grading_seeds)} seeds; "
            f"{count} known-wrong solutions fail exactly as declared; "
            f"{len(rows) - len({f.subject for f in off})} of {len(rows)} known-wrong solutions and ports score "
            f"within {DECLARED_TOLERANCE:g} points of their declared scores"
        )
        return True
    for finding in findings:
        console.print(f"[red]{finding.subject}[/]: {finding.problem}")
    console.print(f"[red]{problem.id}: {len(findings)} problem(s)[/]")
    return False


def _remembered(grade_many: GradeMany) -> GradeMany:
    """`grade_many` that grades each file once per seed, however often it is asked."""
    reports: dict[tuple[Path, int], Report] = {}

    def grade(files: list[Path], seed: int) -> list[Report]:
        missing = list(dict.fromkeys(f for f in files if (f, seed) not in reports))
        if missing:
            reports.update(zip([(f, seed) for f in missing], grade_many(missing, seed), strict=True))
        return [reports[(f, seed)] for f in files]

    return grade
