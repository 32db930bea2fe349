"""Inside a learner pack: `check FILE` grades a file on the pack's public cases, in the official sandbox, with the
official checks; `check --watch FILE` grades it again each time it is saved.

The pack's cases and the reference's observations are loaded once; each grade runs in a fresh sandboxed worker and
rewrites `reports/<file stem>.json`, the learner's view of the report.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import importlib.util
import io
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, NoReturn

import torch
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from grader.confine.intake import usage_problem
from grader.judge.cases import Call
from grader.judge.expectations import LOWER
from grader.judge.grading import grade
from grader.model.problem import load_module
from grader.model.report import Report, write_atomic
from grader.model.spec import CheckSpec, ProblemSpec, load_spec
from grader.model.verdicts import ExitCode, Status, Verdict
from grader.outputs.learner_view import learner_view
from grader.outputs.terminal import STYLE, fit_message, full_messages
from grader.watch.loop import Outcome, Snapshot, watch

if TYPE_CHECKING:
    from grader.outputs.plots import PlotJob


DATA_FILE = "public_cases.pt"
DATA_FORMAT = 1
HIDDEN_NOTE = "graded only by the official grader, on cases from hidden seeds"
NO_MATPLOTLIB = "plots: not drawn, matplotlib is not installed (python -m pip install matplotlib); the T3 checks ran"
# The exit codes a learner can meet, in their words.
CHECK_EXIT_CODES = {
    ExitCode.OK: "your file was graded, whatever its score",
    ExitCode.JUDGE_ERROR: "the pack itself failed; not a fault of your code",
    ExitCode.USAGE: "usage: no such file, a bad option, or a package missing (see README.md)",
    ExitCode.IMPORT_FAILED: "your file could not be imported (the table says why)",
    ExitCode.REFUSED: "FILE is not a regular file (a symbolic link, a FIFO, a hard link): check a plain copy",
}


def public_spec(spec: ProblemSpec) -> ProblemSpec:
    """The spec restricted to its public checks; each tier is worth what its public checks are worth."""
    checks = [c for c in spec.checks if c.public]
    tiers = []
    for tier in spec.tiers:
        points = sum(c.points for c in checks if c.tier == tier.id)
        if points > 0:
            tiers.append(tier.model_copy(update={"points": points}))
    owned = {c.clause for c in checks}  # a clause only hidden checks own is not part of the public grade
    clauses = [c.model_dump() for c in spec.clauses if c.id in owned]
    return ProblemSpec.model_validate(
        {
            **spec.model_dump(),
            "tiers": [t.model_dump() for t in tiers],
            "checks": [c.model_dump() for c in checks],
            "clauses": clauses,
        }
    )


def hidden_checks(spec: ProblemSpec) -> list[CheckSpec]:
    return [c for c in spec.checks if not c.public]


@dataclass(frozen=True)
class PackedProblem:
    """What `judge.grade` reads of a problem, from an unpacked pack: its id, public spec, toy and a hash."""

    id: str
    spec: ProblemSpec
    full_spec: ProblemSpec
    experiment_path: Path
    content_hash: str
    misconceptions: tuple[()] = ()  # the pack carries no misreading's solution

    @property
    def experiment_module(self) -> ModuleType:
        """The toy, run on this side of the pack's sandbox, as the official grader runs it."""
        return load_module(f"paperleet_experiment_{self.id}", self.experiment_path)

    @classmethod
    def load(cls, root: Path) -> PackedProblem:
        full = load_spec(root / "problem.toml")
        digest = hashlib.sha256()
        for name in ("problem.toml", "experiment.py", DATA_FILE):
            digest.update((root / name).read_bytes())
        return cls(full.id, public_spec(full), full, root / "experiment.py", digest.hexdigest())


class PackedCases:
    """The pack's public cases and expected observations, in the shape `judge.grade` asks `Expectations` for."""

    def __init__(self, path: Path) -> None:
        data = torch.load(io.BytesIO(path.read_bytes()), weights_only=True)
        if not isinstance(data, dict) or data.get("format") != DATA_FORMAT:
            raise ValueError(f"{path} is not a learner pack's public cases (format {DATA_FORMAT})")
        self.seed: int = data["seed"]
        self._calls = {name: [Call.from_data(c) for c in calls] for name, calls in data["cases"].items()}
        self._observations: dict[str, list[dict[str, Any]]] = data["observations"]
        self._series: dict[str, torch.Tensor] = data["series"]
        self._series_parts: dict[str, str] = dict(data.get("series_parts", {}))

    def warm(self) -> None:
        """Nothing to compute: the pack holds every expectation precomputed."""

    def cases(self, name: str) -> list[Call]:
        return self._calls[name]

    def observation(self, source: str, name: str, index: int) -> dict[str, Any]:
        return self._observations[f"{source}/{name}"][index]

    def lower_observation(self, source: str, name: str, index: int) -> dict[str, Any] | None:
        return self._observations.get(f"{LOWER}{source}/{name}", [{}] * (index + 1))[index] or None

    def series(self) -> dict[str, torch.Tensor]:
        return self._series

    def series_parts(self) -> dict[str, str]:
        return self._series_parts

    def misconception_observations(self, name: str, index: int) -> dict[str, dict[str, Any]]:
        return {}  # the pack ships no misreading's solution

    def misconception_series(self) -> dict[str, dict[str, torch.Tensor]]:
        return {}


