"""The learner pack: a zip in which a learner grades a file on a problem's public cases, in the official sandbox.

`build_pack` (trusted side, in the course's repository) writes `ID.zip`, whose folder `ID/` holds the statement,
the starter, the toy experiment, the problem spec, `public_cases.pt` and the part of the grader that grading
needs. `public_cases.pt` is plain data read with `weights_only=True`: the inputs of every case of the checks the
spec marks public, drawn from the public seed, and what the reference returned on each (the return value,
the gradients, the exception type). The pack never carries the reference, the oracle, the known-wrong
solutions, the case generators, a hidden seed, nor any case of a check marked `public = false`.

Inside the pack, `python check FILE` runs `pack_check.check_main`: the same worker, sandbox and checks as the official
grader, on the public cases only; it prints a table and writes the learner's view of the report.
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import io
import sys
import zipfile
from pathlib import Path
from typing import Any

import torch

from grader.course.pack_check import DATA_FILE, DATA_FORMAT
from grader.judge.expectations import LOWER, Expectations
from grader.model.problem import Problem

PROBLEM_FILES = ("statement.md", "starter.py", "experiment.py", "problem.toml")
# The modules the pack's check imports; the files they import follow (`grader_files`).
ENTRY_MODULES = ("grader.course.pack_check",)
# Files the sandbox runs by path rather than imports: the worker's package and the box's init script.
RUN_BY_PATH = ("worker", "confine/sandbox_init.py", "confine/seccomp.py")  # the init imports its filter as a sibling
FIXED_TIME = (1980, 1, 1, 0, 0, 0)  # the same sources give the same zip, byte for byte

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

CHECK_SCRIPT = '''#!/usr/bin/env python3
"""Grade a solution on this problem's public cases: `python check FILE` (see README.md)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
try:
    from grader.course.pack_check import check_main
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


# ---------------------------------------------------------------------------------------------- the public part


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
