"""`new-problem ID`: a skeleton whose spec, cases and misreading load, and that `validate` accepts as written."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

from grader.course.new_problem import GRADING_SEEDS, write_skeleton
from grader.judge.cases import generator_for
from grader.model.problem import Problem
from grader.model.spec import SpecError


def test_the_skeleton_loads_with_its_misreading_declared_in_its_known_wrong_file(tmp_path: Path) -> None:
    written = write_skeleton(tmp_path, "centred_demo")
    assert {p.relative_to(tmp_path).parts[0] for p in written} == {"problems", "reference"}
    problem = Problem("centred_demo", tmp_path)
    assert problem.spec.max_score == 40 and len(set(problem.grading_seeds)) == GRADING_SEEDS
    assert problem.spec.public_seed not in problem.grading_seeds
    (misreading,) = problem.misconceptions
    assert (misreading.id, misreading.solution, misreading.owners) == ("scale_dropped", "scale_ignored.py", ["oracle"])
    oracle = next(c for c in problem.spec.checks if c.id == "oracle")
    assert (oracle.kind, oracle.expected, oracle.compare) == ("differential", "oracle", ["type", "shape", "values"])
    calls = problem.case_generator("oracle")(generator_for(problem.spec.public_seed, "oracle"))
    assert calls and all(call.kwargs["scale"] != 1 for call in calls)


def test_an_existing_problem_or_a_bad_id_writes_nothing(tmp_path: Path) -> None:
    (tmp_path / "reference" / "taken").mkdir(parents=True)
    for bad in ("taken", "Upper", "9lives", "has-dash"):
        with pytest.raises(SpecError):
            write_skeleton(tmp_path, bad)
    assert not (tmp_path / "problems").exists()


@pytest.mark.e2e
def test_validate_accepts_the_skeleton_as_written(tmp_path: Path) -> None:
    env = {**os.environ, "PAPERLEET_ROOT": str(tmp_path), "PAPERLEET_CACHE": str(tmp_path / "cache")}
    env["PAPERLEET_ARTIFACTS"] = str(tmp_path / "artifacts")

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "grader", *args]
        return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)

    made = cli("new-problem", "centred_demo")
    assert made.returncode == 0, made.stderr
    assert "problems/centred_demo/problem.toml" in made.stdout
    validated = cli("validate", "--problem", "centred_demo", "--jobs", "1")
    assert validated.returncode == 0, validated.stdout + validated.stderr
    assert "centred_demo: valid" in validated.stdout
    assert "warning" not in validated.stdout  # the known-wrong solution scores what its broken clause declares
