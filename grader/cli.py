"""Command line: grade, grade-all, previews and validate. Heavy imports wait until a command needs them."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .verdicts import ExitCode

EPILOG = "exit codes: " + ", ".join(f"{code.value} {code.name.lower()}" for code in ExitCode)


def _limit_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("limits (defaults from the problem spec)")
    group.add_argument("--call-timeout", type=float, metavar="S", help="wall time per call")
    group.add_argument("--experiment-timeout", type=float, metavar="S", help="wall time for the toy experiment")
    group.add_argument("--budget", type=float, metavar="S", help="wall time for the whole submission")
    group.add_argument("--import-timeout", type=float, metavar="S")
    group.add_argument("--cpu-time", type=int, metavar="S", help="CPU seconds per worker")
    group.add_argument("--memory-mb", type=int, metavar="MB", help="address space per worker")
    group.add_argument("--output-kb", type=int, metavar="KB", help="output kept per stream")
    group.add_argument("--file-size-mb", type=int, metavar="MB")
    group.add_argument("--max-processes", type=int, metavar="N")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="paperleet", description="Grade PyTorch implementations of paper "
                                     "equations against a hidden reference.", epilog=EPILOG)
    commands = parser.add_subparsers(dest="command", required=True)

    grade = commands.add_parser("grade", help="grade one submission file", epilog=EPILOG)
    grade.add_argument("file", type=Path)
    grade.add_argument("--problem", required=True)
    grade.add_argument("--out", type=Path, help="report folder (default artifacts/ID/<file stem>/)")
    grade.add_argument("--seed", type=int, help="grading seed (default: the problem's hidden seed)")
    grade.add_argument("--gradescope", type=Path, metavar="PATH", help="also write Gradescope's results.json here")
    grade.add_argument("--junit", type=Path, metavar="PATH", help="also write JUnit XML here")
    _limit_options(grade)

    grade_all = commands.add_parser("grade-all", help="grade every *.py in a folder", epilog=EPILOG)
    grade_all.add_argument("--problem", required=True)
    grade_all.add_argument("--submissions", type=Path, help="default submissions/ID/")
    grade_all.add_argument("--out", type=Path, help="default artifacts/ID/")
    grade_all.add_argument("--jobs", type=int, default=0, help="parallel workers (default: CPU count)")
    grade_all.add_argument("--seed", type=int)
    grade_all.add_argument("--shard", metavar="K/N", help="grade only the K-th of N slices (K from 0) of the "
                           "submissions sorted by name; then `merge` the shards' --out folders")
    _limit_options(grade_all)

    previews = commands.add_parser("previews", help="draw the reference's T3 plots", epilog=EPILOG)
    previews.add_argument("--problem", required=True)
    previews.add_argument("--out", type=Path, help="default artifacts/previews/ID/")

    validate = commands.add_parser("validate", help="prove the checks against the reference and known-wrong "
                                   "solutions", epilog=EPILOG)
    validate.add_argument("--problem", required=True)
    validate.add_argument("--jobs", type=int, default=0)

    gradescope = commands.add_parser("gradescope-zip", help="build a Gradescope autograder zip", epilog=EPILOG)
    gradescope.add_argument("--problem", required=True)
    gradescope.add_argument("--out", type=Path, help="default artifacts/gradescope/ID.zip")

    merge = commands.add_parser("merge", help="join the --out folders of grade-all shards into one class summary",
                                epilog=EPILOG)
    merge.add_argument("dirs", type=Path, nargs="+", metavar="DIR", help="grade-all --shard output folders")
    merge.add_argument("--out", type=Path, help="where summary.csv and index.html go (default: the first DIR)")

    pack = commands.add_parser("learner-pack", help="build the learner's zip: statement, starter, toy, public cases "
                               "and a `check` command", epilog=EPILOG)
    pack.add_argument("--problem", required=True)
    pack.add_argument("--out", type=Path, help="default artifacts/learner/ID.zip")
    return parser


def early_launch(args: argparse.Namespace) -> object | None:
    """Start the worker for `grade` now, so its `import torch` runs while the judge does its own."""
    from .launch import launch, limits_from
    from .paths import PROJECT_ROOT
    from .spec import SpecError, load_spec

    problem_dir = PROJECT_ROOT / "problems" / str(args.problem)
    if not args.file.is_file() or not (problem_dir / "problem.toml").is_file():
        return None  # the command proper reports the usage error
    try:
        spec = load_spec(problem_dir / "problem.toml")
        return launch(spec, None, args.file, limits_from(args, spec.limits))
    except (SpecError, OSError, ValueError):
        return None


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "grade":
        args.launched = early_launch(args)
    from . import commands  # noqa: PLC0415 - keeps `--help` free of torch's import time
    from .spec import SpecError

    try:
        return int(commands.dispatch(args))
    except SpecError as exc:
        print(f"paperleet: {exc}", file=sys.stderr)
        return int(ExitCode.USAGE)
    except commands.UsageError as exc:
        print(f"paperleet: {exc}", file=sys.stderr)
        return int(ExitCode.USAGE)
    except Exception as exc:  # noqa: BLE001 - a harness bug is a judge error, never a learner's lost points
        import traceback

        traceback.print_exc()
        print(f"paperleet: judge error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return int(ExitCode.JUDGE_ERROR)
