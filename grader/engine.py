"""The batch and output engine: files graded into their outputs, whatever the judge does, and the exit code."""

from __future__ import annotations

import csv
import io
import os
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import torch

from grader.confine.launch import Launched
from grader.confine.zygote import Zygote
from grader.judge.expectations import Expectations
from grader.judge.grading import Graded, grade
from grader.model.problem import Problem
from grader.model.report import Report, reproduce_command, round_score, write_atomic, write_report
from grader.model.spec import TIERS, Limits
from grader.model.verdicts import ExitCode, Status, Verdict
from grader.outputs.containment import judge_error_report, tell_instructor
from grader.outputs.pages import write_report_page
from grader.outputs.pages.previews import PreviewSource
from grader.outputs.plots import PlotJob, PlotServer, preview_file, series_tolerances, toy_failures
from grader.paths import PROJECT_ROOT
from grader.text import clean_line, csv_cell, submission_folder


class UsageError(Exception):
    """The command line asked for something that cannot be done; the message says what was expected."""


def artifacts_dir() -> Path:
    return Path(os.environ.get("PAPERLEET_ARTIFACTS", PROJECT_ROOT / "artifacts"))


PLOT_NOTE = "your functions at the public seed, the preview's inputs; graded at the seed in report.json"


@dataclass(frozen=True)
class PlotInputs:
    """What a learner's plots are drawn against: the reference's series at the public seed, the seed the learner's
    curves are drawn at (overlaid, marks where a curve leaves it, and the preview drawn beside each plot with the
    same limits); `note` says so under the title."""

    preview: dict[str, torch.Tensor] | None = None
    note: str = PLOT_NOTE


def plot_inputs(problem: Problem) -> PlotInputs:
    if not problem.spec.plots:
        return PlotInputs()
    public = Expectations(problem, problem.spec.public_seed, say=say_stage)
    preview = public.series()
    public.persist()  # the next grade reads the public seed's series rather than running the toy again
    return PlotInputs(preview)


def start_plots(
    problem: Problem,
    out_dir: Path,
    inputs: PlotInputs | None = None,
    server: PlotServer | None = None,
    drawing: subprocess.Popen[str] | None = None,
) -> PlotJob:
    """Clear the previous run's plots and start drawing this run's (in `drawing`, if started already) as soon as
    its series arrive."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for plot in problem.spec.plots:
        (out_dir / plot.file).unlink(missing_ok=True)
        (out_dir / preview_file(plot.file)).unlink(missing_ok=True)
    inputs = inputs or PlotInputs()
    return PlotJob(
        problem.spec.plots,
        out_dir,
        note=inputs.note,
        preview=inputs.preview,
        tolerances=series_tolerances(problem.spec.checks),
        server=server,
        process=drawing,
    )


def start_plot_server(problem: Problem) -> PlotServer | None:
    """A server that forks each grade's drawing process, or None: without one, each grade starts its own."""
    if not problem.spec.plots:
        return None
    try:
        return PlotServer()
    except OSError as exc:
        tell_instructor(Path("plots"), exc)
        return None


def write_outputs(problem: Problem, graded: Graded, out_dir: Path, plots: PlotJob | None = None) -> Report:
    """Plots first, then the report, atomically, once every process of the submission is gone."""
    report = graded.report
    started = time.perf_counter()
    plots = plots or start_plots(problem, out_dir)
    plots.submit(graded.series)
    report.artifacts = plots.result()
    notes = [plots.notes(), toy_failures(graded.plot_failures)]
    if any(notes):  # a plot that could not be drawn is missing, with its reason; the grade stands
        report.message = " ".join(filter(None, [report.message, *notes]))
    report.phases["plots_wait"] = round(time.perf_counter() - started, 4)
    started = time.perf_counter()
    write_report(report, out_dir / "report.json")
    report.phases["report"] = round(time.perf_counter() - started, 4)
    write_report_page(problem, report, out_dir, preview_source(problem))
    return report


def preview_source(problem: Problem) -> PreviewSource:
    """The problem's previews folder, and the reference's series at the public seed for a preview it lacks."""
    return PreviewSource(
        artifacts_dir() / "previews" / problem.id, lambda: Expectations(problem, problem.spec.public_seed).series()
    )


def say_stage(text: str) -> None:
    """One line on stderr for a stage of a first run (a cache computed), so a long first run is not silent."""
    print(clean_line(text, 200), file=sys.stderr, flush=True)


def grade_into(
    problem: Problem,
    file: Path,
    seed: int,
    limits: Limits,
    out: Path | None,
    expectations: Expectations | None = None,
    inputs: PlotInputs | None = None,
    zygote: Zygote | None = None,
    launched: Launched | None = None,
    follow_through: bool | None = None,
    plot_server: PlotServer | None = None,
    drawing: subprocess.Popen[str] | None = None,
) -> Report:
    """Grade one file (its outputs into `out`, if given), whatever happens: a failure of the judge on this file
    becomes its `judge_error` report, written like any other, and never reaches another file. `drawing` is a
    drawing process started early (see `cli.early_launch`): its plots are drawn there, and it ends here."""
    command = _command(problem, file, seed)
    plots = None
    try:
        if expectations is None:
            expectations = Expectations(problem, seed, say=say_stage)
            expectations.warm()
        if out is not None:
            plots = start_plots(problem, out, inputs or plot_inputs(problem), plot_server, drawing)
            drawing = None  # the plots' job ends it
        graded = grade(
            problem,
            file,
            seed,
            limits,
            expectations=expectations,
            zygote=zygote,
            command=command,
            launched=launched,
            series_sink=plots.submit if plots else None,
            follow_through=follow_through,
        )
        return write_outputs(problem, graded, out, plots) if out is not None else graded.report
    except Exception as exc:  # contained to this file: the batch and its class outputs go on
        if plots is not None:
            plots.close()
        tell_instructor(file, exc)
        report = judge_error_report(problem, file, seed, exc, command)
        if out is not None:
            _write_contained(problem, report, out)
        return report
    finally:
        if drawing is not None:
            drawing.kill()
            drawing.communicate()


