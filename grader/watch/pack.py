"""`check --watch FILE` in a learner pack: grade the file on the public cases again each time it is saved.

The pack's cases and the reference's observations are loaded once; each save is graded in a fresh sandboxed
worker, as `check` grades it, and `reports/<file stem>.json` is rewritten.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from grader.course.learner_pack import (
    DATA_FILE,
    PackedCases,
    PackedProblem,
    finish_plots,
    hidden_checks,
    learner_report,
    start_plots,
)
from grader.judge.grading import grade
from grader.model.report import Report, write_atomic
from grader.model.verdicts import ExitCode
from grader.watch.loop import Outcome, Snapshot, watch


class PackJudge:
    """Grades snapshots of one file on the pack's public cases."""

    def __init__(self, root: Path, file: Path, report_path: Path) -> None:
        self.root, self.file, self.report_path = root, file, report_path
        self.problem: PackedProblem | None = None
        self.cases: PackedCases | None = None

    def start(self) -> None:
        self.problem, self.cases = PackedProblem.load(self.root), PackedCases(self.root / DATA_FILE)

    def grade(
        self,
        snapshot: Snapshot,
        publish: Callable[[], bool],
        show: Callable[[Report], None],
    ) -> Outcome | None:
        assert self.problem is not None and self.cases is not None
        job = start_plots(self.problem, self.cases, self.report_path)
        try:
            graded = grade(
                self.problem,
                snapshot.submission,
                self.cases.seed,
                self.problem.spec.limits,
                expectations=self.cases,
                command=f"python check {self.file}",
                series_sink=job.submit if job is not None else None,
            )
            if not publish():
                return None
            show(graded.report)
            plots = finish_plots(self.problem, job, self.report_path, graded.plot_failures)
        finally:
            if job is not None:
                job.close()
        write_atomic(
            self.report_path, json.dumps(learner_report(graded.report, self.problem.full_spec), indent=2) + "\n"
        )
        hidden = len(hidden_checks(self.problem.full_spec))
        notes = [f"{hidden} more checks run only in the official grade, on hidden cases" if hidden else "", plots]
        return Outcome(graded.report, self.report_path, "; ".join(n for n in notes if n))

    def close(self) -> None:
        """Every worker is gone once its grade returns: nothing else to end."""


def watch_check(root: Path, file: Path, report_path: Path) -> ExitCode:
    return watch(file, PackJudge(root, file, report_path))