def plots_folder(report_path: Path) -> Path:
    """Where `check` draws the plots of the file whose report is `report_path`."""
    return report_path.with_name(f"{report_path.stem}_plots")


def start_plots(problem: PackedProblem, cases: PackedCases, report_path: Path) -> PlotJob | None:
    """A drawing process for one check's plots, started before the grade so that matplotlib's import overlaps it;
    None when the problem draws nothing or matplotlib is missing. The previous check's plots go first."""
    plots = problem.full_spec.plots
    if not plots or importlib.util.find_spec("matplotlib") is None:
        return None
    from grader.outputs.plots import PlotJob, preview_file, series_tolerances  # only a pack that can draw needs it

    out = plots_folder(report_path)
    for plot in plots:
        (out / plot.file).unlink(missing_ok=True)
        (out / preview_file(plot.file)).unlink(missing_ok=True)
    return PlotJob(plots, out, preview=cases.series(), tolerances=series_tolerances(problem.full_spec.checks))


def finish_plots(
    problem: PackedProblem, job: PlotJob | None, report_path: Path, toy_stopped: dict[str, str] | None = None
) -> str:
    """Wait for the drawing and say, in one line, where the plots are or why any is missing (`toy_stopped`: the
    toy's parts that gave no series, and why)."""
    if not problem.full_spec.plots:
        return ""
    if job is None:
        return NO_MATPLOTLIB
    from grader.outputs.plots import toy_failures

    written = job.result()
    notes = " ".join(note for note in (job.notes(), toy_failures(toy_stopped or {})) if note)
    missing = f" {notes}" if notes else ""
    if not written:
        return f"plots: none drawn.{missing}"
    return f"plots: {len(written)} in {plots_folder(report_path)}{missing}"


def learner_report(report: Report, full_spec: ProblemSpec) -> dict[str, Any]:
    """The learner's view of a grade on the public cases, the hidden checks it did not run, and what the
    learner's own code printed (every case here is public, so nothing in it can be secret)."""
    hidden = [
        {"id": c.id, "tier": c.tier, "title": c.title, "max_score": c.points, "note": HIDDEN_NOTE}
        for c in hidden_checks(full_spec)
    ]
    return {
        **learner_view(report),
        "scope": "public cases",
        "official_max_score": full_spec.max_score,
        "hidden_checks": hidden,
        "stdout": report.stdout,
        "stderr": report.stderr,
    }


def _rows(view: dict[str, Any], full_spec: ProblemSpec) -> list[tuple[str, ...]]:
    """One row per check of the spec, in its order: a public check's result, or a hidden check's note."""
    ran = {check["id"]: (tier["tier"], check) for tier in view["tiers"] for check in tier["checks"]}
    rows: list[tuple[str, ...]] = []
    for spec in full_spec.checks:
        if spec.id not in ran:
            rows.append((spec.tier, spec.id, "", "[dim]hidden[/]", f"-/{spec.points:g}", f"[dim]{HIDDEN_NOTE}[/]"))
            continue
        tier, check = ran[spec.id]
        verdict = Verdict(check["verdict"])
        cases = f"{check['cases_passed']}/{check['cases_total']}" if check["cases_total"] else ""
        message = "" if verdict == Verdict.PASS else escape(fit_message(check["message"]))
        if verdict == Verdict.SKIPPED and view["message"] and check["message"] == view["message"]:
            message = "not run: see below"  # the import failure, printed once under the table
        rows.append(
            (
                tier,
                check["id"],
                cases,
                f"[{STYLE[verdict]}]{verdict}[/]",
                f"{check['score']:g}/{check['max_score']:g}",
                message,
            )
        )
    return rows


