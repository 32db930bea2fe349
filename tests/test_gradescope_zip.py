"""The Gradescope autograder zip end to end: built, unpacked as Gradescope does, set up, run on submissions."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from grader.course.gradescope_zip import build_zip
from grader.model.problem import Problem
from grader.model.spec import SpecError

ROOT = Path(__file__).resolve().parent.parent
PROBLEM = "glm5_offpolicy"
WRONG = Problem(PROBLEM).known_wrong_file("ratio_inverted.py")


def _run(command: list[str], env: dict[str, str] | None = None, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(
        command, cwd=cwd, env={**os.environ, **(env or {})}, capture_output=True, text=True, timeout=600
    )


@pytest.fixture(scope="module")
def zip_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("zip") / f"{PROBLEM}.zip"
    done = _run([sys.executable, "-m", "grader", "gradescope-zip", "--problem", PROBLEM, "--out", str(out)])
    assert done.returncode == 0, done.stderr
    return out


def test_zip_holds_the_scripts_at_its_root_and_the_harness(zip_path: Path) -> None:
    with zipfile.ZipFile(zip_path) as archive:
        infos = {info.filename: info for info in archive.infolist()}
        scripts = {name: archive.read(name).decode() for name in ("setup.sh", "run_autograder")}
        requirements = archive.read("requirements.txt").decode()
    for name, text in scripts.items():
        assert (infos[name].external_attr >> 16) & 0o111, f"{name} must be executable"
        assert text.startswith("#!/usr/bin/env bash") and "@" + "PROBLEM@" not in text
        assert "AUTOGRADER_ROOT:-/autograder" in text
    assert "torch==$TORCH_VERSION" in scripts["setup.sh"] and 'TORCH_VERSION="2.13.0"' in scripts["setup.sh"]
    assert "https://download.pytorch.org/whl/cpu" in scripts["setup.sh"]
    assert 'PYTHON_VERSION="3.11"' in scripts["setup.sh"]
    for needed in (
        "pyproject.toml",
        "grader/__main__.py",
        "grader/worker/__main__.py",
        "grader/outputs/exports.py",
        f"problems/{PROBLEM}/problem.toml",
        f"problems/{PROBLEM}/cases.py",
        f"reference/{PROBLEM}/reference.py",
        f"reference/{PROBLEM}/grading.toml",
    ):
        assert needed in infos, needed
    assert not [n for n in infos if "__pycache__" in n or n.endswith(".pyc")]
    others = [n for n in infos if n.startswith(("problems/", "reference/")) and n.split("/")[1] != PROBLEM]
    assert not others, "only the problem being packaged travels"
    pins = [line for line in requirements.splitlines() if line and not line.startswith("#")]
    assert pins and all("==" in line for line in pins)
    assert {"pydantic", "rich", "matplotlib"} <= {line.split("==")[0] for line in pins}
    assert not [line for line in pins if line.startswith("torch==")]


def test_zip_is_reproducible(zip_path: Path, tmp_path: Path) -> None:
    again = tmp_path / "again.zip"
    build_zip(Problem(PROBLEM), again)
    assert again.read_bytes() == zip_path.read_bytes()


@dataclass(frozen=True)
class Autograder:
    """An unpacked zip laid out as Gradescope lays it out, with setup.sh already run."""

    root: Path
    venv: Path

    def run(self, submission: dict[str, str | Path], venv: Path | None = None) -> dict:
        folder = self.root / "submission"
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir()
        for name, content in submission.items():
            text = content.read_text() if isinstance(content, Path) else content
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / name).write_text(text)
        done = _run(
            [str(self.root / "run_autograder")],
            env={"AUTOGRADER_ROOT": str(self.root), "VENV": str(venv or self.venv)},
            cwd=self.root,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return json.loads((self.root / "results" / "results.json").read_text())


@pytest.fixture(scope="module")
def autograder(zip_path: Path) -> Iterator[Autograder]:
    # Not under /tmp: the sandbox mounts a fresh /tmp for the worker, which would hide a Python installed there.
    base = Path(
        tempfile.mkdtemp(
            prefix="paperleet-gradescope-", dir="/var/tmp" if os.access("/var/tmp", os.W_OK) else Path.home()
        )
    )
    try:
        root, venv = base / "autograder", base / "venv"
        with zipfile.ZipFile(zip_path) as archive:
            archive.extractall(root / "source")
        shutil.copy(root / "source" / "run_autograder", root / "run_autograder")  # Gradescope's image build does this
        (root / "run_autograder").chmod(0o755)
        # A scratch venv that sees this environment's packages, so setup.sh finds torch 2.13.0 and every pin
        # already there and downloads nothing.
        assert _run([sys.executable, "-m", "venv", "--without-pip", str(venv)]).returncode == 0
        site = next((venv / "lib").glob("python3*/site-packages"))
        (site / "host-packages.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
        done = _run(["bash", str(root / "source" / "setup.sh")], env={"AUTOGRADER_ROOT": str(root), "VENV": str(venv)})
        assert done.returncode == 0, done.stdout + done.stderr
        assert "torch 2.13.0 already installed" in done.stdout
        yield Autograder(root, venv)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _spec_shaped(results: dict) -> None:
    assert {"score", "execution_time", "output", "visibility", "stdout_visibility", "tests"} <= set(results)
    assert isinstance(results["score"], int | float) and isinstance(results["output"], str)
    for test in results["tests"]:
        assert test["status"] in ("passed", "failed") and test["max_score"] >= test["score"] >= 0


def test_run_autograder_scores_like_a_direct_grade(autograder: Autograder, tmp_path: Path) -> None:
    results = autograder.run({"my_solution.py": WRONG})
    _spec_shaped(results)
    done = _run(
        [
            sys.executable,
            "-m",
            "grader",
            "grade",
            str(WRONG),
            "--problem",
            PROBLEM,
            "--out",
            str(tmp_path),
            "--gradescope",
            str(tmp_path / "results.json"),
        ]
    )
    assert done.returncode == 0, done.stderr
    direct = json.loads((tmp_path / "results.json").read_text())
    assert 0 < results["score"] == direct["score"] < 100
    assert results["tests"] == direct["tests"]
    instructor = json.loads((autograder.root / "results" / "paperleet" / "report.json").read_text())
    assert instructor["score"] == results["score"] and instructor["submission"] == "my_solution.py"


def test_run_autograder_reports_a_broken_submission(autograder: Autograder) -> None:
    results = autograder.run({"solution.py": "def masked_is_weights(:\n"})
    _spec_shaped(results)
    assert results["score"] == 0 and "SyntaxError" in results["output"]
    assert results["tests"] and all(t["status"] == "failed" for t in results["tests"])


@pytest.mark.parametrize(
    ("files", "says"),
    [
        ({}, "No Python file"),
        ({"notes.txt": "nothing to grade"}, "No Python file"),
        ({"a.py": "", "b.py": ""}, "holds 2 Python files: a.py, b.py"),
    ],
)
def test_run_autograder_always_writes_results(autograder: Autograder, files: dict, says: str) -> None:
    results = autograder.run(files)
    _spec_shaped(results)
    assert results["score"] == 0 and says in results["output"]


def test_run_autograder_sets_macos_resource_forks_aside(autograder: Autograder) -> None:
    """A zip made on macOS holds __MACOSX/._name beside the file: graded as one file, and the learner is told."""
    results = autograder.run({"my_solution.py": WRONG, "__MACOSX/._my_solution.py": "\x00\x05\x16\x07 fork"})
    _spec_shaped(results)
    assert results["score"] > 0 and results["tests"]
    assert results["output"].startswith("Graded my_solution.py.") and "__MACOSX/._my_solution.py" in results["output"]


def test_run_autograder_grades_an_upper_case_extension(autograder: Autograder) -> None:
    results = autograder.run({"SOLUTION.PY": WRONG})
    assert results["score"] > 0 and results["output"].startswith("Graded SOLUTION.PY.")


def test_run_autograder_names_the_files_it_found(autograder: Autograder) -> None:
    results = autograder.run({"a.py": "", "sub/b.py": "", 'c"\\.py': ""})
    _spec_shaped(results)
    assert results["score"] == 0 and "a.py" in results["output"] and "sub/b.py" in results["output"]
    assert "c?" in results["output"], "a learner's file name is shown reduced to safe characters"


def test_zip_refuses_a_hidden_check_worth_points(tmp_path: Path) -> None:
    """Gradescope shows the total while only `hidden` tests are held back: their points would show through it."""
    problem = Problem(PROBLEM)
    checks = [c.model_copy(update={"visibility": "hidden"}) if c.tier == "T1" else c for c in problem.spec.checks]
    problem.spec = problem.spec.model_copy(update={"checks": checks})
    with pytest.raises(SpecError, match="after_published"):
        build_zip(problem, tmp_path / "refused.zip")
    assert not (tmp_path / "refused.zip").exists()


def test_run_autograder_without_setup_writes_results(autograder: Autograder) -> None:
    results = autograder.run({"solution.py": WRONG}, venv=autograder.root / "no-venv")
    _spec_shaped(results)
    assert results["score"] == 0 and "setup.sh did not finish" in results["output"]
