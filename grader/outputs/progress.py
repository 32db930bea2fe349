"""A learner's progress: the reports of their grades, summed up per problem from what a learner may read alone.

An attempt is one report file: `report.json` written by `grade` or `watch`, or the learner pack's
`reports/<stem>.json`. Each is read through the learner's view (`learner_view.learner_view`, which the pack's
report already is) and then only its visible checks count: a check whose visibility holds its result back
until later is neither named nor scored, and neither is the total it would change (as on Gradescope, see
`exports.py`). A misreading counts only as `learner_diagnosis` names it. Nothing else of a report is read: no
seed, command, instructor message, stdout or stderr.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from grader.model.report import Report, round_score, score_sum
from grader.model.verdicts import Status, Verdict
from grader.outputs.learner_view import learner_view
from grader.text import clean_line

OFFICIAL = "official"  # the scope of a grade by the grader itself; the pack's reports say "public cases"
MAX_REPORT_BYTES = 4 << 20  # a report file larger than this is not a report of ours
MAX_FILES = 5000  # report files read under the given folders, at most
SHOWN_MISREADINGS = 3  # per problem, the most frequent first


class _Viewed(BaseModel):
    # what progress reads of a learner's view; the rest is ignored, and every text is made one safe line
    model_config = ConfigDict(extra="ignore", frozen=True)
    _line = field_validator("*", mode="before")(lambda v: clean_line(v, 300) if isinstance(v, str) else v)


class _Check(_Viewed):
    id: str
    title: str
    verdict: Verdict
    score: float
    max_score: float = Field(ge=0)
    visibility: str = "visible"


class _Tier(_Viewed):
    checks: list[_Check] = Field(max_length=500)


class _Misreading(_Viewed):
    id: str
    explanation: str


class _View(_Viewed):
    problem: str
    submission: str
    status: Status
    scope: str = OFFICIAL
    tiers: list[_Tier] = Field(max_length=10)
    diagnosis: list[_Misreading] = Field(default=[], max_length=50)


@dataclass(frozen=True)
class Attempt:
    """One graded file, as a learner may read it: the score and failures of its visible checks."""

    problem: str
    scope: str
    submission: str
    status: str
    score: float  # on the visible checks
    max_score: float  # of the visible checks
    withheld: float  # points of checks whose results show later
    failing: tuple[tuple[str, str], ...]  # (id, title) of the visible checks that did not pass
    misreadings: tuple[tuple[str, str], ...]  # (id, explanation), as the learner's diagnosis names them
    written: float  # the report file's modification time: the attempts' order
    path: Path


def attempt_of(view: dict[str, Any], written: float, path: Path) -> Attempt:
    """The attempt a learner's view describes; ValidationError if it is not one."""
    data = _View.model_validate(view)
    checks = [check for tier in data.tiers for check in tier.checks]
    shown = [check for check in checks if check.visibility == "visible"]
    return Attempt(
        problem=data.problem,
        scope=data.scope,
        submission=data.submission,
        status=str(data.status),
        score=score_sum(check.score for check in shown),
        max_score=round_score(sum(check.max_score for check in shown)),
        withheld=round_score(sum(check.max_score for check in checks if check.visibility != "visible")),
        failing=tuple((c.id, c.title) for c in shown if c.verdict != Verdict.PASS),
        misreadings=tuple((m.id, m.explanation) for m in data.diagnosis),
        written=written,
        path=path,
    )


def read_attempt(path: Path) -> Attempt | None:
    """The attempt a report file holds, or None for a file that is not a report (or a judge's failure)."""
    try:
        if not path.is_file() or path.is_symlink() or path.stat().st_size > MAX_REPORT_BYTES:
            return None
        data = json.loads(path.read_text())
        if not isinstance(data, dict):
            return None
        view = data if "scope" in data else learner_view(Report.model_validate(data))
        attempt = attempt_of(view, path.stat().st_mtime, path)
    except (OSError, ValueError, ValidationError):  # JSONDecodeError is a ValueError
        return None
    return None if attempt.status == Status.JUDGE_ERROR else attempt  # the grader's failure, not an attempt


