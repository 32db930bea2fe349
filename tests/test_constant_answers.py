"""Constant answers earn nothing: an observation that is the same for every case (always raising, always a
graph-connected zero with zero gradients, always detached, always "inputs unchanged") scores no more than
zeros of the promised shape beyond `signatures`, on the trusted side and through a real forged worker."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import expectations_of, problem_named
from test_cases_seeded import zeros_source
from test_problems import (
    SANDBOXED_EXTRAS,
    Proof,
    proofs,  # noqa: F401 - a fixture: each problem graded once for the whole run
)

from grader.judge.accept import accept_observation
from grader.judge.cases import Call
from grader.judge.checks import CaseOutcome, Tally, check_differential
from grader.judge.compare import Outcome, compare_tensors
from grader.judge.expectations import Expectations
from grader.judge.experiment import run_experiment
from grader.model.problem import Problem, list_problems
from grader.model.report import Report
from grader.model.spec import CheckSpec, FunctionSpec, Tolerance
from grader.model.verdicts import Verdict
from grader.worker.protocol import describe, observe_call

PROBLEMS = list_problems()
HOSTILE = Path(__file__).resolve().parent / "hostile" / "forge_constant_observations.py"
Forger = Callable[[Call, dict[str, Any]], dict[str, Any]]  # (call, the reference's observation) -> an observation


def _unchanged(call: Call) -> dict[str, torch.Tensor]:
    return {name: value.detach().clone() for name, value in call.kwargs.items() if isinstance(value, torch.Tensor)}


def _zeros_like(desc: dict[str, Any]) -> Any:
    """Zeros in the form of an expected output: each tensor zeros of its shape and dtype, detached."""
    if desc["kind"] == "tensor":
        return torch.zeros_like(desc["value"])
    if desc["kind"] == "sequence":
        return tuple(_zeros_like(item) for item in desc["items"])
    return desc.get("value")


def _promised(want: dict[str, Any]) -> Any:
    """What a zeros answer returns: zeros of the expected output, or a 0-dim zero where the call must raise."""
    return _zeros_like(want["output"]) if "output" in want else torch.zeros(())


def zeros_solution(call: Call, want: dict[str, Any]) -> dict[str, Any]:
    """An honest function returning detached zeros, observed exactly as the worker observes a call."""
    answer = _promised(want)
    return observe_call(lambda **_: answer, call.kwargs, list(call.requires_grad), call.backward)


def always_raises(call: Call, want: dict[str, Any]) -> dict[str, Any]:
    raised = {"type": "ValueError", "bases": ["ValueError", "Exception", "BaseException", "object"], "message": ""}
    return {"raised": raised, "inputs_after": _unchanged(call)}


def _with_flags(desc: dict[str, Any], connected: bool) -> dict[str, Any]:
    if desc["kind"] == "tensor":
        return {**desc, "requires_grad": False, "has_grad_fn": connected}
    if desc["kind"] == "sequence":
        return {**desc, "items": [_with_flags(item, connected) for item in desc["items"]]}
    return desc


def _forged(connected: bool, grads: Callable[[Call], dict[str, Any]] | None) -> Forger:
    def forge(call: Call, want: dict[str, Any]) -> dict[str, Any]:
        observation: dict[str, Any] = {"output": _with_flags(describe(_promised(want)), connected)}
        if call.backward is not False and grads is not None:  # True, or a cotangent tensor
            observation["grads"] = grads(call)
        observation["inputs_after"] = _unchanged(call)
        return observation

    return forge


def _zero_grads(call: Call) -> dict[str, Any]:
    return {name: torch.zeros_like(call.kwargs[name]) for name in call.requires_grad}


def _no_grads(call: Call) -> dict[str, Any]:
    return dict.fromkeys(call.requires_grad)


REFUSED_BACKWARD = {
    "type": "RuntimeError",
    "bases": ["RuntimeError", "Exception", "BaseException", "object"],
    "message": "element 0 of tensors does not require grad and does not have a grad_fn",
}


def detached_backward_refused(call: Call, want: dict[str, Any]) -> dict[str, Any]:
    """What the worker reports for a detached result: backward refuses it."""
    observation = _forged(False, None)(call, want)
    if call.backward is not False:  # True, or a cotangent tensor
        observation["backward_error"] = dict(REFUSED_BACKWARD)
    return observation


FORGERS: dict[str, Forger] = {
    "always_raises": always_raises,
    "connected_zero_zero_grads": _forged(True, _zero_grads),
    "detached_no_grads": _forged(False, _no_grads),
    "detached_backward_refused": detached_backward_refused,
}


# ---------------------------------------------------------------------------------------------- scoring by hand


class _Forged:
    """A check's context whose learner answers every call with `forge`: the real check function scores it, with
    every aspect it judges, per-call narrowing and check-level `responds` included."""

    def __init__(self, problem: Problem, expectations: Expectations, forge: Forger) -> None:
        self.problem, self.expect, self.forge = problem, expectations, forge

    def cases(self, check: CheckSpec) -> list[Call]:
        assert check.cases is not None
        return self.expect.cases(check.cases)

    def expected(self, check: CheckSpec, index: int, call: Call) -> dict[str, Any]:
        assert check.cases is not None
        return self.expect.observation(check.expected, check.cases, index)

    def expected_float32(self, check: CheckSpec, index: int, call: Call) -> dict[str, Any] | None:
        if check.cases is None or check.precision == "strict":
            return None
        return self.expect.lower_observation(check.expected, check.cases, index)

    def observe_all(self, calls: list[Call]) -> Iterator[dict[str, Any]]:
        for call in calls:
            want = observe_call(
                self.problem.reference[call.function], call.kwargs, list(call.requires_grad), call.backward
            )
            yield accept_observation(self.forge(call, want))

    def functions(self) -> list[FunctionSpec]:
        return self.problem.spec.functions

    def tolerances(self) -> dict[str, Tolerance]:
        return self.problem.tolerances

    def misconception_observations(self, check: CheckSpec, index: int) -> dict[str, dict[str, Any]]:
        return {}


def _differential(problem: Problem, expectations: Expectations, check: CheckSpec, forge: Forger) -> float:
    return check_differential(_Forged(problem, expectations, forge), check).result(check, 0.0).score  # type: ignore[arg-type]


def _toy_series(problem: Problem, seed: int, forge: Forger) -> dict[str, torch.Tensor]:
    """The toy run on the trusted side, every call of a contract function answered by the forger."""

    def observe(call: Call, timeout_s: float) -> dict[str, Any]:
        want = observe_call(problem.reference[call.function], call.kwargs, list(call.requires_grad), call.backward)
        return accept_observation(forge(call, want))

    names = [f.name for f in problem.spec.functions]
    series: dict[str, torch.Tensor] = {}
    for part in run_experiment(problem.experiment_module, names, observe, seed, math.inf, math.inf):
        series.update(part.series)
    return series


def _experiment(check: CheckSpec, produced: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> float:
    tol = None if check.exact else Tolerance(rtol=check.rtol, atol=check.atol)
    outcomes = []
    for name in check.series:
        value = produced.get(name)
        ok = value is not None and compare_tensors(name, value, want[name], tol) is None
        outcomes.append(CaseOutcome(name, False, Outcome(Verdict.PASS if ok else Verdict.FAIL)))
    return Tally(outcomes).result(check, 0.0).score


@cache
def _expectations(problem_id: str) -> tuple[Problem, Expectations]:
    problem = problem_named(problem_id)
    return problem, expectations_of(problem_id, problem.grading_seeds[0])  # shared with the proofs


def scores(problem_id: str, forge: Forger) -> dict[str, float]:
    """Every check's score but `signatures`, for answers that `forge` gives, under the first grading seed."""
    problem, expectations = _expectations(problem_id)
    series = _toy_series(problem, expectations.seed, forge)
    found = {}
    for check in problem.spec.checks:
        if check.kind == "differential":
            found[check.id] = _differential(problem, expectations, check, forge)
        elif check.kind == "experiment":
            found[check.id] = _experiment(check, series, expectations.series())
    return found


