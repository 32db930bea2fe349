"""The work behind each CLI command: grade, grade-all, previews, validate."""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import re
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from grader.confine.intake import usage_problem
from grader.confine.launch import Launched, limits_from
from grader.course.shards import Shard, ShardError, merge, parse_shard
from grader.course.validate import run_validation
from grader.engine import (
    UsageError,
    artifacts_dir,
    exit_code,
    grade_into,
    grade_many,
    say_stage,
    single_out,
    write_summary,
)
from grader.judge.expectations import Expectations
from grader.model.problem import Problem, list_problems
from grader.model.report import Report, write_atomic
from grader.model.verdicts import ExitCode
from grader.outputs.containment import tell_instructor
from grader.outputs.exports import class_junit_xml, gradescope_refusal, write_exports
from grader.outputs.pages import write_dashboard
from grader.outputs.plots import draw
from grader.outputs.terminal import grading_progress, print_class_table, print_report
from grader.paths import PROJECT_ROOT
from grader.text import clean_line, submission_folder


def cmd_grade(
    args: argparse.Namespace, launched: Launched | None = None, drawing: subprocess.Popen[str] | None = None
) -> ExitCode:
    """`grade`; `launched` is the file's worker and `drawing` the process that draws its plots, both started before
    this module's imports (see `cli.early_launch`)."""
    started = getattr(args, "started", time.monotonic())
    problem = Problem(args.problem)
    wrong = usage_problem(args.file)  # a link, dangling or not, or a FIFO is graded: its report refuses it
    if wrong == "is a folder":
        raise UsageError(
            f"{args.file} is a folder; expected a Python file with your solution (to grade every file "
            f"of a folder: grade-all --problem {problem.id} --submissions {args.file})"
        )
    if wrong is not None:
        raise UsageError(f"{args.file}: {wrong}; expected a Python file with your solution")
    if args.gradescope is not None and (why := gradescope_refusal(problem.spec.checks)) is not None:
        raise UsageError(why)
    seed = problem.grading_seeds[0] if args.seed is None else args.seed
    out = args.out or single_out(problem, args.file)
    class_dir = (artifacts_dir() / problem.id).resolve()
    replaced = out.resolve().is_relative_to(class_dir) and (out / "report.json").is_file()
    report = grade_into(
        problem,
        args.file,
        seed,
        limits_from(args, problem.spec.limits),
        out,
        launched=launched,
        follow_through=getattr(args, "follow_through", None),
        drawing=drawing,
    )
    write_exports(report, gradescope=args.gradescope, junit=args.junit, execution_s=time.monotonic() - started)
    print_report(report, out / "report.json")
    if replaced:
        print(
            f"replaced the class report in {out}; {problem.id}'s summary.csv and index.html show the new grade "
            "after the next grade-all"
        )
    return exit_code([report], args.fail_under, import_fails=True)


def submission_files(folder: Path) -> list[Path]:
    """The entries of `folder` named `.py` (in any case), sorted; what else it holds is named on stdout, with why.

    Listed by name alone, following nothing: a link, FIFO or anything but a regular file named `.py` is listed
    too, and refused when it is read (`intake.read_submission`), with a report that says so and scores 0."""
    if not folder.is_dir():
        raise UsageError(f"{folder}: no such folder; expected a folder of submissions like {folder}/<learner>.py")
    files, forks, others = [], [], []
    for path in sorted(p for p in folder.iterdir() if p.is_symlink() or not p.is_dir()):
        if path.name.startswith("._"):
            forks.append(path.name)  # AppleDouble: the metadata macOS zips beside a file, never Python
        elif path.suffix.lower() == ".py":
            files.append(path)
        else:
            others.append(path.name)
    for names, why in ((forks, "macOS resource forks, not Python"), (others, "not .py files")):
        if names:
            shown = ", ".join(clean_line(name, 80) for name in names[:5]) + (", ..." if len(names) > 5 else "")
            print(f"skipped {len(names)} file{'s' if len(names) > 1 else ''} of {folder} ({why}): {shown}")
    if not files:
        raise UsageError(f"{folder}: no *.py submissions found; expected files like {folder}/<learner>.py")
    return files


