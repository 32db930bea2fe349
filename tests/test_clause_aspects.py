"""Checks judge their own clause: property checks never compare values, a partner call answers without being
scored on its values, float64 results compare at float32's precision beside their float32-computed expectation,
and a toy's series outside its tolerance is never credited."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch
from conftest import expectations_of

from grader.judge.cases import PARTNER_ASPECTS, Call
from grader.judge.checks import CaseOutcome, CheckRun, Tally, check_differential, check_experiment
from grader.judge.compare import (
    NO_RESPONSE,
    Mismatch,
    Outcome,
    answer_key,
    compare_grads,
    compare_tensors,
    constant_answers,
    judge_case,
)
from grader.judge.diagnosis import Credit
from grader.judge.expectations import in_float32
from grader.judge.experiment import PartResult
from grader.judge.failures import LearnerFailure
from grader.judge.grading import Contradictions
from grader.model.misconceptions import Misconception
from grader.model.problem import Problem, list_problems
from grader.model.spec import Aspect, DifferentialCheck, ExperimentCheck, FunctionSpec, Tolerance
from grader.model.verdicts import Verdict
from grader.outputs.plots import outside_tolerance, series_tolerances

F32_TOL = Tolerance(rtol=1e-5, atol=1e-7)
TOLERANCES = {"float32": F32_TOL, "float64": Tolerance(rtol=1e-9, atol=1e-12)}


def _tensor(value: torch.Tensor) -> dict[str, Any]:
    return {"output": {"kind": "tensor", "value": value, "requires_grad": False, "has_grad_fn": False, "device": "cpu"}}


# ---------------------------------------------------------------- precision and conditioning


def test_a_float32_computed_answer_passes_beside_its_lower_expectation_and_fails_strict() -> None:
    x = torch.linspace(0.1, 3.0, 50, dtype=torch.float64)
    want = torch.exp(x).log1p()  # [50]
    lowered = in_float32({"x": x})
    assert lowered is not None and lowered["x"].dtype == torch.float32
    lower = torch.exp(lowered["x"]).log1p()  # the reference computed in float32
    mine = torch.exp(x.float()).log1p().double()  # the learner's float32 arithmetic
    strict = judge_case("f", {}, _tensor(mine), _tensor(want), ["values"], TOLERANCES)
    assert strict.verdict == Verdict.FAIL
    loose = judge_case("f", {}, _tensor(mine), _tensor(want), ["values"], TOLERANCES, lower=_tensor(lower))
    assert loose.verdict == Verdict.PASS
    wrong = judge_case("f", {}, _tensor(mine * (1 + 1e-3)), _tensor(want), ["values"], TOLERANCES, lower=_tensor(lower))
    assert wrong.verdict == Verdict.FAIL, "a misreading's error is far beyond float32 rounding"


def test_an_ill_conditioned_case_accepts_another_order_of_operations() -> None:
    """A near-constant group: centring cancels all but the last bits, and float32 moves the result a lot."""
    want = torch.tensor([1.2, -0.4, -0.8], dtype=torch.float64)  # advantages of rewards differing in last bits
    lower = torch.tensor([1.0, -1.0, 0.0], dtype=torch.float32)  # float32 sees other differences
    other_order = want + torch.tensor([0.05, -0.02, 0.0], dtype=torch.float64)
    assert compare_tensors("a", other_order, want, F32_TOL) is not None
    assert compare_tensors("a", other_order, want, F32_TOL, lower=lower) is None
    far = want + 10.0
    assert compare_tensors("a", far, want, F32_TOL, lower=lower) is not None


def test_a_float32_expectation_that_raised_leaves_the_float64_tolerance() -> None:
    want = torch.tensor([1.0], dtype=torch.float64)
    mine = want + 1e-7
    outcome = judge_case("f", {}, _tensor(mine), _tensor(want), ["values"], TOLERANCES, lower={"raised": {}})
    assert outcome.verdict == Verdict.FAIL


def test_inputs_without_float64_have_no_float32_expectation() -> None:
    assert in_float32({"x": torch.zeros(2), "k": 3}) is None


# ---------------------------------------------------------------- property checks judge their property


def test_grad_flow_judges_where_gradient_reaches_never_its_values() -> None:
    want = {"grads": {"logp": torch.tensor([1.0, 2.0]), "old_logp": None}}
    other_values = {"grads": {"logp": torch.tensor([5.0, -1.0]), "old_logp": None}}
    leaks = {"grads": {"logp": torch.tensor([1.0, 2.0]), "old_logp": torch.tensor([0.5, 0.0])}}
    assert compare_grads(other_values, want, ["grad_flow"], TOLERANCES) is None
    leak = compare_grads(leaks, want, ["grad_flow"], TOLERANCES)
    assert leak is not None and "stop-gradient" in leak.message
    assert compare_grads({"grads": {"logp": None, "old_logp": None}}, want, ["grad_flow"], TOLERANCES) is not None


def test_grad_flow_fails_a_gradient_that_is_not_its_inputs_shape() -> None:
    """Autograd gives an input a gradient of its own shape: one of another shape was answered for another call."""
    want = {"grads": {"logp": torch.tensor([[1.0, 2.0]]), "old_logp": None}}
    copied = {"grads": {"logp": torch.tensor([3.0, 1.0, 2.0]), "old_logp": None}}
    mismatch = compare_grads(copied, want, ["grad_flow"], TOLERANCES)
    assert mismatch is not None and "shape" in mismatch.message
    own_shape = {"grads": {"logp": torch.ones(1, 2), "old_logp": None}}
    assert compare_grads(own_shape, want, ["grad_flow"], TOLERANCES) is None


def test_a_constant_answer_keys_alike_at_every_shape() -> None:
    zeros = [answer_key(_tensor(torch.zeros(n))) for n in (0, 3, 7)]
    varied = [answer_key(_tensor(torch.arange(n, dtype=torch.float64))) for n in (2, 3, 7)]
    assert all(k is not None for k in zeros + varied)
    mine = [k for k in zeros if k is not None]
    theirs = [k for k in varied if k is not None]
    assert constant_answers(mine, theirs)
    assert not constant_answers(theirs, theirs)
    assert not constant_answers(mine, mine), "where the expected answers never change, nothing is judged"
    assert answer_key({"raised": {"type": "ValueError"}}) is None


class _Context:
    """The part of a check's context a differential check reads, the learner answering with `answer`."""

    def __init__(self, calls: list[Call], want: list[dict[str, Any]], answer: Any) -> None:
        self.calls, self.want, self.answer = calls, want, answer

    def cases(self, check: Any) -> list[Call]:
        return self.calls

    def expected(self, check: Any, index: int, call: Call) -> dict[str, Any]:
        return self.want[index]

    def expected_float32(self, check: Any, index: int, call: Call) -> dict[str, Any] | None:
        return None

    def observe_all(self, calls: list[Call]) -> Iterator[dict[str, Any] | LearnerFailure]:
        for call in calls:
            yield {**self.answer(call), "inputs_after": dict(call.kwargs)}

    def functions(self) -> list[FunctionSpec]:
        return [FunctionSpec(name="f", params=["x"], signature="f(x)")]

    def tolerances(self) -> dict[str, Tolerance]:
        return TOLERANCES

    def misconception_observations(self, check: Any, index: int) -> dict[str, dict[str, Any]]:
        return {}


