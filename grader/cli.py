"""Command line: each subcommand and its options. Heavy imports wait until a command needs them."""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from grader.model.verdicts import ExitCode

if TYPE_CHECKING:
    from grader.confine.launch import Launched

STARTED = time.monotonic()  # as near the process's start as this package gets: a command's wall time counts from here

MEANINGS = {
    ExitCode.OK: "grading finished, whatever the scores",
    ExitCode.VALIDATION_FAILED: "validate: the reference or a known-wrong solution did not behave as declared",
    ExitCode.JUDGE_ERROR: "the grader itself failed; a report with status or verdict judge_error says where",
    ExitCode.USAGE: "unknown problem, missing file or folder, bad option or limit, or a Python without the "
    "grader's packages",
    ExitCode.IMPORT_FAILED: "grade: the submission could not be imported (import_error, import_timeout, "
    "import_crashed)",
    ExitCode.BELOW_FAIL_UNDER: "--fail-under SCORE: a submission scored below SCORE",
    ExitCode.REFUSED: "grade: FILE is not a regular file (a symbolic link, a FIFO, a hard link...); its report has "
    "status refused and 0 points",
}
EPILOG = "exit codes:\n" + "\n".join(f"  {code.value} {code.name.lower()}: {MEANINGS[code]}" for code in ExitCode)
# what to run instead when this interpreter lacks a package the grader needs
SETUP_HINT = "run the grader with the project's environment, `.venv/bin/python -m grader ...` (`make setup` creates it)"
# pyproject.toml's dependencies, by import name (a test keeps the two equal): looked for before the parser is built,
# since building it already imports pydantic
REQUIRED_PACKAGES = ("torch", "pydantic", "rich", "matplotlib", "coverage")


class Parser(argparse.ArgumentParser):
    """argparse, with its usage errors on the documented exit code rather than its own 2."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(int(ExitCode.USAGE), f"{self.prog}: error: {message}\n")


def count(text: str) -> int:
    """A whole number >= 0 (0: one per CPU)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected 0 or more, got {value}")
    return value


def score(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of points, got {text!r}") from None
    if not value >= 0:  # NaN too
        raise argparse.ArgumentTypeError(f"expected 0 or more points, got {text}")
    return value


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


def _follow_through(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--no-follow-through",
        dest="follow_through",
        action="store_false",
        default=None,
        help="charge a diagnosed misreading in every check it fails, not only in the checks that own "
        "it (default: the problem's `follow_through`)",
    )


def _fail_under(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--fail-under",
        type=score,
        metavar="SCORE",
        help="exit 6 when a submission scores below SCORE points (a file that does not import scores 0)",
    )


def limit_error(args: argparse.Namespace) -> str | None:
    """What is wrong with the limits given on the command line, in one line naming the option; None if nothing.

    Every limit has the same bounds whatever the problem, so they are checked before any work starts."""
    from pydantic import ValidationError

    from grader.confine.launch import LIMIT_FIELDS
    from grader.model.spec import Limits

    given = {field: getattr(args, name) for name, field in LIMIT_FIELDS.items() if getattr(args, name) is not None}
    try:
        Limits.model_validate({**Limits().model_dump(), **given})
    except ValidationError as exc:
        options = {field: name for name, field in LIMIT_FIELDS.items()}
        problems = []
        for error in exc.errors():
            field = str(error["loc"][0]) if error["loc"] else ""
            option = "--" + options.get(field, field).replace("_", "-")
            problems.append(f"{option} {error.get('input')}: {error['msg'].lower()}")
        return "; ".join(problems)
    return None


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="paperleet",
        description="Grade PyTorch implementations of paper equations against a hidden reference.",
        epilog=EPILOG,
    )
    commands = parser.add_subparsers(dest="command", required=True)

    _grading_commands(commands)
    _course_commands(commands)
    _catalog_commands(commands)
    _watch_command(commands)
    return parser


def _grading_commands(commands: argparse._SubParsersAction[Parser]) -> None:
    """What graders run: grade one file, or every file of a folder."""
    grade = commands.add_parser("grade", help="grade one submission file", epilog=EPILOG)
    grade.add_argument("file", type=Path)
    grade.add_argument("--problem", required=True)
    grade.add_argument("--out", type=Path, help="report folder (default artifacts/ID/<file stem>/)")
    grade.add_argument("--seed", type=int, help="grading seed (default: the problem's hidden seed)")
    grade.add_argument("--gradescope", type=Path, metavar="PATH", help="also write Gradescope's results.json here")
    grade.add_argument("--junit", type=Path, metavar="PATH", help="also write JUnit XML here")
    _follow_through(grade)
    _fail_under(grade)
    _limit_options(grade)

    grade_all = commands.add_parser("grade-all", help="grade every *.py in a folder", epilog=EPILOG)
    grade_all.add_argument("--problem", required=True)
    grade_all.add_argument("--submissions", type=Path, help="default submissions/ID/")
    grade_all.add_argument("--out", type=Path, help="default artifacts/ID/")
    grade_all.add_argument("--jobs", type=count, default=0, help="parallel workers (default: CPU count)")
    grade_all.add_argument("--seed", type=int)
    _follow_through(grade_all)
    grade_all.add_argument(
        "--shard",
        metavar="K/N",
        help="grade only the K-th of N slices (K from 0) of the "
        "submissions sorted by name; then `merge` the shards' --out folders",
    )
    grade_all.add_argument(
        "--junit", type=Path, metavar="PATH", help="also write JUnit XML here, one testsuite per submission"
    )
    _fail_under(grade_all)
    _limit_options(grade_all)


