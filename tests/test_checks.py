"""The signature check: a function's case passes when its signature is the contract's and one of its visible calls
returned a value, so an unmodified starter and a file whose functions never return earn nothing at all."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import PROBLEM

from grader.judge.cases import Call
from grader.judge.checks import check_signatures
from grader.judge.context import CheckContext
from grader.judge.failures import LearnerFailure
from grader.judge.grading import grade
from grader.model.problem import Problem
from grader.model.spec import FunctionSpec
from grader.model.verdicts import Verdict

ROOT = Path(__file__).resolve().parents[1]


class _Signed:
    """A context whose file declares every contract function with the contract's parameters."""

    def __init__(self, problem: Problem, answered: set[str]) -> None:
        self.problem, self._answered = problem, answered

    def functions(self) -> list[FunctionSpec]:
        return self.problem.spec.functions

    def signatures(self) -> dict[str, Any]:
        return {
            f.name: {"callable": True, "params": [{"name": p, "kind": "POSITIONAL_OR_KEYWORD"} for p in f.params]}
            for f in self.problem.spec.functions
        }

    def answered(self) -> set[str]:
        return set(self._answered)


def test_a_right_signature_earns_its_case_only_once_a_call_of_it_returned() -> None:
    problem = Problem(PROBLEM)
    check = next(c for c in problem.spec.checks if c.kind == "signature")
    first, *others = [f.name for f in problem.spec.functions]
    tally = check_signatures(_Signed(problem, {first}), check)  # type: ignore[arg-type]  # a partial context
    verdicts = {case.label: case.outcome.verdict for case in tally.outcomes}
    assert verdicts == {first: Verdict.PASS, **dict.fromkeys(others, Verdict.FAIL)}
    (failed, *_) = [case for case in tally.outcomes if not case.passed]
    assert failed.outcome.mismatch is not None and "returned a value" in failed.outcome.mismatch.message
    result = check_signatures(_Signed(problem, set()), check).result(check, 0.0)  # type: ignore[arg-type]
    assert result.score == 0 and result.verdict == Verdict.FAIL


class _Supervisor:
    """Answers each call as its function's entry says: a value, a raise, or a hang."""

    def __init__(self, answers: dict[str, str]) -> None:
        self.answers = answers

    def observe_all(self, calls: list[Call]) -> Iterator[dict[str, Any] | LearnerFailure]:
        for call in calls:
            kind = self.answers[call.function]
            if kind == "hang":
                yield LearnerFailure(Verdict.TIMEOUT, "no answer")
                return
            yield {"raised": {"type": "NotImplementedError"}} if kind == "raise" else {"output": {"kind": "tensor"}}


def test_only_a_visible_call_that_returned_counts_as_an_answer() -> None:
    problem = Problem(PROBLEM)
    a, b = [f.name for f in problem.spec.functions]
    calls = [Call(a, {}, "hidden", hidden=True), Call(b, {}, "raises")]
    supervisor = _Supervisor({a: "value", b: "raise"})
    context = CheckContext(problem, None, supervisor)  # type: ignore[arg-type]  # a stand-in supervisor
    list(context.observe_all(calls))
    assert context.answered() == set(), "a hidden call's answer never decides a visible check"
    supervisor.answers[a] = "hang"
    list(context.observe_all([Call(a, {}, "hangs"), Call(b, {}, "visible")]))
    assert context.answered() == set()
    supervisor.answers[b] = "value"
    list(context.observe_all([Call(b, {}, "visible")]))
    assert context.answered() == {b}


@pytest.mark.e2e
def test_an_unmodified_starter_earns_nothing() -> None:
    problem = Problem(PROBLEM)
    report = grade(problem, ROOT / "problems" / PROBLEM / "starter.py", problem.grading_seeds[0]).report
    assert report.score == 0, {c.id: c.score for c in report.checks() if c.score}
    signatures = next(c for c in report.checks() if c.id == "signatures")
    assert signatures.verdict == Verdict.FAIL and "contract's signature" in signatures.message
