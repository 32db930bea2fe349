"""Prove a problem's checks: the reference earns full marks on every hidden seed, and each known-wrong
solution fails exactly the checks it declares (required) and no check outside its permitted list."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from grader.course.catalog import catalog_errors, problem_specs
from grader.course.coverage import reference_coverage
from grader.judge.diagnosis import Misconception
from grader.model.problem import Problem
from grader.model.spec import SpecError
from grader.model.verdicts import Verdict
from grader.outputs.report import Report

MIN_SEEDS = 5

GradeMany = Callable[[list[Path], int], list[Report]]


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
    embodied = {m.solution: m for m in problem.misconceptions}
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


def run_validation(problem: Problem, grade_many: GradeMany) -> bool:
    console = Console(width=140)
    findings = (
        catalog_findings(problem)
        + coverage_findings(problem)
        + reference_findings(problem, grade_many)
        + wrong_findings(problem, grade_many)
    )
    count = len(problem.known_wrong())
    if not findings:
        console.print(
            f"[green]{problem.id}: valid[/] - every line and branch of the reference reached by a case; "
            f"reference full marks on {len(problem.grading_seeds)} seeds; "
            f"{count} known-wrong solutions fail exactly as declared"
        )
        return True
    for finding in findings:
        console.print(f"[red]{finding.subject}[/]: {finding.problem}")
    console.print(f"[red]{problem.id}: {len(findings)} problem(s)[/]")
    return False
