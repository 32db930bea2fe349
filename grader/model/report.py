"""The report model (`report.json`, see docs/report.md) and its atomic writer."""

from __future__ import annotations

import os
import shlex
import tempfile
from collections.abc import Iterable
from pathlib import Path

from pydantic import BaseModel, ConfigDict, field_validator

from grader.model.spec import TierId
from grader.model.verdicts import Status, Verdict
from grader.paths import PROJECT_ROOT
from grader.text import MESSAGE_CHARS, STREAM_CHARS, clean, clean_line

SCHEMA_VERSION = 3


class Model(BaseModel):
    # assignment is validated too, so text set after construction is sanitized like text given to it
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class CheckResult(Model):
    id: str
    title: str
    verdict: Verdict
    score: float
    max_score: float
    message: str
    duration_s: float
    cases_passed: int = 0
    cases_total: int = 0
    visibility: str = "visible"
    learner_message: str = ""  # the message with hidden inputs and expected values left out
    cases_followed_through: int = 0  # failing cases credited because a misreading charged elsewhere explains them
    followed_through: list[str] = []  # the misconceptions those cases follow through from
    points_followed_through: float = 0.0  # the part of `score` those cases earned: without follow-through, the rest
    # whether the check ended before any worker of the submission was sent a hidden case: only then does its
    # duration tell nothing hidden (learner code that holds a hidden input can time itself to spell it out), so
    # learner-facing outputs show `duration_s` only when this holds
    duration_public: bool = False

    # messages quote what the learner's code raised or returned: learner text, made safe wherever a report is built
    _clean_messages = field_validator("message", "learner_message")(lambda value: clean(value, MESSAGE_CHARS))
    _clean_title = field_validator("title")(lambda value: clean_line(value))


class TierResult(Model):
    tier: TierId
    title: str
    score: float
    max_score: float
    checks: list[CheckResult]


class Versions(Model):
    python: str
    torch: str
    grader: str


class Isolation(Model):
    level: str  # "namespaces+uid", "user-namespace", "limits-only"
    uid: int | None
    namespaces: list[str]
    filesystem: str
    limits: dict[str, float]
    notes: list[str] = []
    syscall_filter: str = ""  # the seccomp filter every worker ran under, or why there was none


class UnexplainedCases(Model):
    """One check's failing cases that a diagnosis leaves unexplained: visible ones by label, hidden ones counted.

    `features` (on the report's own list only) say what separates them from the check's passing visible cases."""

    check: str
    cases: list[str] = []  # labels of the visible ones, at most UNEXPLAINED_LISTED
    more: int = 0  # visible ones beyond those listed
    hidden: int = 0  # hidden ones: only counted, their labels and inputs are the judge's
    features: list[str] = []  # "fails only where mask has an all-zero row"

    def total(self) -> int:
        return len(self.cases) + self.more + self.hidden

    def describe(self) -> str:
        """One line: the check, the labels, the count of the rest and of hidden ones, what separates them."""
        parts = [f"'{label}'" for label in self.cases]
        if self.more:
            parts.append(f"{self.more} more")
        if self.hidden:
            parts.append(f"{self.hidden} hidden")
        where = f" ({'; '.join(self.features)})" if self.features else ""
        return f"{self.check}: {', '.join(parts)}{where}"


UNEXPLAINED_LISTED = 10  # labels listed per check; the rest are counted


class Diagnosis(Model):
    """A misreading that explains some of the failing cases, charged in the checks that own it."""

    id: str
    explanation: str
    cases_explained: int  # failing cases whose result matches this misreading's
    cases_failing: int  # failing cases in all
    checks: list[str]  # the checks those cases belong to
    owners: list[str]  # the checks that own it
    charged_in: list[str] = []  # the owner checks where it explains a failing case
    convention: str = ""  # when the misreading is a library's deliberate convention: which, and what is asked instead
    unexplained: list[UnexplainedCases] = []  # by check, the failing cases this misreading does not explain


class Report(Model):
    schema_version: int = SCHEMA_VERSION
    problem: str
    submission: str
    submission_sha256: str
    status: Status
    score: float
    max_score: float
    tiers: list[TierResult]
    artifacts: list[str]
    seed: int
    versions: Versions
    problem_hash: str
    command: str
    isolation: Isolation | None = None
    stdout: str = ""
    stderr: str = ""
    duration_s: float = 0.0
    phases: dict[str, float] = {}  # seconds: worker_start, T0..T3, diagnosis, plots, report (for `make bench`)
    message: str = ""
    diagnosis: list[Diagnosis] = []  # most failing cases explained first
    # by check, the failing cases no diagnosed misreading explains, with the case features that separate them
    unexplained: list[UnexplainedCases] = []
    follow_through: bool = True  # whether cases a charged misreading explains earned their points elsewhere

    # the file name, what the program printed and what its import raised are the learner's own text
    _clean_name = field_validator("submission")(lambda value: clean_line(value))
    _clean_command = field_validator("command")(lambda value: clean_line(value, MESSAGE_CHARS))
    _clean_message = field_validator("message")(lambda value: clean(value, MESSAGE_CHARS))
    _clean_streams = field_validator("stdout", "stderr")(lambda value: clean(value, STREAM_CHARS))

    def checks(self) -> list[CheckResult]:
        return [check for tier in self.tiers for check in tier.checks]

    def score_without_follow_through(self) -> float:
        """The score the same grade gives with follow-through off: the checks' scores less what it credited (the
        cases' outcomes and the diagnosis do not depend on it, only which failing cases earn their points)."""
        return score_sum(check.score - check.points_followed_through for check in self.checks())


SCORE_DECIMALS = 2  # the one rounding rule: a check's score is rounded once, where it is computed


def round_score(value: float) -> float:
    """A score as every report, table and export shows it: rounded to SCORE_DECIMALS (never -0.0)."""
    return round(value, SCORE_DECIMALS) + 0.0


def score_sum(scores: Iterable[float]) -> float:
    """A tier's or a report's score: the sum of its parts' rounded scores, so it equals the sum of what is shown
    (the rounding only removes float noise from the addition)."""
    return round_score(sum(round_score(score) for score in scores))


def reproduce_command(problem_id: str, submission: Path, seed: int, root: Path = PROJECT_ROOT) -> str:
    """The line that grades `submission` again as it was graded, to run as printed from the project root: the
    project's own interpreter, and the file's path relative to the root (absolute only for a file outside it)."""
    path = submission.resolve()
    try:
        shown = path.relative_to(root.resolve()).as_posix()
    except ValueError:
        shown = str(path)
    return shlex.join(
        [".venv/bin/python", "-m", "grader", "grade", shown, "--problem", problem_id, "--seed", str(seed)]
    )


def write_atomic(path: Path, text: str) -> None:
    """Write via a temporary file and rename, so a reader never sees half a report."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; a report is an ordinary file to share
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_report(report: Report, path: Path) -> None:
    write_atomic(path, report.model_dump_json(indent=2) + "\n")


def load_report(path: Path) -> Report:
    return Report.model_validate_json(path.read_text())