@cache
def zeros_scores(problem_id: str) -> dict[str, float]:
    return scores(problem_id, zeros_solution)


@pytest.mark.parametrize("forger", sorted(FORGERS))
@pytest.mark.parametrize("problem_id", PROBLEMS)
def test_a_constant_observation_earns_no_more_than_zeros(problem_id: str, forger: str) -> None:
    zeros = zeros_scores(problem_id)
    forged = scores(problem_id, FORGERS[forger])
    beyond = {check: score for check, score in forged.items() if score > zeros[check]}
    assert sum(forged.values()) <= sum(zeros.values()), f"{forger} earns more than zeros in {beyond}"
    assert not beyond, f"{forger} earns more than zeros in {beyond}"  # nor does it trade points between checks


@pytest.mark.parametrize("problem_id", PROBLEMS)
def test_zeros_earn_nothing_beyond_the_contracts(problem_id: str) -> None:
    """The baseline itself: zeros of the promised shape pass only checks of the shape and dtype of a result."""
    problem, _ = _expectations(problem_id)
    earned = {check: score for check, score in zeros_scores(problem_id).items() if score > 0}
    shape_only = {
        c.id
        for c in problem.spec.checks
        if c.kind == "differential" and not {"values", "values_exact", "grads", "raises"} & set(c.compare)
    }
    assert set(earned) <= shape_only, earned


# ---------------------------------------------------------------------------------------------- a real forgery


SANDBOXED_EXTRAS["forged"] = lambda proof: HOSTILE.read_text()
SANDBOXED_EXTRAS["zeros"] = lambda proof: zeros_source(proof.problem, proof.first_seed)


@pytest.mark.slow
@pytest.mark.parametrize("problem_id", PROBLEMS)
def test_a_worker_forging_constant_observations_earns_no_more_than_zeros(problem_id: str, proofs) -> None:  # noqa: F811
    """Graded in the problem's one sandboxed batch, as `grade-all` grades (one zygote, one set of expectations)."""
    proof: Proof = proofs(problem_id)
    reports = dict(
        zip(("forged", "zeros"), proof.sandboxed([proof.extra("forged"), proof.extra("zeros")]), strict=True)
    )
    assert "forged observe_call of" in reports["forged"].stdout, "the forgery never took effect"
    beyond = {name: r.score - _score_of(r, "signatures") for name, r in reports.items()}
    earned = {c.id: c.score for c in reports["forged"].checks() if c.score > 0}
    assert beyond["forged"] <= beyond["zeros"], f"the forgery earns in {earned}"


def _score_of(report: Report, check_id: str) -> float:
    (check,) = [c for c in report.checks() if c.id == check_id]
    return check.score