def _check(compare: list[Aspect]) -> DifferentialCheck:
    return DifferentialCheck(
        id="c", tier="T0", kind="differential", title="c", points=2, clause="c", cases="c", compare=compare
    )


def _verdicts(ctx: _Context, check: DifferentialCheck) -> list[Verdict]:
    return [case.outcome.verdict for case in check_differential(ctx, check).outcomes]  # type: ignore[arg-type]


def test_responds_fails_a_constant_answer_and_compares_no_value() -> None:
    xs = [torch.randn(4, dtype=torch.float64) for _ in range(4)]
    calls = [Call("f", {"x": x}, f"call {i}") for i, x in enumerate(xs)]
    want = [_tensor(x * 2) for x in xs]
    check = _check(["inputs_unchanged", "responds"])
    constant = _Context(calls, want, lambda call: _tensor(torch.zeros(4, dtype=torch.float64)))
    assert _verdicts(constant, check) == [Verdict.FAIL] * 4
    (first, *_) = check_differential(constant, check).outcomes  # type: ignore[arg-type]
    assert first.outcome.mismatch is NO_RESPONSE
    wrong_values = _Context(calls, want, lambda call: _tensor(call.kwargs["x"] * 3))
    assert _verdicts(wrong_values, check) == [Verdict.PASS] * 4, "a property check never compares values"