def cmd_grade_all(args: argparse.Namespace) -> ExitCode:
    shard = _shard_of(args)
    problem = Problem(args.problem)
    folder = args.submissions or PROJECT_ROOT / "submissions" / problem.id
    files = submission_files(folder)
    out = args.out or artifacts_dir() / problem.id
    if shard is not None:
        files = shard.select(files)
        # gone until this run finishes: `merge` takes a shard without its summary for one killed mid-grade
        shard.summary(out).unlink(missing_ok=True)
        if not files:
            write_summary([], shard.summary(out))  # `merge` expects every shard's summary, an empty one too
            print(f"shard {shard}: no submission of {folder} falls in this slice; nothing to grade")
            return ExitCode.OK
    seed = problem.grading_seeds[0] if args.seed is None else args.seed
    with grading_progress(len(files)) as progress:
        reports = grade_many(
            problem,
            files,
            seed,
            limits_from(args, problem.spec.limits),
            args.jobs,
            out_of=lambda f: out / submission_folder(f.name),
            progress=progress,
            follow_through=getattr(args, "follow_through", None),
        )
    if args.junit is not None:
        write_atomic(args.junit, class_junit_xml(reports))
    if shard is not None:
        code = _finish_shard(reports, out, shard)
    else:
        code = _finish_class(reports, out, [submission_folder(f.name) for f in files])
    return code if code != ExitCode.OK else exit_code(reports, args.fail_under)


def _finish_class(reports: list[Report], out: Path, folders: Sequence[str]) -> ExitCode:
    """The class outputs: summary.csv and the dashboard beside the reports, and the table on the terminal.

    Each is written whatever happened to the others; `folders[i]` holds `reports[i]`'s pages."""
    summary = out / "summary.csv"
    dashboard: list[Path] = []
    failed = _each(
        [
            lambda: write_summary(reports, summary),
            lambda: dashboard.append(write_dashboard(reports, out, folders)),
            lambda: print_class_table(reports, summary, dashboard[0] if dashboard else None),
        ]
    )
    return ExitCode.JUDGE_ERROR if failed else exit_code(reports)


def _each(steps: list[Callable[[], object]]) -> bool:
    """Run every step; say on stderr which failed and why. True when any did."""
    failed = False
    for step in steps:
        try:
            step()
        except Exception as exc:  # one class output failing must not cost the others
            tell_instructor(Path("class outputs"), exc)
            failed = True
    return failed


# What a preview's pixels depend on besides the problem's own files: the grader's code that runs the toy and draws.
PREVIEW_CODE = ("judge/experiment.py", "judge/expectations.py", "outputs/plots.py", "outputs/figures.py")
PREVIEW_STAMP = ".drawn"  # in the previews folder: the key of the inputs the previews there were drawn from


def previews_key(problem: Problem) -> str:
    digest = hashlib.sha256(problem.content_hash.encode())
    for name in PREVIEW_CODE:
        digest.update((Path(__file__).resolve().parent / name).read_bytes())
    digest.update(importlib.metadata.version("matplotlib").encode())
    return digest.hexdigest()


