"""`watch`: a judge kept warm between grades of one file, so that a save is graded in a fraction of a cold start.

What a cold `grade` pays on every run is paid here once: the judge's imports, the problem and its expectations,
the reference's series the plots are drawn against, a zygote that has imported torch and the worker, and a
plotting server that has imported matplotlib. The plotting process of the next grade is forked from it as soon
as a grade ends. Each save is graded as `grade-all` grades a file, in a fresh confined worker forked from the zygote:
nothing of one grade reaches the next. Its outputs replace the previous grade's, as `grade` writes them.
"""

from __future__ import annotations

import argparse
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import torch

from grader.confine.intake import usage_problem
from grader.confine.launch import limits_from
from grader.confine.zygote import Zygote
from grader.engine import PlotInputs, UsageError, plot_inputs, say_stage, single_out, start_plot_server, write_outputs
from grader.judge.expectations import Expectations
from grader.judge.grading import grade
from grader.model.problem import Problem
from grader.model.report import Report, reproduce_command, write_report
from grader.model.spec import Limits
from grader.model.verdicts import ExitCode
from grader.outputs.containment import judge_error_report, tell_instructor
from grader.outputs.plots import PlotJob, PlotServer, preview_file, series_tolerances
from grader.watch.loop import DEBOUNCE_S, Outcome, Snapshot, watch


@dataclass(frozen=True)
class DrawnPlots:
    """The plots in the report folder, the toy series they were drawn from, and why any plot is missing."""

    series: dict[str, torch.Tensor]
    written: list[str]
    notes: str


class KeptPlots:
    """Stands in for a PlotJob when the toy gave exactly the series the folder's plots were drawn from: the same
    series over the same reference draw the same pictures, so those stay, and nothing is drawn again."""

    def __init__(self, drawn: DrawnPlots) -> None:
        self.drawn = drawn

    def matches(self, series: dict[str, torch.Tensor] | None, out: Path) -> bool:
        before = self.drawn.series
        if series is None or series.keys() != before.keys():
            return False
        if not all(
            series[name].dtype == value.dtype and torch.equal(series[name], value) for name, value in before.items()
        ):
            return False  # NaN never equals NaN: such a series is drawn again, which is merely slower
        return all((out / file).is_file() for file in self.drawn.written)

    def submit(self, series: dict[str, torch.Tensor] | None) -> None:
        """Nothing to draw."""

    def result(self) -> list[str]:
        return list(self.drawn.written)

    def notes(self) -> str:
        return self.drawn.notes

    def close(self) -> None:
        """No process to end."""