def report_files(folders: Iterable[Path]) -> list[Path]:
    """The report files under `folders`: `report.json` anywhere, and any `*.json` in a folder named `reports`."""
    found: set[Path] = set()
    for folder in folders:
        for path in sorted(folder.rglob("*.json")):
            if path.name == "report.json" or path.parent.name == "reports":
                found.add(path)
            if len(found) >= MAX_FILES:
                return sorted(found)
    return sorted(found)


@dataclass(frozen=True)
class Progress:
    """One problem (in one scope) across its attempts."""

    problem: str
    scope: str
    attempts: int
    best: Attempt
    last: Attempt
    misreadings: tuple[tuple[str, str, int], ...]  # (id, explanation, attempts naming it), most frequent first

    def to_data(self) -> dict[str, Any]:
        return {
            "problem": self.problem,
            "scope": self.scope,
            "attempts": self.attempts,
            "best": _attempt_data(self.best),
            "last": _attempt_data(self.last),
            "still_failing": [{"id": i, "title": t} for i, t in self.last.failing],
            "recurring_misreadings": [{"id": i, "explanation": e, "attempts": n} for i, e, n in self.misreadings],
        }


def _attempt_data(attempt: Attempt) -> dict[str, Any]:
    return {
        "submission": attempt.submission,
        "status": attempt.status,
        "score": attempt.score,
        "max_score": attempt.max_score,
        "points_shown_later": attempt.withheld,
    }


def progress_of(attempts: Sequence[Attempt]) -> list[Progress]:
    """Per problem and scope: best and last attempt, and the misreadings named in the most attempts."""
    groups: dict[tuple[str, str], list[Attempt]] = {}
    for attempt in sorted(attempts, key=lambda a: (a.written, str(a.path))):
        groups.setdefault((attempt.problem, attempt.scope), []).append(attempt)
    found = []
    for (problem, scope), group in sorted(groups.items()):
        named = Counter(mid for a in group for mid in {m for m, _ in a.misreadings})
        explained = {mid: text for a in group for mid, text in a.misreadings}
        best = max(group, key=lambda a: (a.score, a.written))
        recurring = tuple((mid, explained[mid], n) for mid, n in sorted(named.items(), key=lambda kv: (-kv[1], kv[0])))
        found.append(Progress(problem, scope, len(group), best, group[-1], recurring[:SHOWN_MISREADINGS]))
    return found


def progress_table(progress: Sequence[Progress], titles: dict[str, str] | None = None) -> Table:
    titles = titles or {}
    table = Table(title="Your progress", show_lines=True)
    for column in ("problem", "attempts", "best", "last", "still failing", "recurring misreadings"):
        table.add_column(column, overflow="fold", max_width=44 if column.startswith(("still", "recurring")) else None)
    for item in progress:
        name = item.problem + (f"\n{titles[item.problem]}" if item.problem in titles else "")
        if item.scope != OFFICIAL:
            name += f"\n({item.scope})"
        failing = escape(", ".join(check for check, _ in item.last.failing)) or "[green]none[/]"
        misread = "\n".join(f"{mid} (in {n} of {item.attempts})" for mid, _, n in item.misreadings) or "-"
        table.add_row(escape(name), str(item.attempts), _score(item.best), _score(item.last), failing, escape(misread))
    return table


def _score(attempt: Attempt) -> str:
    text = f"{attempt.score:g}/{attempt.max_score:g}"
    if attempt.withheld:
        text += f" (+{attempt.withheld:g} shown later)"
    return f"{text}\n{escape(attempt.submission)}"


def print_progress(
    progress: Sequence[Progress],
    titles: dict[str, str] | None = None,
    as_json: bool = False,
    console: Console | None = None,
) -> None:
    if as_json:
        print(json.dumps([item.to_data() for item in progress], indent=2))
        return
    console = console or Console(width=160, highlight=False)
    if not progress:
        console.print("no graded attempt found; grade a file first (`grade`, `watch`, or the pack's `check`)")
        return
    console.print(progress_table(progress, titles))
    explained = {mid: text for item in progress for mid, text, _ in item.misreadings}
    for mid, text in sorted(explained.items()):
        console.print(f"[bold yellow]{escape(mid)}[/]: {escape(text)}")
