"""The learner pack: a zip in which a learner grades a file on a problem's public cases, in the official sandbox.

`build_pack` (trusted side, in the course's repository) writes `ID.zip`, whose folder `ID/` holds the statement,
the starter, the toy experiment, the problem spec, `public_cases.pt` and the part of the grader that grading
needs. `public_cases.pt` is plain data read with `weights_only=True`: the inputs of every case of the checks the
spec marks public, drawn from the public seed, and what the reference returned on each (the return value,
the gradients, the exception type). The pack never carries the reference, the oracle, the known-wrong
solutions, the case generators, a hidden seed, nor any case of a check marked `public = false`.

Inside the pack, `python check FILE` runs `check_main`: the same worker, sandbox and checks as the official
grader, on the public cases only; it prints a table and writes the learner's view of the report.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import importlib.metadata
import importlib.util
import io
import json
import sys
import zipfile
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
from grader.judge.expectations import LOWER, Expectations
from grader.judge.grading import grade
from grader.model.problem import Problem, load_module
from grader.model.report import Report, write_atomic
from grader.model.spec import CheckSpec, ProblemSpec, load_spec
from grader.model.verdicts import ExitCode, Status, Verdict
from grader.outputs.learner_view import learner_view
from grader.outputs.terminal import STYLE, fit_message, full_messages

if TYPE_CHECKING:
    from grader.outputs.plots import PlotJob

DATA_FILE = "public_cases.pt"
DATA_FORMAT = 1
PROBLEM_FILES = ("statement.md", "starter.py", "experiment.py", "problem.toml")
# The modules the pack's check imports; the files they import follow (`grader_files`).
ENTRY_MODULES = ("grader.course.learner_pack",)
# Files the sandbox runs by path rather than imports: the worker's package and the box's init script.
RUN_BY_PATH = ("worker", "confine/sandbox_init.py", "confine/seccomp.py")  # the init imports its filter as a sibling
FIXED_TIME = (1980, 1, 1, 0, 0, 0)  # the same sources give the same zip, byte for byte
HIDDEN_NOTE = "graded only by the official grader, on cases from hidden seeds"

CPU_INDEX = "https://download.pytorch.org/whl/cpu"  # PyTorch's CPU-only wheels: no GPU libraries to download
# What a learner installs, in the order the README gives it: torch alone from PyTorch's CPU index, then the rest
# from the ordinary one (numpy only keeps torch from warning on every run).
INSTALL = ("python -m pip install torch=={torch} --index-url " + CPU_INDEX, "python -m pip install numpy pydantic rich")
PLOTS_NOTE = (
    "With matplotlib installed (python -m pip install matplotlib), `check` draws the toy's plots into "
    "reports/<file stem>_plots/: your curves at the public seed over the reference's (faint), each point outside "
    "the checks' tolerance marked on its curve, beside the reference's preview on the same inputs (previews/). "
    "The T3 checks compare the same series, number by number, with or without the plots."
)
NO_MATPLOTLIB = "plots: not drawn, matplotlib is not installed (python -m pip install matplotlib); the T3 checks ran"

CHECK_SCRIPT = '''#!/usr/bin/env python3
"""Grade a solution on this problem's public cases: `python check FILE` (see README.md)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
try:
    from grader.course.learner_pack import check_main
except ModuleNotFoundError as exc:
    if (exc.name or "grader").partition(".")[0] == "grader":
        raise
    print(f"check: this Python ({{sys.executable}}) has no module {{exc.name!r}}; install what the pack needs: "
          "{install}", file=sys.stderr)
    sys.exit(4)