def cmd_previews(args: argparse.Namespace) -> ExitCode:
    """Draw the previews, unless those in the folder were drawn from the same problem and plotting code."""
    problem = Problem(args.problem)
    out = args.out or artifacts_dir() / "previews" / problem.id
    key, stamp = previews_key(problem), out / PREVIEW_STAMP
    files = [plot.file for plot in problem.spec.plots]
    if (
        not args.force
        and stamp.is_file()
        and stamp.read_text() == key
        and all((out / file).is_file() for file in files)
    ):
        print(f"previews in {out} are up to date: {', '.join(files)}")
        return ExitCode.OK
    stamp.unlink(missing_ok=True)
    print(f"{problem.id}: drawing the reference previews (first run, or the problem or plotting code changed)")
    public = Expectations(problem, problem.spec.public_seed, say=say_stage)
    series = public.series()
    public.persist()  # the grades that follow overlay the same series: they read them rather than run the toy again
    written = draw(problem.spec.plots, series, out, note="reference preview", reference=True)
    if sorted(written) == sorted(files):
        write_atomic(stamp, key)
    print(f"wrote {len(written)} previews to {out}: {', '.join(written)}")
    return ExitCode.OK


def cmd_validate(args: argparse.Namespace) -> ExitCode:
    problem = Problem(args.problem)

    def grade(files: list[Path], seed: int) -> list[Report]:
        return grade_many(problem, files, seed, problem.spec.limits, args.jobs)

    ok = run_validation(problem, grade)
    return ExitCode.OK if ok else ExitCode.VALIDATION_FAILED


def cmd_new_problem(args: argparse.Namespace) -> ExitCode:
    """The skeleton of a new exercise under the project root, then the commands to run next."""
    from grader.course.new_problem import write_skeleton

    for path in write_skeleton(PROJECT_ROOT, args.id):
        print(f"wrote {path.relative_to(PROJECT_ROOT)}")
    print(f"next: .venv/bin/python -m grader validate --problem {args.id}")
    return ExitCode.OK


def cmd_known_wrong(args: argparse.Namespace) -> ExitCode:
    """The materialized known-wrong files, one path a line, relative to the project root where they lie in it."""
    problem = Problem(args.problem)
    paths = [problem.known_wrong_file(name) for name in args.names] or [k.path for k in problem.known_wrong()]
    for path in paths:
        print(path.relative_to(PROJECT_ROOT) if path.is_relative_to(PROJECT_ROOT) else path)
    return ExitCode.OK


def cmd_mutate(args: argparse.Namespace) -> ExitCode:
    """Mutation analysis of one problem (`course/mutation.py`), written to artifacts/mutation/ID.json."""
    import os

    from grader.course.mutation import (
        TIME_LIMIT_S,
        ReferenceNotFull,
        analyse,
        record_survivors,
        summary_lines,
        write_analysis,
    )

    if args.record is not None and args.only:
        print("--record needs every mutant: leave out --only", file=sys.stderr)
        return ExitCode.USAGE
    problem = Problem(args.problem)
    try:
        analysis = analyse(
            problem,
            workers=args.jobs or os.cpu_count() or 1,
            time_limit_s=args.time_limit or TIME_LIMIT_S,
            only=args.only,
            say=say_stage,
            kill_only=args.kill_only,
        )
    except ReferenceNotFull as exc:
        print(exc, file=sys.stderr)
        return ExitCode.JUDGE_ERROR
    path = write_analysis(analysis, args.out or artifacts_dir() / "mutation")
    if args.record is not None:
        record_survivors(analysis, args.record)
    print("\n".join(summary_lines(analysis)))
    print(f"wrote {path}")
    return ExitCode.JUDGE_ERROR if analysis.count("error") else ExitCode.OK


def cmd_clauses(args: argparse.Namespace) -> ExitCode:
    from grader.course.clauses import clauses_markdown, clauses_text

    ids = [args.problem] if args.problem else list_problems()
    specs = [Problem(problem_id).spec for problem_id in ids]
    sys.stdout.write(clauses_markdown(specs) if args.markdown else clauses_text(specs))
    return ExitCode.OK


def cmd_gradescope_zip(args: argparse.Namespace) -> ExitCode:
    from grader.course.gradescope_zip import build_zip

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
    summary = shard.summary(out)
    failed = _each([lambda: write_summary(reports, summary), lambda: print_class_table(reports, summary)])
    return ExitCode.JUDGE_ERROR if failed else exit_code(reports)