def _course_commands(commands: argparse._SubParsersAction[Parser]) -> None:
    """What instructors run to prove, publish and gather a problem."""
    previews = commands.add_parser("previews", help="draw the reference's T3 plots", epilog=EPILOG)
    previews.add_argument("--problem", required=True)
    previews.add_argument("--out", type=Path, help="default artifacts/previews/ID/")
    previews.add_argument(
        "--force",
        action="store_true",
        help="draw them even if the problem and the plotting code are unchanged since they were drawn",
    )

    validate = commands.add_parser(
        "validate", help="prove the checks against the reference and known-wrong solutions", epilog=EPILOG
    )
    validate.add_argument("--problem", required=True)
    validate.add_argument("--jobs", type=count, default=0)

    new_problem = commands.add_parser(
        "new-problem",
        help="write the skeleton of an exercise (problems/ID/, reference/ID/) that validate accepts as written",
        epilog=EPILOG,
    )
    new_problem.add_argument("id", metavar="ID", help="the new problem's id: lowercase letters, digits, underscores")

    mutate = commands.add_parser(
        "mutate",
        help="grade mutants of the reference against the problem's cases: killed, diagnosed, survived, equivalent",
        epilog=EPILOG,
    )
    mutate.add_argument("--problem", required=True)
    mutate.add_argument("--jobs", type=count, default=2, help="mutants graded at once (default 2; 0: one per CPU)")
    mutate.add_argument("--out", type=Path, help="default artifacts/mutation/")
    mutate.add_argument("--time-limit", type=float, default=None, metavar="S", help="wall time per mutant")
    mutate.add_argument("--only", action="append", metavar="NAME", help="only this mutant (repeatable)")
    mutate.add_argument(
        "--kill-only",
        action="store_true",
        help="only which mutants survive: each is graded until a check loses points, with no diagnosis and no probe",
    )
    mutate.add_argument(
        "--record",
        type=Path,
        metavar="JSON",
        help="write the survivors into this record (tests/mutation_survivors.json)",
    )

    clauses = commands.add_parser(
        "clauses", help="print each problem's clauses, their kinds, owner checks and weights", epilog=EPILOG
    )
    clauses.add_argument("--problem", help="only this problem (default: all)")
    clauses.add_argument("--markdown", action="store_true", help="as docs/clauses.md holds it")

    known_wrong = commands.add_parser(
        "known-wrong",
        help="write the known-wrong solutions declared in reference/ID/wrong/ and print their paths",
        epilog=EPILOG,
    )
    known_wrong.add_argument("--problem", required=True)
    known_wrong.add_argument("names", nargs="*", metavar="NAME", help="only these (default: all)")

    gradescope = commands.add_parser("gradescope-zip", help="build a Gradescope autograder zip", epilog=EPILOG)
    gradescope.add_argument("--problem", required=True)
    gradescope.add_argument("--out", type=Path, help="default artifacts/gradescope/ID.zip")

    merge = commands.add_parser(
        "merge",
        help="join the --out folders of grade-all shards into one class summary, once every shard has finished",
        epilog=EPILOG,
    )
    merge.add_argument("dirs", type=Path, nargs="+", metavar="DIR", help="grade-all --shard output folders")
    merge.add_argument("--out", type=Path, help="where summary.csv and index.html go (default: the first DIR)")

    pack = commands.add_parser(
        "learner-pack",
        help="build the learner's zip: statement, starter, toy, public cases and a `check` command",
        epilog=EPILOG,
    )
    pack.add_argument("--problem", required=True)
    pack.add_argument("--out", type=Path, help="default artifacts/learner/ID.zip")