def test_a_partner_call_is_judged_on_answering_not_on_its_values() -> None:
    x = torch.randn(3, dtype=torch.float64)
    edge = Call("f", {"x": torch.zeros(0, dtype=torch.float64)}, "empty", group="pair")
    partner = Call("f", {"x": x}, "partner", group="pair").as_partner()
    assert partner.compare == PARTNER_ASPECTS and "values" not in partner.aspects(["type", "values"])
    assert Call.from_data(partner.to_data()).compare == PARTNER_ASPECTS, "the narrowing survives the cache"
    want = [_tensor(torch.zeros(0, dtype=torch.float64)), _tensor(x * 2)]
    check = _check(["type", "shape", "dtype", "values", "responds"])

    def misread(call: Call) -> dict[str, Any]:
        return _tensor(call.kwargs["x"] * 5)  # the empty case right, the partner's values wrong

    assert _verdicts(_Context([edge, partner], want, misread), check) == [Verdict.PASS, Verdict.PASS]

    def raises_on_valid(call: Call) -> dict[str, Any]:
        return _tensor(call.kwargs["x"]) if call.label == "empty" else {"raised": {"type": "ValueError"}}

    assert _verdicts(_Context([edge, partner], want, raises_on_valid), check)[1] == Verdict.ERROR

    def wrong_shape(call: Call) -> dict[str, Any]:
        return _tensor(torch.zeros(0, dtype=torch.float64)) if call.label == "empty" else _tensor(x[:1] * 2)

    assert _verdicts(_Context([edge, partner], want, wrong_shape), check)[1] == Verdict.FAIL


class _Side:
    """An expected side: the key under which a batch keeps each misreading's verdicts on the cases."""


class _Misread(_Context):
    """A context whose one known misreading answers every call as the learner does."""

    def __init__(self, calls: list[Call], want: list[dict[str, Any]], answer: Any) -> None:
        super().__init__(calls, want, answer)
        self.expect = _Side()

    def misconception_observations(self, check: Any, index: int) -> dict[str, dict[str, Any]]:
        return {"m": {**self.answer(self.calls[index]), "inputs_after": dict(self.calls[index].kwargs)}}


def test_a_partner_passed_as_the_misreading_answers_it_does_not_contradict_the_misreading() -> None:
    """A learner who holds a misreading passes its partner calls as that misreading does: judged on the aspects the
    partner is judged on, the misreading passes them too, so they are no evidence that the learner does not hold it."""
    x = torch.randn(3, dtype=torch.float64)
    edge = Call("f", {"x": torch.zeros(0, dtype=torch.float64)}, "empty", group="pair")
    partner = Call("f", {"x": x}, "partner", group="pair").as_partner()
    want = [_tensor(torch.zeros(0, dtype=torch.float64)), _tensor(x * 2)]
    check = _check(["type", "shape", "dtype", "values"])
    ctx = _Misread([edge, partner], want, lambda call: _tensor(call.kwargs["x"] * 5))
    run = CheckRun(check, 0.0, check_differential(ctx, check))  # type: ignore[arg-type]
    assert [case.passed for case in run.tally.outcomes] == [True, True]  # type: ignore[union-attr]
    assert Contradictions(ctx, [run]).counted({"m"}) == {"m": 0}  # type: ignore[arg-type]


# ---------------------------------------------------------------- toys own their phenomena


def _charged(check_id: str) -> Credit:
    wrong = Misconception(id="m", solution="m.py", owners=["owner"], explanation="A misreading owned elsewhere.")
    assert check_id != "owner"
    return Credit({"m": wrong}, faithful=frozenset({"m"}))


@pytest.mark.parametrize("kind", ["experiment", "differential"])
def test_follow_through_never_credits_a_series_outside_tolerance(kind: str) -> None:
    failed = CaseOutcome("series", False, Outcome(Verdict.FAIL, Mismatch.of("off")), explained_by=("m",))
    tally = Tally([failed, CaseOutcome("other", False, Outcome(Verdict.PASS))])
    check = (
        ExperimentCheck(
            id="toy", tier="T3", kind="experiment", title="toy", points=4, clause="t", series=["series", "other"]
        )
        if kind == "experiment"
        else DifferentialCheck(
            id="toy", tier="T1", kind="differential", title="t", points=4, clause="t", cases="c", compare=["values"]
        )
    )
    result = tally.result(check, 0.0, _charged(check.id))
    if kind == "experiment":
        assert result.verdict == Verdict.FAIL and result.score == 2 and not result.cases_followed_through
    else:
        assert result.verdict == Verdict.PASS and result.score == 4 and result.cases_followed_through == 1


