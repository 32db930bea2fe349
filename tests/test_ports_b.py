"""Convention ports of grpo_advantages, score_centering and routed_gates: each reference/<id>/ports/<stem>.py is a
solution that reproduces one library's conventions at a pinned commit, declared in <stem>.toml beside it. Every port
loads and defines the contract's functions with their parameter names, declares a 40-hex commit, and grades no lower
than the score it declares (`score_before`, what the judge gave it when it was written)."""

from __future__ import annotations

import inspect
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
from conftest import TEST_CACHE, problem_named

from grader import commands
from grader.model.problem import Problem, load_module

PORTED = ("grpo_advantages", "score_centering", "routed_gates")
LIBRARIES = frozenset({"slime", "verl", "OpenRLHF", "TRL", "Megatron-Core", "transformers", "NeMo-RL"})
FIELDS = frozenset(
    {"library", "repository", "commit", "file", "lines", "reproduces", "departures", "breaks", "score_before"}
)
MIN_PORTS = 3
NOISE = 0.5  # points a port may lose to the judge's run-to-run noise before it counts as graded lower
COMMIT = re.compile(r"[0-9a-f]{40}")


def ports_of(problem: Problem) -> list[Path]:
    return sorted((problem.reference_dir / "ports").glob("*.py"))


def declaration(port: Path) -> dict[str, Any]:
    with port.with_suffix(".toml").open("rb") as handle:
        return tomllib.load(handle)


PORTS = [(problem_id, port) for problem_id in PORTED for port in ports_of(problem_named(problem_id))]


@pytest.mark.parametrize("problem_id", PORTED)
def test_every_problem_has_its_ports(problem_id: str) -> None:
    assert len(ports_of(problem_named(problem_id))) >= MIN_PORTS


@pytest.mark.parametrize(("problem_id", "port"), PORTS, ids=lambda value: getattr(value, "stem", value))
def test_port_declares_its_library_at_a_commit(problem_id: str, port: Path) -> None:
    declared = declaration(port)
    assert set(declared) == FIELDS
    assert declared["library"] in LIBRARIES
    assert COMMIT.fullmatch(declared["commit"]), declared["commit"]
    assert declared["commit"] in port.read_text(), "the module docstring names the commit it reproduces"
    assert all(isinstance(d, str) and d for d in declared["departures"])
    assert declared["breaks"] == []
    assert 0.0 <= declared["score_before"] <= 100.0


@pytest.mark.parametrize(("problem_id", "port"), PORTS, ids=lambda value: getattr(value, "stem", value))
def test_port_defines_the_contract(problem_id: str, port: Path) -> None:
    problem = problem_named(problem_id)
    module = load_module(f"paperleet_port_{problem_id}_{port.stem}", port)
    assert module.__doc__, "a port's docstring names its library, commit and lines"
    for function in problem.spec.functions:
        assert list(inspect.signature(getattr(module, function.name)).parameters) == function.params


@pytest.mark.e2e
@pytest.mark.parametrize("problem_id", PORTED)
def test_ports_grade_no_lower_than_declared(problem_id: str, monkeypatch: pytest.MonkeyPatch) -> None:
    problem = problem_named(problem_id)
    ports = ports_of(problem)
    monkeypatch.setenv("PAPERLEET_CACHE", str(TEST_CACHE))
    # the seed `grade` uses by default, the one each score_before was measured at
    reports = commands.grade_many(problem, ports, problem.grading_seeds[0], problem.spec.limits, jobs=2)
    lower = {
        port.stem: (report.score, declaration(port)["score_before"])
        for port, report in zip(ports, reports, strict=True)
        if report.score < declaration(port)["score_before"] - NOISE
    }
    assert not lower, f"graded (now, declared): {lower}"
