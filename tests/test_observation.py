"""grader.observation: forged or malformed answers are refused, and each aspect is judged with useful evidence."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from grader.compare import MAX_ELEMENTS
from grader.observation import Malformed, compare_grads, compare_inputs, judge_case, sanitize
from grader.spec import Tolerance
from grader.verdicts import Verdict
from grader.worker.protocol import observe_call

TOLERANCES = {"float32": Tolerance(rtol=1e-4, atol=1e-6), "float64": Tolerance(rtol=1e-9, atol=1e-12)}
X = torch.tensor([[0.5, -1.0, 2.0], [3.0, 0.25, -4.0]], dtype=torch.float64)  # [2, 3]


def double(logp: torch.Tensor) -> torch.Tensor:
    return logp.detach() * 2


def loss(logp: torch.Tensor) -> torch.Tensor:
    return (logp * X).sum()


def observed(function: Any, requires_grad: tuple[str, ...] = (), backward: bool = False) -> dict[str, Any]:
    return sanitize(observe_call(function, {"logp": X}, list(requires_grad), backward))


def tensor_output(value: Any, **changes: Any) -> dict[str, Any]:
    desc = {"kind": "tensor", "value": value, "requires_grad": False, "has_grad_fn": False, "device": "cpu"}
    return {"output": {**desc, **changes}, "inputs_after": {"logp": X}}


class Sneaky(torch.Tensor):
    """A tensor subclass: its methods are the learner's code, so it must never reach the judge."""


# ---------------------------------------------------------------- sanitize


def test_real_observations_are_accepted() -> None:
    obs = observed(loss, ("logp",), backward=True)
    assert obs["output"]["kind"] == "tensor" and torch.equal(obs["grads"]["logp"], X)


@pytest.mark.parametrize(("forged", "reason"), [
    ([], "not a dict"),
    ({"inputs_after": {}}, "output"),
    ({"output": "a tensor, honestly"}, "output"),
    ({"output": {"kind": "pickle"}}, "unknown kind"),
    (tensor_output(X.as_subclass(Sneaky)), "not a plain tensor"),
    (tensor_output([1.0, 2.0]), "not a plain tensor"),
    (tensor_output(torch.zeros(1).expand(MAX_ELEMENTS + 1)), "elements"),
    (tensor_output(X, requires_grad="yes"), "requires_grad"),
    (tensor_output(X, has_grad_fn=None), "has_grad_fn"),
    ({"output": {"kind": "sequence", "items": "abc"}}, "item list"),
    ({"output": {"kind": "sequence", "items": [{"kind": "python"}] * 65}}, "item list"),
    ({"raised": "ValueError"}, "exception"),
    ({"raised": {"type": "ValueError", "bases": "ValueError"}}, "exception"),
    ({**tensor_output(X), "grads": [X]}, "grads"),
    ({**tensor_output(X), "grads": {"logp": X.as_subclass(Sneaky)}}, "grad of logp"),
    ({**tensor_output(X), "grads": {"logp": "zeros"}}, "grad of logp"),
    ({**tensor_output(X), "backward_error": 3}, "backward_error"),
    ({"output": tensor_output(X)["output"], "inputs_after": {"logp": 1.0}}, "input logp"),
    ({"output": tensor_output(X)["output"], "inputs_after": [X]}, "inputs_after"),
])
def test_forged_observations_are_malformed(forged: Any, reason: str) -> None:
    with pytest.raises(Malformed, match=reason):
        sanitize(forged)


def test_deeply_nested_sequences_are_malformed() -> None:
    desc: dict[str, Any] = {"kind": "python", "type": "int", "value": 1}
    for _ in range(6):
        desc = {"kind": "sequence", "type": "list", "items": [desc]}
    with pytest.raises(Malformed):
        sanitize({"output": desc})


# ---------------------------------------------------------------- outputs


def test_matching_output_passes() -> None:
    want = observed(double)
    assert judge_case("f", {"logp": X}, observed(double), want, ["type", "shape", "dtype", "values"],
                      TOLERANCES).verdict == Verdict.PASS