class WarmJudge:
    """Grades snapshots of one file into one folder; `start` warms it up, `close` ends every process it started."""

    def __init__(self, problem: Problem, file: Path, seed: int, limits: Limits, out: Path) -> None:
        self.problem, self.file, self.seed, self.limits, self.out = problem, file, seed, limits, out
        self.command = reproduce_command(problem.id, file, seed)
        self.expectations = Expectations(problem, seed, say=say_stage)
        self.inputs = PlotInputs()
        self.zygote: Zygote | None = None
        self._starting: threading.Thread | None = None
        self._start_error: BaseException | None = None
        self._plots: PlotJob | None = None
        self._drawn: DrawnPlots | None = None
        self.plot_server: PlotServer | None = None

    def start(self) -> None:
        """The zygote imports torch on one core while this process computes (or loads) the expectations."""
        self._starting = threading.Thread(target=self._start_zygote, name="zygote-start", daemon=True)
        self._starting.start()
        self.plot_server = start_plot_server(self.problem)
        self.expectations.warm()
        self.inputs = plot_inputs(self.problem)
        self._plots = self._plot_job()
        self._starting.join()
        if self._start_error is not None:
            raise self._start_error

    def _start_zygote(self) -> None:
        try:
            self.zygote = Zygote()
        except BaseException as exc:  # raised again in the main thread, which reports it
            self._start_error = exc

    def _plot_job(self) -> PlotJob | None:
        if not self.problem.spec.plots:
            return None
        return PlotJob(
            self.problem.spec.plots,
            self.out,
            note=self.inputs.note,
            preview=self.inputs.preview,
            tolerances=series_tolerances(self.problem.spec.checks),
            server=self.plot_server,
        )

    def _live_zygote(self) -> Zygote:
        """The zygote, started again if it has died (the machine ran short of memory, say)."""
        if self.zygote is None or self.zygote.process.poll() is not None:
            if self.zygote is not None:
                self.zygote.close()
            self.zygote = None
            self.zygote = Zygote()
        return self.zygote

    def grade(
        self,
        snapshot: Snapshot,
        publish: Callable[[], bool],
        show: Callable[[Report], None],
    ) -> Outcome | None:
        """Grade the snapshot; if `publish()` says the file still holds it, `show` the report and write the
        outputs, else None."""
        self.out.mkdir(parents=True, exist_ok=True)
        if self._plots is None:  # the last grade was not published and took its plotting process along
            self._plots = self._plot_job()
        job = self._plots
        kept = KeptPlots(self._drawn) if self._drawn is not None else None
        target: list[PlotJob | KeptPlots | None] = []  # what the toy's series went to, once they came

        def sink(series: dict[str, torch.Tensor] | None) -> None:
            target.append(kept if kept is not None and kept.matches(series, self.out) else job)
            if target[0] is not None:
                target[0].submit(series)

        job_used = False  # whether the job has drawn, or may be drawing, into the folder
        try:
            graded = grade(
                self.problem,
                snapshot.submission,
                self.seed,
                self.limits,
                expectations=self.expectations,
                zygote=self._live_zygote(),
                command=self.command,
                series_sink=sink,
            )
            plots = target[0] if target else job  # no series (an import error): the job draws nothing
            job_used = plots is job and job is not None
            if job_used:
                self._drawn = None  # the folder's plots are this grade's from now on, published or not
            if not publish():
                return None
            show(graded.report)  # the verdicts are final; the plots, the report files and the page follow
            report = write_outputs(self.problem, graded, self.out, cast("PlotJob | None", plots))
            if job_used and graded.series is not None:
                self._drawn = DrawnPlots(graded.series, report.artifacts, job.notes() if job is not None else "")
        except Exception as exc:  # contained to this grade, as grade-all contains it to one file
            tell_instructor(self.file, exc)
            report = judge_error_report(self.problem, self.file, self.seed, exc, self.command)
            write_report(report, self.out / "report.json")
            if target and target[0] is job:
                job_used, self._drawn = True, None
        finally:
            if job_used and job is not None:
                job.close()
                self._plots = None
        self._remove_stale_plots(report)
        if self._plots is None:
            self._plots = self._plot_job()
        return Outcome(report, self.out / "report.json")

    def _remove_stale_plots(self, report: Report) -> None:
        """A plot this grade did not draw goes, so that no picture of an earlier version stays beside the report."""
        for plot in self.problem.spec.plots:
            if plot.file not in report.artifacts:
                (self.out / plot.file).unlink(missing_ok=True)
                (self.out / preview_file(plot.file)).unlink(missing_ok=True)

    def close(self) -> None:
        """End the plotting process, its server and the zygote; the zygote's children die with it."""
        if self._plots is not None:
            self._plots.close()
            self._plots = None
        if self.plot_server is not None:
            self.plot_server.close()
            self.plot_server = None
        if self._starting is not None:
            self._starting.join()  # a zygote still starting is closed too, never left behind
        if self.zygote is not None:
            self.zygote.close()
            self.zygote = None


def cmd_watch(args: argparse.Namespace) -> ExitCode:
    problem = Problem(args.problem)
    wrong = usage_problem(args.file)  # a link or a FIFO is watched: each grade refuses it
    if wrong == "is a folder":
        raise UsageError(f"{args.file} is a folder; expected a Python file with your solution")
    if wrong is not None:
        raise UsageError(f"{args.file}: {wrong}; expected a Python file with your solution")
    debounce = DEBOUNCE_S if args.debounce is None else args.debounce
    if not 0 <= debounce <= 60:  # NaN too
        raise UsageError(f"--debounce {args.debounce}: expected seconds from 0 to 60")
    seed = problem.grading_seeds[0] if args.seed is None else args.seed
    out = args.out or single_out(problem, args.file)
    judge = WarmJudge(problem, args.file, seed, limits_from(args, problem.spec.limits), out)
    return watch(args.file, judge, debounce_s=debounce)
