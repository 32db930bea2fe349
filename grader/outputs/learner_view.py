"""The learner's view of a report: scores, verdicts and hidden-safe messages, never the instructor's detail."""

from __future__ import annotations

import math
from typing import Any

from grader.model.report import CheckResult, Report, UnexplainedCases, round_score, score_sum
from grader.model.verdicts import Verdict

# For a check that carries no learner message (a report written before they existed): the verdict in words.
GENERIC_MESSAGE = {
    Verdict.PASS: "passed",
    Verdict.FAIL: "some cases did not match the expected results",
    Verdict.ERROR: "your code raised an exception",
    Verdict.TIMEOUT: "a call did not finish within its time limit",
    Verdict.CRASHED: "the process running your code died",
    Verdict.SKIPPED: "not run",
    Verdict.JUDGE_ERROR: "internal error of the grader, not of your code",
}


# The resolution of every total duration a learner reads. Learner code that holds a hidden case's inputs can
# stretch its grade to any length within the budget, so a total read to the second would carry log2(budget) bits
# of them; in 5-second steps it carries log2(budget / 5) (4.6 bits within 120 s), and still tells a learner
# whether grading took seconds or minutes. docs/threat-model.md counts this channel beside the others.
LEARNER_SECONDS = 5


def learner_seconds(seconds: float) -> int:
    """`seconds` rounded up to a whole number of LEARNER_SECONDS steps: never less than the time it took."""
    return math.ceil(max(seconds, 0.0) / LEARNER_SECONDS) * LEARNER_SECONDS


def learner_message(check: CheckResult) -> str:
    """The message a learner may read: a hidden case shows its verdict and a hint, never its inputs."""
    return check.learner_message or GENERIC_MESSAGE[check.verdict]


def learner_check(check: CheckResult) -> dict[str, Any]:
    return {
        "id": check.id,
        "title": check.title,
        "verdict": str(check.verdict),
        "score": round_score(check.score),
        "max_score": check.max_score,
        "message": learner_message(check),
        "cases_passed": check.cases_passed,
        "cases_total": check.cases_total,
        "visibility": check.visibility,
        # None when learner code that held a hidden input ran during or before the check: it could time itself
        "duration_s": check.duration_s if check.duration_public else None,
    }


def learner_view(report: Report) -> dict[str, Any]:
    """A JSON-ready projection of `report` that every learner-facing output is built from.

    Left out on purpose: the grading seed and the command that names it, the instructor messages (case labels,
    expected values), the worker's stdout and stderr (the learner's code may print a hidden case's inputs),
    isolation details and hashes, and the duration of each check that ran once learner code held a hidden input
    (`duration_public`); the total is rounded up to LEARNER_SECONDS. `message` only ever explains an import
    failure of the learner's own file.
    Scores follow the one rounding rule: each check's as shown, each total the sum of what it adds up.
    """
    tiers: list[dict[str, Any]] = [
        {
            "tier": tier.tier,
            "title": tier.title,
            "score": score_sum(check.score for check in tier.checks),
            "max_score": tier.max_score,
            "checks": [learner_check(check) for check in tier.checks],
        }
        for tier in report.tiers
    ]
    return {
        "schema_version": report.schema_version,
        "problem": report.problem,
        "submission": report.submission,
        "status": str(report.status),
        "score": score_sum(tier["score"] for tier in tiers),
        "max_score": report.max_score,
        "message": report.message,
        "duration_s": learner_seconds(report.duration_s),
        "diagnosis": learner_diagnosis(report),
        "unexplained": learner_unexplained(report.unexplained, report),
        "tiers": tiers,
    }


def learner_diagnosis(report: Report) -> list[dict[str, Any]]:
    """The diagnosis as a learner may read it before every result is shown.

    While some check is not visible, only a misreading charged in a visible check is named, with the visible
    checks it touches and no counts: the counts and the other checks would tell how the held-back checks went.
    """
    visible = {check.id for check in report.checks() if check.visibility == "visible"}
    everything = len(visible) == len(report.checks())
    shown = []
    for finding in report.diagnosis:
        if not everything and not set(finding.charged_in or finding.owners) & visible:
            continue
        entry: dict[str, Any] = {
            "id": finding.id,
            "explanation": finding.explanation,
            "checks": [c for c in finding.checks if everything or c in visible],
            "owners": [c for c in finding.owners if everything or c in visible],
        }
        if finding.convention:
            entry["convention"] = finding.convention
        unexplained = learner_unexplained(finding.unexplained, report)
        if unexplained:
            entry["unexplained"] = unexplained
        if everything:
            entry.update(cases_explained=finding.cases_explained, cases_failing=finding.cases_failing)
        shown.append(entry)
    return shown


def learner_unexplained(cases: list[UnexplainedCases], report: Report) -> list[dict[str, Any]]:
    """Unexplained failing cases of the checks a learner sees now: a held-back check's cases would tell how it went.
    Hidden cases are already only counted, as a visible check's own case count shows them."""
    visible = {check.id for check in report.checks() if check.visibility == "visible"}
    everything = len(visible) == len(report.checks())
    return [entry.model_dump() for entry in cases if everything or entry.check in visible]