def cmd_merge(args: argparse.Namespace) -> ExitCode:
    out = args.out or args.dirs[0]
    try:
        merged = merge(args.dirs, out)
    except ShardError as exc:
        raise UsageError(str(exc)) from None
    return _finish_class([item.report for item in merged], out, [item.folder.name for item in merged])


def cmd_learner_pack(args: argparse.Namespace) -> ExitCode:
    from grader.course.learner_pack import build_pack

    problem = Problem(args.problem)
    out = args.out or artifacts_dir() / "learner" / f"{problem.id}.zip"
    names = build_pack(problem, out)
    print(f"wrote {out} ({len(names)} files); learners unzip it and run `python check FILE` in {problem.id}/")
    return ExitCode.OK


def cmd_problems(args: argparse.Namespace) -> ExitCode:
    from grader.course.catalog import load_catalog, print_catalog, select

    print_catalog(select(load_catalog(), args.tag, args.difficulty), as_json=args.json)
    return ExitCode.OK


def cmd_progress(args: argparse.Namespace) -> ExitCode:
    from grader.course.catalog import problem_specs
    from grader.outputs.progress import print_progress, progress_of, read_attempt, report_files

    folders = args.out or [artifacts_dir() / "single"]
    missing = [str(folder) for folder in folders if not folder.is_dir()]
    if missing:
        raise UsageError(f"no such folder: {', '.join(missing)}; expected a folder your grades were written to")
    attempts = [a for a in map(read_attempt, report_files(folders)) if a is not None]
    titles = {spec.id: spec.title for spec in problem_specs()}
    print_progress(progress_of(attempts), titles, as_json=args.json)
    return ExitCode.OK


def cmd_course_set(args: argparse.Namespace) -> ExitCode:
    from grader.course.catalog import load_catalog
    from grader.course.course_set import INDEX, CourseSetError, build_course_set, choose

    try:
        chosen = choose(load_catalog(), args.problems or (), args.tag)
    except CourseSetError as exc:
        raise UsageError(str(exc)) from None
    name = args.name or (f"problems tagged {args.tag}" if args.tag else "Problem set")
    folder = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:60] or "problem-set"
    out = args.out or artifacts_dir() / "course" / folder
    built = build_course_set(chosen, out, name)
    for item in built:
        print(f"{item.entry.id}: {item.pack.relative_to(out)}, {item.autograder.relative_to(out)}")
    print(f"wrote {len(built)} learner packs, {len(built)} Gradescope zips and {out / INDEX}")
    return ExitCode.OK


def cmd_watch(args: argparse.Namespace) -> ExitCode:
    from grader.watch.warm import cmd_watch as watch

    return watch(args)


def dispatch(
    args: argparse.Namespace, launched: Launched | None = None, drawing: subprocess.Popen[str] | None = None
) -> ExitCode:
    """Run the command `args` name; `launched` and `drawing` are `grade`'s early worker and drawing process, if
    they were started."""
    if args.command == "grade":
        try:
            return cmd_grade(args, launched, drawing)
        finally:
            if drawing is not None and drawing.poll() is None:  # a usage error came before any plot was asked
                drawing.kill()
                drawing.communicate()
    handlers = {"grade-all": cmd_grade_all, "previews": cmd_previews, "validate": cmd_validate}
    handlers["gradescope-zip"] = cmd_gradescope_zip
    handlers["known-wrong"] = cmd_known_wrong
    handlers["new-problem"] = cmd_new_problem
    handlers["clauses"] = cmd_clauses
    handlers["mutate"] = cmd_mutate
    handlers["merge"] = cmd_merge
    handlers["learner-pack"] = cmd_learner_pack
    handlers["watch"] = cmd_watch
    handlers["problems"] = cmd_problems
    handlers["progress"] = cmd_progress
    handlers["course-set"] = cmd_course_set
    return handlers[args.command](args)
