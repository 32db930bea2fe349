"""The work behind each CLI command: grade, grade-all, previews, validate."""

from __future__ import annotations

import argparse
import csv
import io
import os
import shlex
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .expectations import Expectations
from .exports import write_exports
from .judge import Graded, grade
from .launch import limits_from
from .pages import write_dashboard, write_report_page
from .plots import PlotJob, draw
from .problem import PROJECT_ROOT, Problem
from .report import Report, write_atomic, write_report
from .shards import Shard, ShardError, merge, parse_shard
from .spec import Limits
from .summary import grading_progress, print_class_table, print_report
from .validate import run_validation
from .verdicts import ExitCode, Status, Verdict
from .zygote import Zygote


class UsageError(Exception):
    """The command line asked for something that cannot be done; the message says what was expected."""


def artifacts_dir() -> Path:
    return Path(os.environ.get("PAPERLEET_ARTIFACTS", PROJECT_ROOT / "artifacts"))


def start_plots(problem: Problem, out_dir: Path) -> PlotJob:
    """Clear the previous run's plots and start drawing this run's as soon as its series arrive."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for plot in problem.spec.plots:
        (out_dir / plot.file).unlink(missing_ok=True)
    return PlotJob(problem.spec.plots, out_dir, note="drawn from your functions")


def write_outputs(problem: Problem, graded: Graded, out_dir: Path, plots: PlotJob | None = None) -> Report:
    """Plots first, then the report, atomically, once every process of the submission is gone."""
    report = graded.report
    started = time.perf_counter()
    plots = plots or start_plots(problem, out_dir)
    plots.submit(graded.series)
    report.artifacts = plots.result()
    report.phases["plots_wait"] = round(time.perf_counter() - started, 4)
    started = time.perf_counter()
    write_report(report, out_dir / "report.json")
    report.phases["report"] = round(time.perf_counter() - started, 4)
    write_report_page(problem, report, out_dir, artifacts_dir() / "previews" / problem.id)
    return report


def _command(problem: Problem, file: Path, seed: int) -> str:
    return shlex.join(["python", "-m", "grader", "grade", str(file), "--problem", problem.id, "--seed", str(seed)])


def cmd_grade(args: argparse.Namespace) -> ExitCode:
    problem = Problem(args.problem)
    if not args.file.is_file():
        raise UsageError(f"{args.file}: no such file; expected a Python file with your solution")
    seed = problem.grading_seeds[0] if args.seed is None else args.seed
    out = args.out or artifacts_dir() / problem.id / args.file.stem
    plots = start_plots(problem, out)
    graded = grade(problem, args.file, seed, limits_from(args, problem.spec.limits),
                   command=_command(problem, args.file, seed), launched=getattr(args, "launched", None),
                   series_sink=plots.submit)
    report = write_outputs(problem, graded, out, plots)
    write_exports(report, gradescope=args.gradescope, junit=args.junit)
    print_report(report, out / "report.json")
    return exit_code([report])


def exit_code(reports: list[Report]) -> ExitCode:
    judge_failed = any(r.status == Status.JUDGE_ERROR or any(c.verdict == Verdict.JUDGE_ERROR for c in r.checks())
                       for r in reports)
    return ExitCode.JUDGE_ERROR if judge_failed else ExitCode.OK


def grade_many(problem: Problem, files: list[Path], seed: int, limits: Limits, jobs: int,
               out_of: Callable[[Path], Path] | None = None, progress: Callable[[Report], None] | None = None,
               ) -> list[Report]:
    expectations = Expectations(problem, seed)
    expectations.warm()
    # one process imports torch once and forks every worker of the batch; a single file is not worth it
    zygote = Zygote() if len(files) > 1 else None

    def one(file: Path) -> Report:
        plots = start_plots(problem, out_of(file)) if out_of else None
        graded = grade(problem, file, seed, limits, expectations=expectations, zygote=zygote,
                       command=_command(problem, file, seed), series_sink=plots.submit if plots else None)
        report = write_outputs(problem, graded, out_of(file), plots) if out_of else graded.report
        if progress:
            progress(report)
        return report

    try:
        with ThreadPoolExecutor(max_workers=max(1, jobs or os.cpu_count() or 1)) as pool:
            return list(pool.map(one, files))
    finally:
        if zygote is not None:
            zygote.close()


def write_summary(reports: list[Report], path: Path) -> None:
    rows = [["submission", "status", "score", "max_score", "T0", "T1", "T2", "T3", "duration_s"]]
    for r in sorted(reports, key=lambda r: r.submission):
        tiers = {t.tier: t.score for t in r.tiers}
        rows.append([r.submission, r.status, f"{r.score:g}", f"{r.max_score:g}",
                     *(f"{tiers.get(t, 0):g}" for t in ("T0", "T1", "T2", "T3")), f"{r.duration_s:.2f}"])
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows(rows)
    write_atomic(path, buffer.getvalue())


def cmd_grade_all(args: argparse.Namespace) -> ExitCode:
    shard = _shard_of(args)
    problem = Problem(args.problem)
    folder = args.submissions or PROJECT_ROOT / "submissions" / problem.id
    files = sorted(p for p in folder.glob("*.py") if p.is_file())
    if not files:
        raise UsageError(f"{folder}: no *.py submissions found; expected files like {folder}/<learner>.py")
    out = args.out or artifacts_dir() / problem.id
    if shard is not None:
        files = shard.select(files)
        if not files:
            out.mkdir(parents=True, exist_ok=True)  # `merge` reads every shard's folder, an empty one too
            print(f"shard {shard}: no submission of {folder} falls in this slice; nothing to grade")
            return ExitCode.OK
    seed = problem.grading_seeds[0] if args.seed is None else args.seed
    with grading_progress(len(files)) as progress:
        reports = grade_many(problem, files, seed, limits_from(args, problem.spec.limits), args.jobs,
                             out_of=lambda f: out / f.stem, progress=progress)
    if shard is not None:
        return _finish_shard(reports, out, shard)
    return _finish_class(reports, out)


def _finish_class(reports: list[Report], out: Path) -> ExitCode:
    """The class outputs: summary.csv and the dashboard beside the reports, and the table on the terminal."""
    write_summary(reports, out / "summary.csv")
    dashboard = write_dashboard(reports, out)
    print_class_table(reports, out / "summary.csv", dashboard)
    return exit_code(reports)


def cmd_previews(args: argparse.Namespace) -> ExitCode:
    problem = Problem(args.problem)
    out = args.out or artifacts_dir() / "previews" / problem.id
    series = Expectations(problem, problem.spec.public_seed).series()
    written = draw(problem.spec.plots, series, out, note="reference preview", reference=True)
    print(f"wrote {len(written)} previews to {out}: {', '.join(written)}")
    return ExitCode.OK


def cmd_validate(args: argparse.Namespace) -> ExitCode:
    problem = Problem(args.problem)
    ok = run_validation(problem, lambda files, seed: grade_many(
        problem, files, seed, problem.spec.limits, args.jobs))
    return ExitCode.OK if ok else ExitCode.VALIDATION_FAILED


def cmd_gradescope_zip(args: argparse.Namespace) -> ExitCode:
    from .gradescope_zip import build_zip

    problem = Problem(args.problem)
    out = args.out or artifacts_dir() / "gradescope" / f"{problem.id}.zip"
    names = build_zip(problem, out)
    print(f"wrote {out} ({len(names)} files); upload it as the assignment's autograder")
    return ExitCode.OK


def _shard_of(args: argparse.Namespace) -> Shard | None:
    try:
        return parse_shard(args.shard) if getattr(args, "shard", None) is not None else None
    except ShardError as exc:
        raise UsageError(str(exc)) from None


def _finish_shard(reports: list[Report], out: Path, shard: Shard) -> ExitCode:
    """A shard writes its own summary aside; the class summary and dashboard wait for `merge`."""
    summary = out / "shards" / f"shard-{shard.index}-of-{shard.count}.csv"
    write_summary(reports, summary)
    print_class_table(reports, summary)
    return exit_code(reports)


def cmd_merge(args: argparse.Namespace) -> ExitCode:
    out = args.out or args.dirs[0]
    try:
        reports = merge(args.dirs, out)
    except ShardError as exc:
        raise UsageError(str(exc)) from None
    return _finish_class(reports, out)


def cmd_learner_pack(args: argparse.Namespace) -> ExitCode:
    from .learner_pack import build_pack

    problem = Problem(args.problem)
    out = args.out or artifacts_dir() / "learner" / f"{problem.id}.zip"
    names = build_pack(problem, out)
    print(f"wrote {out} ({len(names)} files); learners unzip it and run `python check FILE` in {problem.id}/")
    return ExitCode.OK


def dispatch(args: argparse.Namespace) -> ExitCode:
    handlers = {"grade": cmd_grade, "grade-all": cmd_grade_all, "previews": cmd_previews, "validate": cmd_validate}
    handlers["gradescope-zip"] = cmd_gradescope_zip
    handlers["merge"] = cmd_merge
    handlers["learner-pack"] = cmd_learner_pack
    return handlers[args.command](args)