def test_value_mismatch_fails_with_evidence() -> None:
    got = observed(lambda logp: logp.detach() * 2 + (logp.detach() == 3.0) * 0.5)
    outcome = judge_case("f", {"logp": X}, got, observed(double), ["values"], TOLERANCES)
    assert outcome.verdict == Verdict.FAIL and outcome.mismatch is not None
    assert outcome.mismatch.message.startswith("f[1, 0]: expected 6, got 6.5")


@pytest.mark.parametrize(("function", "aspect", "words"), [
    (lambda logp: float(logp.detach().sum()), "type", "expected a torch.Tensor, got a Python float"),
    (lambda logp: logp.detach().float() * 2, "dtype", "expected dtype torch.float64, got torch.float32"),
    (lambda logp: logp.detach().reshape(3, 2) * 2, "shape", "expected shape (2, 3), got (3, 2)"),
    (lambda logp: logp * 2, "requires_grad", "detach it"),
])
def test_each_output_aspect_names_what_differs(function: Any, aspect: str, words: str) -> None:
    got = observed(function, ("logp",))
    outcome = judge_case("f", {"logp": X}, got, observed(double, ("logp",)), [aspect], TOLERANCES)
    assert outcome.verdict == Verdict.FAIL and outcome.mismatch is not None
    assert words in outcome.mismatch.message


def test_detached_loss_is_not_connected() -> None:
    want = observed(loss, ("logp",), backward=True)
    got = observed(lambda logp: loss(logp).detach(), ("logp",), backward=True)
    outcome = judge_case("f", {"logp": X}, got, want, ["connected"], TOLERANCES)
    assert outcome.verdict == Verdict.FAIL and "no grad_fn" in outcome.mismatch.message  # type: ignore[union-attr]


def test_aspects_not_named_are_not_judged() -> None:
    got = observed(lambda logp: logp.detach().float() * 2)
    assert judge_case("f", {"logp": X}, got, observed(double), ["shape"], TOLERANCES).verdict == Verdict.PASS


# ---------------------------------------------------------------- exceptions


def raise_value_error(logp: torch.Tensor) -> torch.Tensor:
    raise ValueError("bad shape")


class ShapeError(ValueError):
    pass


def test_expected_exception_subclass_passes() -> None:
    def raise_subclass(logp: torch.Tensor) -> torch.Tensor:
        raise ShapeError("bad")

    want = observed(raise_value_error)
    assert judge_case("f", {"logp": X}, observed(raise_subclass), want, ["raises"], TOLERANCES).verdict == Verdict.PASS


def test_not_raising_fails_and_says_what_was_expected() -> None:
    outcome = judge_case("f", {"logp": X}, observed(double), observed(raise_value_error), ["raises"], TOLERANCES)
    assert outcome.verdict == Verdict.FAIL
    assert "returned normally; expected it to raise ValueError" in outcome.mismatch.message  # type: ignore[union-attr]


def test_wrong_exception_type_fails() -> None:
    def raise_type_error(logp: torch.Tensor) -> torch.Tensor:
        raise TypeError("nope")

    outcome = judge_case("f", {"logp": X}, observed(raise_type_error), observed(raise_value_error), ["raises"],
                         TOLERANCES)
    assert outcome.verdict == Verdict.FAIL and "TypeError" in outcome.mismatch.message  # type: ignore[union-attr]


def test_raising_on_a_valid_case_is_an_error() -> None:
    outcome = judge_case("f", {"logp": X}, observed(raise_value_error), observed(double), ["values"], TOLERANCES)
    assert outcome.verdict == Verdict.ERROR and "ValueError: bad shape" in outcome.mismatch.message  # type: ignore[union-attr]


def test_sys_exit_is_observed_as_an_exception() -> None:
    def leave(logp: torch.Tensor) -> torch.Tensor:
        raise SystemExit(0)

    assert observed(leave)["raised"]["type"] == "SystemExit"


# ---------------------------------------------------------------- gradients

GRAD_ASPECTS = ["backward", "grads"]


def grads_obs(**grads: torch.Tensor | None) -> dict[str, Any]:
    return {"grads": grads}