class _Toy:
    """The part of a check's context an experiment check reads: one known-wrong solution's series."""

    def __init__(self, mine: dict[str, torch.Tensor], want: dict[str, torch.Tensor], wrong: dict[str, Any]) -> None:
        self.mine, self.want, self.wrong = mine, want, wrong

    def experiment(self) -> list[PartResult]:
        return [PartResult("toy", self.mine)]

    def reference_series(self) -> dict[str, torch.Tensor]:
        return self.want

    def series_hidden(self) -> bool:
        return True

    def series_part(self, series: str) -> str:
        return "toy"

    def misconception_series(self) -> dict[str, dict[str, torch.Tensor]]:
        return self.wrong


@pytest.mark.slow
@pytest.mark.parametrize("problem_id", list_problems())
def test_no_series_marked_outside_tolerance_belongs_to_a_passed_check(problem_id: str) -> None:
    """Over every known misreading's toy at the first grading seed, with every misreading charged (the most credit
    follow-through could give): a check whose series a plot marks outside tolerance is never reported passed."""
    problem = Problem(problem_id)
    expectations = expectations_of(problem_id, problem.grading_seeds[0])
    want, wrong = expectations.series(), expectations.misconception_series()
    credit = Credit({m.id: m for m in problem.misconceptions}, faithful=frozenset(m.id for m in problem.misconceptions))
    tolerances = series_tolerances(problem.spec.checks)
    toys = [c for c in problem.spec.checks if isinstance(c, ExperimentCheck)]
    marked_somewhere = False
    for mid, mine in wrong.items():
        for check in toys:
            marked = any(
                name in mine
                and mine[name].shape == want[name].shape
                and bool(outside_tolerance(mine[name].double(), want[name].double(), tolerances[name]).any())
                for name in check.series
            )
            marked_somewhere |= marked
            result = check_experiment(_Toy(mine, want, wrong), check).result(check, 0.0, credit)  # type: ignore[arg-type]
            assert not (marked and result.verdict == Verdict.PASS), f"{mid}: {check.id} passed with marked points"
    assert marked_somewhere, "some misreading changes some toy"


class _TwoFunctions(_Misread):
    """Two functions; the known misreading answers both five times x, the learner only `f`."""

    def functions(self) -> list[FunctionSpec]:
        return [FunctionSpec(name=name, params=["x"], signature=f"{name}(x)") for name in ("f", "g")]

    def misconception_observations(self, check: Any, index: int) -> dict[str, dict[str, Any]]:
        call = self.calls[index]
        return {"m": {**_tensor(call.kwargs["x"] * 5), "inputs_after": dict(call.kwargs)}}


def test_a_passing_call_of_another_function_does_not_contradict_a_misreading() -> None:
    """A port that computes one function in float32 and the other in float64 holds the misreading in the first:
    passing the second's cases, which the misreading's own solution fails, is no evidence against it there."""
    xs = [torch.randn(3, dtype=torch.float64) for _ in range(4)]
    calls = [Call(name, {"x": x}, f"{name} {i}") for i, (name, x) in enumerate(zip("ffgg", xs, strict=True))]
    want = [_tensor(x * 2) for x in xs]
    check = _check(["type", "shape", "dtype", "values"])

    def graded(answer: Any) -> CheckRun:
        ctx = _TwoFunctions(calls, want, answer)
        return CheckRun(check, 0.0, check_differential(ctx, check))  # type: ignore[arg-type]

    def like_m_in_f(call: Call) -> dict[str, Any]:
        return _tensor(call.kwargs["x"] * (5 if call.function == "f" else 2))

    run = graded(like_m_in_f)
    assert [c.explained_by for c in run.tally.outcomes] == [("m",), ("m",), (), ()]  # type: ignore[union-attr]
    assert Contradictions(_TwoFunctions(calls, want, like_m_in_f), [run]).counted({"m"}) == {"m": 0}  # type: ignore[arg-type]

    def wrong_in_f(call: Call) -> dict[str, Any]:  # fails f otherwise than m: m explains no call, both g count
        return _tensor(call.kwargs["x"] * (7 if call.function == "f" else 2))

    run = graded(wrong_in_f)
    assert Contradictions(_TwoFunctions(calls, want, wrong_in_f), [run]).counted({"m"}) == {"m": 2}  # type: ignore[arg-type]
