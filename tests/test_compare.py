"""grader.judge.compare: tolerance and bitwise comparison, NaN and inf rules, evidence a learner can act on."""

from __future__ import annotations

import math

import pytest
import torch

from grader.judge.accept import accept_observation
from grader.judge.compare import MAX_ELEMENTS, compare_output, compare_tensors, same_as
from grader.model.spec import Aspect, Tolerance
from grader.worker.protocol import observe_call

TOL = Tolerance(rtol=1e-4, atol=1e-6)
NAN, INF = math.nan, math.inf


def t(*values: float, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    return torch.tensor(values, dtype=dtype)


@pytest.mark.parametrize("tol", [TOL, None], ids=["tolerance", "bitwise"])
def test_identical_tensors_match(tol: Tolerance | None) -> None:
    x = torch.linspace(-3, 3, 12, dtype=torch.float64).reshape(3, 4)
    assert compare_tensors("w", x.clone(), x, tol) is None


@pytest.mark.parametrize("tol", [TOL, None], ids=["tolerance", "bitwise"])
def test_nan_matches_nan_and_inf_matches_inf_of_the_same_sign(tol: Tolerance | None) -> None:
    assert compare_tensors("w", t(NAN, INF, -INF, 1.0), t(NAN, INF, -INF, 1.0), tol) is None


@pytest.mark.parametrize("tol", [TOL, None], ids=["tolerance", "bitwise"])
@pytest.mark.parametrize(("got", "want"), [(NAN, 0.0), (0.0, NAN), (INF, -INF), (INF, 1e300), (-INF, NAN)])
def test_nan_and_inf_mismatches_are_caught(tol: Tolerance | None, got: float, want: float) -> None:
    assert compare_tensors("w", t(1.0, got), t(1.0, want), tol) is not None


def test_tolerance_accepts_small_errors_that_bitwise_rejects() -> None:
    want = t(1.0, 2.0)
    got = torch.nextafter(want, torch.full_like(want, INF))  # one ulp above
    assert compare_tensors("w", got, want, TOL) is None
    assert compare_tensors("w", got, want, None) is not None


def test_tolerance_rejects_errors_beyond_rtol_and_atol() -> None:
    assert compare_tensors("w", t(1.0 + 2e-4), t(1.0), TOL) is not None
    assert compare_tensors("w", t(5e-6), t(0.0), TOL) is not None
    assert compare_tensors("w", t(5e-7), t(0.0), TOL) is None


def test_signed_zeros_are_equal_even_bitwise() -> None:
    assert compare_tensors("w", t(-0.0), t(0.0), None) is None


def test_evidence_names_index_expected_and_got() -> None:
    want = torch.zeros(3, 4, dtype=torch.float64)
    got = want.clone()
    got[2, 1] = 1.25
    got[2, 3] = 7.0
    mismatch = compare_tensors("weights", got, want, TOL)
    assert mismatch is not None
    assert mismatch.message.startswith("weights[2, 1]: expected 0, got 1.25")
    assert "2 of 12 elements differ" in mismatch.message
    assert "rtol 0.0001, atol 1e-06" in mismatch.message


def test_evidence_reports_relative_error_and_the_bound() -> None:
    mismatch = compare_tensors("loss", t(2.5), t(2.0), None)
    assert mismatch is not None
    assert "expected 2, got 2.5" in mismatch.message
    assert "abs err 0.5" in mismatch.message and "rel err 0.25" in mismatch.message and "bitwise" in mismatch.message


def test_scalar_evidence_has_no_index() -> None:
    mismatch = compare_tensors("loss", torch.tensor(1.0), torch.tensor(0.0), TOL)
    assert mismatch is not None and mismatch.message.startswith("loss: expected 0, got 1")


def test_learner_message_hides_the_values() -> None:
    mismatch = compare_tensors("weights", t(0.0, 123.456), t(0.0, 0.5), TOL)
    assert mismatch is not None
    assert "123.456" not in mismatch.learner_message and "0.5" not in mismatch.learner_message
    assert "weights" in mismatch.learner_message


def test_shape_mismatch_names_both_shapes() -> None:
    mismatch = compare_tensors("weights", torch.zeros(3, 4), torch.zeros(4, 3), TOL)
    assert mismatch is not None and "expected shape (4, 3), got (3, 4)" in mismatch.message


def test_float32_is_compared_against_float64_without_losing_the_difference() -> None:
    want = t(0.1)
    assert compare_tensors("w", want.to(torch.float32), want, None) is not None  # float32(0.1) != 0.1
    assert compare_tensors("w", want.to(torch.float32), want, TOL) is None


def test_integer_tensors_compare_exactly() -> None:
    assert compare_tensors("n", torch.tensor([1, 2, 3]), torch.tensor([1, 2, 3]), None) is None
    assert compare_tensors("n", torch.tensor([1, 2, 4]), torch.tensor([1, 2, 3]), None) is not None


def test_huge_tensors_are_refused_before_any_arithmetic() -> None:
    huge = torch.zeros(1).expand(MAX_ELEMENTS + 1)  # no memory behind it
    mismatch = compare_tensors("weights", huge, huge, TOL)
    assert mismatch is not None and "too large" in mismatch.message


def test_without_evidence_the_answer_is_the_same() -> None:
    """The diagnosis's cheap path (no evidence) must agree with the full comparison on every pair of values."""
    g = torch.Generator().manual_seed(0)
    specials = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 1e-300], dtype=torch.float64)
    for trial in range(300):
        want = torch.randn(4, 5, generator=g, dtype=torch.float64)
        got = want + torch.randn(4, 5, generator=g, dtype=torch.float64) * 10.0 ** -int(
            torch.randint(3, 12, (1,), generator=g)
        )
        if trial % 3 == 0:
            where = torch.randint(0, 20, (3,), generator=g)
            got.view(-1)[where] = specials[torch.randint(0, 6, (3,), generator=g)]
            if trial % 2:
                want.view(-1)[where] = got.view(-1)[where]
        got = got.to(torch.float32) if trial % 5 == 0 else got
        for tol in (None, TOL):
            full = compare_tensors("w", got, want, tol)
            quick = compare_tensors("w", got, want, tol, evidence=False)
            assert (full is None) == (quick is None), (trial, tol)


