"""The expectations cache: misreadings' observations kept apart and read only when a case fails; one thread."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from grader.judge.expectations import Expectations, single_threaded
from grader.model.problem import Problem

PROBLEM = "grpo_advantages"


def test_misconception_observations_are_saved_apart_and_read_back_when_needed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PAPERLEET_CACHE", str(tmp_path))
    problem = Problem(PROBLEM)
    assert problem.misconceptions
    seed = problem.grading_seeds[0]
    check = next(c for c in problem.spec.checks if c.cases)
    assert check.cases is not None
    first = Expectations(problem, seed)
    first.warm()
    computed = first.misconception_observations(check.cases, 0)
    first.persist()

    (main,) = (tmp_path / PROBLEM).glob("*.pt")
    data = torch.load(main, weights_only=True)
    assert data["observations"] and not [k for k in data["observations"] if k.startswith("misconception:")]
    assert (main.with_suffix("") / f"misconceptions-{check.cases}.pt").is_file()

    def recomputed(self: Problem, misconception: object) -> None:
        raise AssertionError("a misreading's observations were computed again rather than read from the cache")

    monkeypatch.setattr(Problem, "misconception_functions", recomputed)
    again = Expectations(problem, seed).misconception_observations(check.cases, 0)
    assert again.keys() == computed.keys()
    for name, observation in computed.items():
        assert torch.equal(again[name]["output"]["value"], observation["output"]["value"])


def test_the_judge_stays_on_one_thread_after_computing_expectations() -> None:
    """Resizing torch's pool back up makes every later small op of the judge about thirty times slower."""
    with single_threaded():
        pass
    assert torch.get_num_threads() == 1
