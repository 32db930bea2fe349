"""When the judge itself fails on one submission: a `judge_error` report for that file alone, saying why.

A batch goes on past it: every other file is graded and the class outputs are written; the exit code (3) tells
the instructor to look. The cause (the exception and where in the grader it was raised) is for instructors;
learners read a generic sentence, since the exception's text may quote a hidden case or the learner's own text.
"""

from __future__ import annotations

import platform
import sys
import traceback
from pathlib import Path

import torch

from grader import __version__
from grader.confine.intake import read_submission
from grader.model.problem import Problem
from grader.model.report import CheckResult, Report, TierResult, Versions
from grader.model.verdicts import Status, Verdict
from grader.text import clean_line

LEARNER_SENTENCE = (
    "The grader failed while grading this file: an internal error of the grader, not of your code. "
    "The course staff can see the details."
)


def failure_summary(exc: BaseException, frames: int = 3) -> str:
    """`Type: message (at file:line in function; ...)`, the innermost frames of the grader that raised it."""
    where = [
        f"{Path(f.filename).name}:{f.lineno} in {f.name}" for f in traceback.extract_tb(exc.__traceback__)[-frames:]
    ]
    text = f"{type(exc).__name__}: {exc}"
    return clean_line(f"{text} (at {'; '.join(where)})" if where else text, 1024)


def judge_error_report(problem: Problem, submission: Path, seed: int, exc: BaseException, command: str) -> Report:
    """A report for `submission` in which every check is a judge error with the cause; it scores nothing."""
    cause = f"not graded: the grader failed on this file: {failure_summary(exc)}"
    tiers = [
        TierResult(
            tier=tier.id,
            title=tier.title,
            score=0.0,
            max_score=tier.points,
            checks=[
                CheckResult(
                    id=check.id,
                    title=check.title,
                    verdict=Verdict.JUDGE_ERROR,
                    score=0.0,
                    max_score=check.points,
                    message=cause,
                    learner_message=LEARNER_SENTENCE,
                    duration_s=0.0,
                    visibility=check.visibility,
                )
                for check in problem.spec.checks
                if check.tier == tier.id
            ],
        )
        for tier in problem.spec.tiers
    ]
    return Report(
        problem=problem.id,
        submission=submission.name,
        submission_sha256=read_submission(submission).sha256,  # empty for a file that is refused or gone
        status=Status.JUDGE_ERROR,
        score=0.0,
        max_score=problem.spec.max_score,
        tiers=tiers,
        artifacts=[],
        seed=seed,
        versions=Versions(python=platform.python_version(), torch=torch.__version__, grader=__version__),
        problem_hash=problem.content_hash,
        command=command,
        message=LEARNER_SENTENCE,
    )


def tell_instructor(submission: Path, exc: BaseException) -> None:
    """One line on stderr per contained failure, bounded and free of escape sequences."""
    print(
        f"paperleet: judge error while grading {clean_line(submission.name)}: {failure_summary(exc)}", file=sys.stderr
    )