sys.exit(check_main())
'''

README = """# {title}

Your practice kit for `{id}`. Read `statement.md`, copy `starter.py` to a file of your own, fill in the
functions, then grade it on the public cases:

```sh
python check my_solution.py
python check --watch my_solution.py   # again after every save, until Ctrl-C
python check --progress               # your attempts: best and last score, what still fails
```

`check` imports your file in the same sandboxed worker as the official grader, calls your functions on the
public cases, runs the toy experiment (`experiment.py`) and compares everything with the reference's results,
which `{data}` holds precomputed. It prints a table and writes `reports/<file stem>.json`.{plots}

The official grade runs the same checks on cases drawn from hidden seeds, plus the checks marked hidden in the
table, which no file here can run. Passing every public check is necessary, not sufficient.

## Install

Python 3.11 or later, with torch (the CPU build is enough), numpy, pydantic and rich:

```sh
{install}
```

The sandbox is strongest on Linux. `python check --help` lists the exit codes: 0 when your file was graded,
whatever its score; 4 for a usage error (no such file, a missing package); 5 when your file could not be
imported; 7 when it is not a regular file (a symbolic link, a FIFO, a hard link: check a plain copy); 3 when the
pack itself failed, which is never your code's fault.
"""

# The exit codes a learner can meet, in their words.
CHECK_EXIT_CODES = {
    ExitCode.OK: "your file was graded, whatever its score",
    ExitCode.JUDGE_ERROR: "the pack itself failed; not a fault of your code",
    ExitCode.USAGE: "usage: no such file, a bad option, or a package missing (see README.md)",
    ExitCode.IMPORT_FAILED: "your file could not be imported (the table says why)",
    ExitCode.REFUSED: "FILE is not a regular file (a symbolic link, a FIFO, a hard link): check a plain copy",
}


# ---------------------------------------------------------------------------------------------- the public part


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


def _expected_only(observation: dict[str, Any]) -> dict[str, Any]:
    """What a comparison reads of an expected observation: the output, the gradients and an exception's type.

    An exception's message is the reference's own text, and the inputs after the call repeat the inputs sent.
    """
    kept: dict[str, Any] = {key: observation[key] for key in ("output", "grads") if key in observation}
    for key in ("raised", "backward_error"):
        if key in observation:
            exc = observation[key]
            kept[key] = {"type": exc["type"], "bases": list(exc.get("bases", [])), "message": ""}
    return kept


def public_cases(problem: Problem) -> dict[str, Any]:
    """The public checks' cases, drawn from the public seed, and the expected observations of each."""
    spec = problem.spec
    expect = Expectations(problem, spec.public_seed)
    cases: dict[str, list[dict[str, Any]]] = {}
    observations: dict[str, list[dict[str, Any]]] = {}
    for check in (c for c in spec.checks if c.public and c.cases):
        assert check.cases is not None
        shown = [(i, call) for i, call in enumerate(expect.cases(check.cases)) if not call.hidden]
        cases[check.cases] = [call.to_data() for _, call in shown]
        observations[f"{check.expected}/{check.cases}"] = [
            _expected_only(expect.observation(check.expected, check.cases, i)) for i, _ in shown
        ]
        observations[f"{LOWER}{check.expected}/{check.cases}"] = [
            _expected_only(expect.lower_observation(check.expected, check.cases, i) or {}) for i, _ in shown
        ]
    compared = [name for c in spec.checks if c.public and c.kind == "experiment" for name in c.series]
    # and what the plots draw besides (their x axes): the public seed's series, which the previews publish anyway
    drawn = [name for plot in spec.plots for name in (plot.x, *(line.y for line in plot.lines))]
    names = [name for name in dict.fromkeys(compared + drawn) if name in expect.series()]
    series = {name: expect.series()[name] for name in names}
    parts = {name: expect.series_parts()[name] for name in names if name in expect.series_parts()}
    return {
        "format": DATA_FORMAT,
        "problem": problem.id,
        "seed": spec.public_seed,
        "cases": cases,
        "observations": observations,
        "series": series,
        "series_parts": parts,
    }


# ---------------------------------------------------------------------------------------------- building the zip


def _module_file(package_dir: Path, parts: list[str]) -> Path | None:
    path = package_dir.parent.joinpath(*parts)
    if (path / "__init__.py").is_file():
        return path / "__init__.py"
    return path.with_suffix(".py") if path.with_suffix(".py").is_file() else None


def _imported(path: Path, package_dir: Path) -> list[list[str]]:
    """Dotted names (as parts) of the grader modules `path` imports, at its top or inside functions."""
    package = list(path.relative_to(package_dir.parent).parts[:-1])  # the package `path` belongs to
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            target = base + (node.module.split(".") if node.module else [])
            found.append(target)
            found += [target + [alias.name] for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [alias.name.split(".") for alias in node.names]
    return [parts for parts in found if parts and parts[0] == package_dir.name]


def grader_files(package_dir: Path) -> list[Path]:
    """The grader files the pack's check needs: the closure of ENTRY_MODULES' imports, and RUN_BY_PATH."""
    pending = [_module_file(package_dir, name.split(".")) for name in ENTRY_MODULES]
    pending += [
        p
        for name in RUN_BY_PATH
        for p in ([package_dir / name] if name.endswith(".py") else sorted((package_dir / name).glob("*.py")))
    ]
    seen: set[Path] = set()
    while pending:
        path = pending.pop()
        if path is None or path in seen:
            continue
        seen.add(path)
        for parts in _imported(path, package_dir):
            for depth in range(1, len(parts) + 1):  # every package on the way, then the module itself
                pending.append(_module_file(package_dir, parts[:depth]))
    return sorted(seen)


def _add(archive: zipfile.ZipFile, name: str, data: bytes, executable: bool = False) -> None:
    info = zipfile.ZipInfo(name, date_time=FIXED_TIME)
    info.external_attr = (0o100755 if executable else 0o100644) << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    archive.writestr(info, data)


def _fresh(value: Any) -> Any:
    """A copy that pickles to the same bytes whatever its history: every tensor owns its storage (views computed
    afresh share theirs), and equal strings are one object (pickle memoizes by identity)."""
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, str):
        return sys.intern(value)
    if isinstance(value, dict):
        return {_fresh(key): _fresh(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_fresh(item) for item in value)
    return value


def _torch_bytes(data: dict[str, Any]) -> bytes:
    buffer = io.BytesIO()
    torch.save(_fresh(data), buffer)
    return buffer.getvalue()


def install_commands() -> tuple[str, ...]:
    """The install lines, with the torch version this pack was built and tested with."""
    torch_version = importlib.metadata.version("torch").split("+")[0]
    return tuple(line.format(torch=torch_version) for line in INSTALL)


def build_pack(problem: Problem, out: Path) -> list[str]:
    """Write the learner pack of `problem` to `out`; return the names it holds."""
    files: dict[str, bytes] = {name: (problem.problem_dir / name).read_bytes() for name in PROBLEM_FILES}
    install = install_commands()
    plots = f"\n{PLOTS_NOTE}" if problem.spec.plots else ""
    files["README.md"] = README.format(
        title=problem.spec.title, id=problem.id, data=DATA_FILE, plots=plots, install="\n".join(install)
    ).encode()
    files[DATA_FILE] = _torch_bytes(public_cases(problem))
    package_dir = Path(__file__).resolve().parents[1]
    for path in grader_files(package_dir):
        files[path.relative_to(package_dir.parent).as_posix()] = path.read_bytes()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    with zipfile.ZipFile(tmp, "w") as archive:
        _add(
            archive, f"{problem.id}/check", CHECK_SCRIPT.format(install=" && ".join(install)).encode(), executable=True
        )
        for name in sorted(files):
            _add(archive, f"{problem.id}/{name}", files[name])
    tmp.replace(out)
    return [f"{problem.id}/check", *(f"{problem.id}/{name}" for name in sorted(files))]


# ---------------------------------------------------------------------------------------------- inside the pack


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
            from grader.watch.pack import watch_check

            return int(watch_check(root, args.file.absolute(), report))  # absolute, not resolved: no link followed
        return int(run_check(root, args.file.absolute(), report))
    except Exception as exc:  # a fault of the pack is never the learner's
        import traceback

        traceback.print_exc()
        print(f"check: internal error of the grader, not of your code: {type(exc).__name__}: {exc}", file=sys.stderr)
        return int(ExitCode.JUDGE_ERROR)