def print_table(view: dict[str, Any], full_spec: ProblemSpec, path: Path, plots: str = "") -> None:
    table = Table(
        title=f"{view['problem']} · {escape(view['submission'])} · public checks "
        f"{view['score']:g}/{view['max_score']:g} ({view['status']})"
    )
    for column in ("tier", "check", "cases", "verdict", "score", "message"):
        table.add_column(column, overflow="fold", max_width=70 if column == "message" else None)
    for row in _rows(view, full_spec):
        table.add_row(*row)
    console = Console(width=140, soft_wrap=False, highlight=False)
    console.print(table)
    failing = [
        (c["id"], c["message"])
        for t in view["tiers"]
        for c in t["checks"]
        if c["verdict"] != Verdict.PASS and not (c["verdict"] == Verdict.SKIPPED and c["message"] == view["message"])
    ]
    for line in full_messages(failing):
        console.print(line)
    if view["message"]:
        console.print(f"[red]{escape(view['message'])}[/]")
        console.print(escape(view["stderr"][-2000:]))  # the learner's own traceback
    console.print(
        f"report: {path}  ·  the official grade is out of {view['official_max_score']:g}: "
        "the same checks on cases from hidden seeds, and the hidden ones"
    )
    if plots:
        console.print(escape(plots))


def run_check(root: Path, submission: Path, report_path: Path) -> ExitCode:
    problem = PackedProblem.load(root)
    cases = PackedCases(root / DATA_FILE)
    job = start_plots(problem, cases, report_path)
    try:
        # judge.grade reads only id, spec, experiment_path and content_hash of a problem, and warm, cases,
        # observation and series of its expectations: the packed stand-ins provide exactly those.
        graded = grade(
            problem,
            submission,
            cases.seed,
            problem.spec.limits,
            expectations=cases,
            command=f"python check {submission}",
            series_sink=job.submit if job is not None else None,
        )
        plots = finish_plots(problem, job, report_path, graded.plot_failures)
    finally:
        if job is not None:
            job.close()
    view = learner_report(graded.report, problem.full_spec)
    write_atomic(report_path, json.dumps(view, indent=2) + "\n")
    print_table(view, problem.full_spec, report_path, plots)
    report = graded.report
    if report.status == Status.JUDGE_ERROR or any(c.verdict == Verdict.JUDGE_ERROR for c in report.checks()):
        return ExitCode.JUDGE_ERROR
    if report.status == Status.REFUSED:
        return ExitCode.REFUSED
    if report.status in (Status.IMPORT_ERROR, Status.IMPORT_TIMEOUT, Status.IMPORT_CRASHED):
        return ExitCode.IMPORT_FAILED
    return ExitCode.OK


def show_progress(root: Path) -> ExitCode:
    """The grader's `progress` view over this pack's reports."""
    from grader.outputs.progress import print_progress, progress_of, read_attempt, report_files

    reports = root / "reports"
    attempts = [a for a in map(read_attempt, report_files([reports] if reports.is_dir() else [])) if a is not None]
    spec = load_spec(root / "problem.toml")
    print_progress(progress_of(attempts), {spec.id: spec.title})
    return ExitCode.OK


class CheckParser(argparse.ArgumentParser):
    """The pack's command line: a usage error exits 4, as the README says, rather than argparse's 2."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(int(ExitCode.USAGE), f"{self.prog}: error: {message}\n")


def check_main(argv: list[str] | None = None) -> int:
    root = Path(__file__).resolve().parents[2]
    epilog = "exit codes:\n" + "\n".join(f"  {code.value}: {meaning}" for code, meaning in CHECK_EXIT_CODES.items())
    parser = CheckParser(
        prog="check",
        description="Grade FILE on this problem's public cases.",
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("file", type=Path, nargs="?", help="your solution, a Python file")
    parser.add_argument("--report", type=Path, metavar="PATH", help="default reports/<file stem>.json")
    parser.add_argument("--watch", action="store_true", help="grade FILE again each time it is saved, until Ctrl-C")
    parser.add_argument(
        "--progress",
        action="store_true",
        help="instead of grading: your attempts in reports/, best and last score, checks still failing, "
        "misreadings that recur",
    )
    args = parser.parse_args(argv)
    if args.progress:
        return int(show_progress(root))
    if args.file is None:
        parser.error("FILE is required: the Python file with your solution")
    if (what := usage_problem(args.file)) is not None:  # a link or a FIFO gets a report refusing it
        print(f"check: {args.file}: {what}; expected a Python file with your solution", file=sys.stderr)
        return int(ExitCode.USAGE)
    report = args.report or root / "reports" / f"{args.file.stem}.json"
    try:
        if args.watch:
            return int(watch_check(root, args.file.absolute(), report))  # absolute, not resolved: no link followed
        return int(run_check(root, args.file.absolute(), report))
    except Exception as exc:  # a fault of the pack is never the learner's
        import traceback

        traceback.print_exc()
        print(f"check: internal error of the grader, not of your code: {type(exc).__name__}: {exc}", file=sys.stderr)
        return int(ExitCode.JUDGE_ERROR)


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