def _write_contained(problem: Problem, report: Report, out: Path) -> None:
    """The judge_error report on disk, replacing the previous run's; then its page, if that can be drawn."""
    for write in (
        lambda: write_report(report, out / "report.json"),
        lambda: write_report_page(problem, report, out, preview_source(problem)),
    ):
        try:
            write()
        except Exception as exc:  # the report in memory still reaches summary.csv and index.html
            tell_instructor(out / report.submission, exc)


def _command(problem: Problem, file: Path, seed: int) -> str:
    return reproduce_command(problem.id, file, seed)


def single_out(problem: Problem, file: Path) -> Path:
    """Where `grade` writes without --out: the class folder for a file of submissions/<problem>/, a folder of its
    own for any other file, so a file from elsewhere never replaces a learner's report that shares its stem."""
    folder = submission_folder(file.name)
    if file.resolve().parent == (PROJECT_ROOT / "submissions" / problem.id).resolve():
        return artifacts_dir() / problem.id / folder
    return artifacts_dir() / "single" / problem.id / folder


IMPORT_FAILURES = (Status.IMPORT_ERROR, Status.IMPORT_TIMEOUT, Status.IMPORT_CRASHED)


def exit_code(reports: list[Report], fail_under: float | None = None, import_fails: bool = False) -> ExitCode:
    """The most serious outcome first: a judge error, then (for `grade`, `import_fails`) a file refused or that
    did not import, then a score below `fail_under`."""
    judge_failed = any(
        r.status == Status.JUDGE_ERROR or any(c.verdict == Verdict.JUDGE_ERROR for c in r.checks()) for r in reports
    )
    if judge_failed:
        return ExitCode.JUDGE_ERROR
    if import_fails and any(r.status == Status.REFUSED for r in reports):
        return ExitCode.REFUSED
    if import_fails and any(r.status in IMPORT_FAILURES for r in reports):
        return ExitCode.IMPORT_FAILED
    if fail_under is not None and any(round_score(r.score) < fail_under for r in reports):
        return ExitCode.BELOW_FAIL_UNDER
    return ExitCode.OK


def grade_many(
    problem: Problem,
    files: list[Path],
    seed: int,
    limits: Limits,
    jobs: int,
    out_of: Callable[[Path], Path] | None = None,
    progress: Callable[[Report], None] | None = None,
    follow_through: bool | None = None,
) -> list[Report]:
    """One report per file, in order, whatever any file does: see `grade_into`."""
    zygote, plot_server = None, None
    try:
        # one process imports matplotlib once and forks the drawing process of each file, as the zygote below
        # does the workers; it starts first, so its import overlaps the expectations' load
        plot_server = start_plot_server(problem) if out_of and len(files) > 1 else None
        expectations = Expectations(problem, seed, say=say_stage)
        expectations.warm()
        inputs = plot_inputs(problem) if out_of else PlotInputs()
        # one process imports torch once and forks every worker of the batch; a single file is not worth it
        zygote = Zygote() if len(files) > 1 else None
    except Exception as exc:  # nothing can be graded; each file's report says why
        if plot_server is not None:
            plot_server.close()
        return [_contained(problem, file, seed, exc, out_of, progress) for file in files]

    def one(file: Path) -> Report:
        out = out_of(file) if out_of else None
        report = grade_into(
            problem,
            file,
            seed,
            limits,
            out,
            expectations,
            inputs,
            zygote,
            follow_through=follow_through,
            plot_server=plot_server,
        )
        _advance(progress, report)
        return report

    try:
        with ThreadPoolExecutor(max_workers=max(1, jobs or os.cpu_count() or 1)) as pool:
            return list(pool.map(one, files))
    finally:
        for process in (zygote, plot_server):
            if process is not None:
                process.close()


def _contained(
    problem: Problem,
    file: Path,
    seed: int,
    exc: Exception,
    out_of: Callable[[Path], Path] | None,
    progress: Callable[[Report], None] | None,
) -> Report:
    tell_instructor(file, exc)
    report = judge_error_report(problem, file, seed, exc, _command(problem, file, seed))
    if out_of is not None:
        _write_contained(problem, report, out_of(file))
    _advance(progress, report)
    return report


def _advance(progress: Callable[[Report], None] | None, report: Report) -> None:
    if progress is None:
        return
    try:
        progress(report)
    except Exception as exc:  # a progress bar that fails costs the bar, not the grade
        tell_instructor(Path(report.submission), exc)


def write_summary(reports: list[Report], path: Path) -> None:
    rows = [["submission", "status", "score", "max_score", *TIERS, "duration_s", "top_misconception"]]
    for r in sorted(reports, key=lambda r: r.submission):
        tiers = {t.tier: t.score for t in r.tiers}
        top = r.diagnosis[0].id if r.diagnosis else ""
        rows.append(
            [
                csv_cell(r.submission),
                csv_cell(r.status),
                f"{r.score:g}",
                f"{r.max_score:g}",
                *(f"{tiers.get(t, 0):g}" for t in TIERS),
                f"{r.duration_s:.2f}",
                top,
            ]
        )
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows(rows)
    write_atomic(path, buffer.getvalue())
