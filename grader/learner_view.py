"""The learner's view of a report: scores, verdicts and hidden-safe messages, never the instructor's detail."""

from __future__ import annotations

from typing import Any

from .report import CheckResult, Report
from .verdicts import Verdict

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


def learner_message(check: CheckResult) -> str:
    """The message a learner may read: a hidden case shows its verdict and a hint, never its inputs."""
    return check.learner_message or GENERIC_MESSAGE[check.verdict]


def learner_check(check: CheckResult) -> dict[str, Any]:
    return {
        "id": check.id,
        "title": check.title,
        "verdict": str(check.verdict),
        "score": check.score,
        "max_score": check.max_score,
        "message": learner_message(check),
        "cases_passed": check.cases_passed,
        "cases_total": check.cases_total,
        "visibility": check.visibility,
        "duration_s": check.duration_s,
    }


def learner_view(report: Report) -> dict[str, Any]:
    """A JSON-ready projection of `report` that every learner-facing output is built from.

    Left out on purpose: the grading seed and the command that names it, the instructor messages (case labels,
    expected values), the worker's stdout and stderr (the learner's code may print a hidden case's inputs),
    isolation details and hashes. `message` only ever explains an import failure of the learner's own file.
    """
    return {
        "schema_version": report.schema_version,
        "problem": report.problem,
        "submission": report.submission,
        "status": str(report.status),
        "score": report.score,
        "max_score": report.max_score,
        "message": report.message,
        "duration_s": report.duration_s,
        "tiers": [
            {
                "tier": tier.tier,
                "title": tier.title,
                "score": tier.score,
                "max_score": tier.max_score,
                "checks": [learner_check(check) for check in tier.checks],
            }
            for tier in report.tiers
        ],
    }