def test_no_gradient_expected_accepts_none_and_zeros() -> None:
    want = grads_obs(rollout_logp=None)
    assert compare_grads(grads_obs(rollout_logp=None), want, GRAD_ASPECTS, TOLERANCES) is None
    assert compare_grads(grads_obs(rollout_logp=torch.zeros(2, 3)), want, GRAD_ASPECTS, TOLERANCES) is None


def test_no_gradient_expected_rejects_a_nonzero_gradient() -> None:
    mismatch = compare_grads(grads_obs(rollout_logp=torch.ones(2, 3)), grads_obs(rollout_logp=None), GRAD_ASPECTS,
                             TOLERANCES)
    assert mismatch is not None and "stop-gradient" in mismatch.message


def test_missing_gradient_reads_as_zeros_unless_connection_is_checked() -> None:
    want = grads_obs(logp=torch.zeros(2, 3, dtype=torch.float64))
    assert compare_grads(grads_obs(logp=None), want, GRAD_ASPECTS, TOLERANCES) is None
    mismatch = compare_grads(grads_obs(logp=None), want, ["connected"], TOLERANCES)
    assert mismatch is not None and "received no gradient" in mismatch.message


def test_missing_gradient_fails_when_a_nonzero_one_is_expected() -> None:
    mismatch = compare_grads(grads_obs(logp=None), grads_obs(logp=X), GRAD_ASPECTS, TOLERANCES)
    assert mismatch is not None and "d loss / d logp" in mismatch.message


def test_gradient_values_are_compared_with_evidence() -> None:
    got = X.clone()
    got[0, 2] = -2.0
    mismatch = compare_grads(grads_obs(logp=got), grads_obs(logp=X), GRAD_ASPECTS, TOLERANCES)
    assert mismatch is not None and mismatch.message.startswith("d loss / d logp[0, 2]: expected 2, got -2")


def test_backward_error_is_reported() -> None:
    got = {"backward_error": {"type": "RuntimeError", "bases": ["RuntimeError"], "message": "does not require grad"}}
    mismatch = compare_grads(got, grads_obs(logp=X), GRAD_ASPECTS, TOLERANCES)
    assert mismatch is not None and "backward() raised RuntimeError" in mismatch.message


def test_nan_gradient_fails() -> None:
    got = X.clone()
    got[1, 1] = float("nan")
    assert compare_grads(grads_obs(logp=got), grads_obs(logp=X), GRAD_ASPECTS, TOLERANCES) is not None


# ---------------------------------------------------------------- inputs


def test_untouched_inputs_pass_even_with_nan() -> None:
    sent = {"logp": torch.tensor([1.0, float("nan")]), "clip_low": 0.2}
    assert compare_inputs(sent, {"inputs_after": {"logp": sent["logp"].clone()}}) is None


def test_changed_values_are_detected() -> None:
    sent = {"logp": X}
    after = X.clone()
    after[1, 2] = 0.0
    mismatch = compare_inputs(sent, {"inputs_after": {"logp": after}})
    assert mismatch is not None and "[1, 2]" in mismatch.message and "in place" in mismatch.message


def test_changed_strides_are_detected() -> None:
    sent = {"logp": X.t().contiguous().t()}  # column-major [2, 3]
    mismatch = compare_inputs(sent, {"inputs_after": {"logp": X.clone()}})
    assert mismatch is not None and "strides" in mismatch.message


def test_missing_input_is_detected() -> None:
    mismatch = compare_inputs({"logp": X}, {"inputs_after": {}})
    assert mismatch is not None and "not handed back" in mismatch.message


def test_in_place_edit_through_detach_is_caught_end_to_end() -> None:
    def sneaky(logp: torch.Tensor) -> torch.Tensor:
        logp.detach()[0, 0] = 0.0  # shares storage with the input
        return logp.detach()

    sent = {"logp": X.clone()}
    got = sanitize(observe_call(sneaky, sent, [], False))
    outcome = judge_case("f", {"logp": X}, got, observed(double), ["inputs_unchanged"], TOLERANCES)
    assert outcome.verdict == Verdict.FAIL