def _scalar_tensor(value: float) -> dict[str, object]:
    tensor = torch.tensor(value, dtype=torch.float64)
    return {"kind": "tensor", "value": tensor, "requires_grad": False, "has_grad_fn": False, "device": "cpu"}


def test_a_python_number_is_compared_by_value_where_the_type_is_owned_elsewhere() -> None:
    """A check that leaves "type" out of its aspects judges a 0-dim result's value, however it was returned: the
    contract check, which compares the type, charges a Python float once."""
    tolerances = {"float64": Tolerance(rtol=1e-9, atol=1e-12)}
    want = _scalar_tensor(0.25)
    number = {"kind": "python", "type": "float", "value": 0.25}
    assert compare_output("clipfrac", number, want, ["dtype", "values"], tolerances) is None
    wrong = compare_output("clipfrac", {**number, "value": 0.5}, want, ["dtype", "values"], tolerances)
    assert wrong is not None and "expected 0.25" in wrong.message
    typed = compare_output("clipfrac", number, want, ["type", "dtype", "values"], tolerances)
    assert typed is not None and "Python float" in typed.message
    flag = {"kind": "python", "type": "bool", "value": True}
    assert compare_output("clipfrac", flag, _scalar_tensor(1.0), ["values"], tolerances) is not None
    vector = {**want, "value": torch.zeros(3, dtype=torch.float64)}
    assert compare_output("weights", number, vector, ["values"], tolerances) is not None


def test_a_misreading_computed_in_float32_matches_it_where_float64_is_compared_at_float32s_precision() -> None:
    """A learner who holds a misreading and computes in float32 is explained by it wherever the check compares
    float64 results at float32's precision; a check that owns float64 precision still tells them apart."""
    misreading = torch.tensor([0.1, -0.7, 1.3], dtype=torch.float64) / 3
    learner = misreading.float().double()  # the same misreading, rounded to float32
    got, theirs = (accept_observation(observe_call(lambda v=v: v, {}, [], False)) for v in (learner, misreading))
    tolerances = {"float32": Tolerance(rtol=1e-4, atol=1e-6), "float64": Tolerance(rtol=1e-9, atol=1e-12)}
    aspects: list[Aspect] = ["type", "shape", "values"]
    assert same_as("f", {}, got, theirs, aspects, tolerances, lowered=True)
    assert not same_as("f", {}, got, theirs, aspects, tolerances)
