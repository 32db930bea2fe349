"""Build a Gradescope autograder zip for one problem: setup.sh, run_autograder and the harness they need."""

from __future__ import annotations

import importlib.metadata
import sys
import tomllib
import zipfile
from collections.abc import Iterator
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from grader.model.problem import Problem, grading_files
from grader.model.spec import SpecError
from grader.outputs.exports import gradescope_refusal

TEMPLATES = Path(__file__).resolve().parents[2] / "packaging" / "gradescope"
SCRIPTS = ("setup.sh", "run_autograder")
FIXED_TIME = (1980, 1, 1, 0, 0, 0)  # the same sources give the same zip, byte for byte
INSTALLED_SEPARATELY = {"torch"}  # setup.sh takes the CPU build from PyTorch's own index


def _closure(names: list[str]) -> dict[str, str]:
    """Installed versions of `names` and everything they need in this interpreter, by canonical name."""
    pins: dict[str, str] = {}
    pending = list(names)
    while pending:
        name = canonicalize_name(pending.pop())
        if name in pins or name in INSTALLED_SEPARATELY:
            continue
        pins[name] = importlib.metadata.version(name)
        for text in importlib.metadata.requires(name) or []:
            requirement = Requirement(text)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                pending.append(requirement.name)
    return pins


def pinned_requirements(root: Path) -> str:
    """requirements.txt pinning the harness's runtime dependencies to the versions this environment runs."""
    declared = tomllib.loads((root / "pyproject.toml").read_text())["project"]["dependencies"]
    pins = _closure([Requirement(text).name for text in declared])
    lines = [f"{name}=={version}" for name, version in sorted(pins.items())]
    return "# The harness's runtime dependencies, pinned; torch is installed by setup.sh.\n" + "\n".join(lines) + "\n"


def _torch_version() -> str:
    return importlib.metadata.version("torch").split("+")[0]


def render_script(name: str, problem_id: str) -> str:
    """A template with the problem, and the Python and torch versions the pinned requirements were resolved for."""
    values = {
        "@PROBLEM@": problem_id,
        "@PYTHON_VERSION@": f"{sys.version_info.major}.{sys.version_info.minor}",
        "@TORCH_VERSION@": _torch_version(),
    }
    text = (TEMPLATES / name).read_text()
    for key, value in values.items():
        text = text.replace(key, value)
    return text


def _tree(folder: Path) -> Iterator[Path]:
    for path in grading_files(folder):
        if path.suffix != ".pyc":
            yield path


def _add(archive: zipfile.ZipFile, name: str, data: bytes, executable: bool = False) -> None:
    info = zipfile.ZipInfo(name, date_time=FIXED_TIME)
    info.external_attr = (0o100755 if executable else 0o100644) << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    archive.writestr(info, data)


def build_zip(problem: Problem, out: Path) -> list[str]:
    """Write the autograder zip to `out`; return the names it holds, setup.sh and run_autograder at its root."""
    if (why := gradescope_refusal(problem.spec.checks)) is not None:
        raise SpecError(f"{problem.problem_dir / 'problem.toml'}: {why}")
    root = problem.root
    out.parent.mkdir(parents=True, exist_ok=True)
    names = []
    tmp = out.with_name(f".{out.name}.tmp")
    with zipfile.ZipFile(tmp, "w") as archive:
        for script in SCRIPTS:
            _add(archive, script, render_script(script, problem.id).encode(), executable=True)
        _add(archive, "requirements.txt", pinned_requirements(root).encode())
        _add(archive, "pyproject.toml", (root / "pyproject.toml").read_bytes())
        names += [*SCRIPTS, "requirements.txt", "pyproject.toml"]
        for folder in (root / "grader", problem.problem_dir, problem.reference_dir):
            for path in _tree(folder):
                name = path.relative_to(root).as_posix()
                _add(archive, name, path.read_bytes())
                names.append(name)
    tmp.replace(out)
    return names