def _catalog_commands(commands: argparse._SubParsersAction[Parser]) -> None:
    """What exists, what a learner has done, and a set of problems for a course."""
    from grader.model.spec import DIFFICULTIES  # pydantic only: `--help` stays free of torch

    problems = commands.add_parser(
        "problems", help="list the exercises: papers, tags, difficulty, order", epilog=EPILOG
    )
    problems.add_argument("--tag", action="append", default=[], help="only exercises with this tag (repeatable: all)")
    problems.add_argument("--difficulty", choices=DIFFICULTIES)
    problems.add_argument("--json", action="store_true", help="print JSON for tools instead of the table")

    progress = commands.add_parser(
        "progress",
        help="your best and last score per problem, checks still failing, misreadings that recur",
        epilog=EPILOG,
    )
    progress.add_argument(
        "--out",
        type=Path,
        action="append",
        metavar="DIR",
        help="a folder your grades were written to (grade or watch --out, a learner pack's reports/); "
        "repeatable; default artifacts/single/, where grade and watch write without --out",
    )
    progress.add_argument("--json", action="store_true", help="print JSON instead of the table")

    course = commands.add_parser(
        "course-set",
        help="build learner packs, Gradescope zips and a handout index for a set of problems",
        epilog=EPILOG,
    )
    chosen = course.add_mutually_exclusive_group(required=True)
    chosen.add_argument("--problems", nargs="+", metavar="ID", help="these problems")
    chosen.add_argument("--tag", help="every problem with this tag")
    course.add_argument("--out", type=Path, help="default artifacts/course/<name>/")
    course.add_argument("--name", help="the set's name, in the handout's title and the default folder")


def _watch_command(commands: argparse._SubParsersAction[Parser]) -> None:
    """The learner's loop: grade a file again on every save."""
    watch = commands.add_parser("watch", help="grade a file again each time it is saved, until Ctrl-C", epilog=EPILOG)
    watch.add_argument("file", type=Path)
    watch.add_argument("--problem", required=True)
    watch.add_argument("--out", type=Path, help="report folder, rewritten after each save (default: as grade's)")
    watch.add_argument("--seed", type=int, help="grading seed (default: the problem's hidden seed)")
    watch.add_argument(
        "--debounce",
        type=float,
        metavar="S",
        help="seconds a save must stay unchanged before its grade is shown (default 0.2)",
    )
    _limit_options(watch)


Early = tuple["Launched | None", "subprocess.Popen[str] | None"]


def early_launch(args: argparse.Namespace) -> Early:
    """Start the worker for `grade` now, so its `import torch` runs while the judge does its own, and then the
    process that draws its plots, so its `import matplotlib` runs then too."""
    from grader.confine.intake import read_submission
    from grader.confine.launch import launch, limits_from
    from grader.model.spec import SpecError, load_spec
    from grader.outputs.drawing import start_drawing
    from grader.paths import PROJECT_ROOT

    problem_dir = PROJECT_ROOT / "problems" / str(args.problem)
    if not (problem_dir / "problem.toml").is_file():
        return None, None  # the command proper reports the usage error
    submission = read_submission(args.file)  # the one read: the worker imports these bytes, the report hashes them
    if submission.refusal:
        return None, None  # the command proper writes the refused report (or the usage error)
    try:
        spec = load_spec(problem_dir / "problem.toml")
        launched = launch(spec, None, submission, limits_from(args, spec.limits))
    except (SpecError, OSError, ValueError):
        return None, None
    try:
        return launched, start_drawing() if spec.plots else None
    except OSError:
        return launched, None  # the plots' own start says why, later


def missing_package() -> str | None:
    """The first package the grader needs that this interpreter lacks, found without importing any of them."""
    return next((name for name in REQUIRED_PACKAGES if importlib.util.find_spec(name) is None), None)


def _setup_hint(missing: str | None) -> int:
    print(f"paperleet: this Python ({sys.executable}) has no module {missing!r}; {SETUP_HINT}", file=sys.stderr)
    return int(ExitCode.USAGE)


def main(argv: list[str] | None = None) -> int:
    if (missing := missing_package()) is not None:
        return _setup_hint(missing)
    args = build_parser().parse_args(argv)
    args.started = STARTED if argv is None else time.monotonic()
    try:
        return _run(args)
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] in ("grader", ""):
            raise
        return _setup_hint(exc.name)  # a package one of the required ones needs in turn


def _run(args: argparse.Namespace) -> int:
    if hasattr(args, "call_timeout") and (problem := limit_error(args)) is not None:
        print(f"paperleet: {problem}", file=sys.stderr)
        return int(ExitCode.USAGE)
    launched, drawing = early_launch(args) if args.command == "grade" else (None, None)
    from grader import commands, engine  # here, not at the top: keeps `--help` free of torch's import time
    from grader.model.spec import SpecError

    try:
        return int(commands.dispatch(args, launched, drawing))
    except SpecError as exc:
        print(f"paperleet: {exc}", file=sys.stderr)
        return int(ExitCode.USAGE)
    except engine.UsageError as exc:
        print(f"paperleet: {exc}", file=sys.stderr)
        return int(ExitCode.USAGE)
    except Exception as exc:  # a harness bug is a judge error, never a learner's lost points
        import traceback

        traceback.print_exc()
        print(f"paperleet: judge error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return int(ExitCode.JUDGE_ERROR)
