"""grader.judge.observation: forged or malformed answers are refused, and each aspect is judged with useful evidence."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from grader.judge.accept import ALLOWED_DTYPES, MAX_DEPTH, MAX_ITEMS, Malformed, accept_hello, accept_observation
from grader.judge.compare import MAX_ELEMENTS, compare_grads, compare_inputs, judge_case, same_as
from grader.model.spec import Aspect, Tolerance
from grader.model.verdicts import Verdict
from grader.worker.protocol import observe_call

TOLERANCES = {"float32": Tolerance(rtol=1e-4, atol=1e-6), "float64": Tolerance(rtol=1e-9, atol=1e-12)}
X = torch.tensor([[0.5, -1.0, 2.0], [3.0, 0.25, -4.0]], dtype=torch.float64)  # [2, 3]


def double(logp: torch.Tensor) -> torch.Tensor:
    return logp.detach() * 2


def loss(logp: torch.Tensor) -> torch.Tensor:
    return (logp * X).sum()


def observed(function: Any, requires_grad: tuple[str, ...] = (), backward: bool = False) -> dict[str, Any]:
    return accept_observation(observe_call(function, {"logp": X}, list(requires_grad), backward))


def tensor_output(value: Any, **changes: Any) -> dict[str, Any]:
    desc = {"kind": "tensor", "value": value, "requires_grad": False, "has_grad_fn": False, "device": "cpu"}
    return {"output": {**desc, **changes}, "inputs_after": {"logp": X}}


class Sneaky(torch.Tensor):
    """A tensor subclass: its methods are the learner's code, so it must never reach the judge."""


# ---------------------------------------------------------------- sanitize


def test_real_observations_are_accepted() -> None:
    obs = observed(loss, ("logp",), backward=True)
    assert obs["output"]["kind"] == "tensor" and torch.equal(obs["grads"]["logp"], X)


@pytest.mark.parametrize(
    ("forged", "reason"),
    [
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
    ],
)
def test_forged_observations_are_malformed(forged: Any, reason: str) -> None:
    with pytest.raises(Malformed, match=reason):
        accept_observation(forged)


def test_deeply_nested_sequences_are_malformed() -> None:
    desc: dict[str, Any] = {"kind": "python", "type": "int", "value": 1}
    for _ in range(6):
        desc = {"kind": "sequence", "type": "list", "items": [desc]}
    with pytest.raises(Malformed):
        accept_observation({"output": desc})


# ---------------------------------------------------------------- outputs


def test_matching_output_passes() -> None:
    want = observed(double)
    assert (
        judge_case("f", {"logp": X}, observed(double), want, ["type", "shape", "dtype", "values"], TOLERANCES).verdict
        == Verdict.PASS
    )


def test_value_mismatch_fails_with_evidence() -> None:
    got = observed(lambda logp: logp.detach() * 2 + (logp.detach() == 3.0) * 0.5)
    outcome = judge_case("f", {"logp": X}, got, observed(double), ["values"], TOLERANCES)
    assert outcome.verdict == Verdict.FAIL and outcome.mismatch is not None
    assert outcome.mismatch.message.startswith("f[1, 0]: expected 6, got 6.5")


@pytest.mark.parametrize(
    ("function", "aspect", "words"),
    [
        (lambda logp: float(logp.detach().sum()), "type", "expected a torch.Tensor, got a Python float"),
        (lambda logp: logp.detach().float() * 2, "dtype", "expected dtype torch.float64, got torch.float32"),
        (lambda logp: logp.detach().reshape(3, 2) * 2, "shape", "expected shape (2, 3), got (3, 2)"),
        (lambda logp: logp * 2, "requires_grad", "detach it"),
    ],
)
def test_each_output_aspect_names_what_differs(function: Any, aspect: Aspect, words: str) -> None:
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

    outcome = judge_case(
        "f", {"logp": X}, observed(raise_type_error), observed(raise_value_error), ["raises"], TOLERANCES
    )
    assert outcome.verdict == Verdict.FAIL and "TypeError" in outcome.mismatch.message  # type: ignore[union-attr]


def test_raising_on_a_valid_case_is_an_error() -> None:
    outcome = judge_case("f", {"logp": X}, observed(raise_value_error), observed(double), ["values"], TOLERANCES)
    assert outcome.verdict == Verdict.ERROR and "ValueError: bad shape" in outcome.mismatch.message  # type: ignore[union-attr]


def test_sys_exit_is_observed_as_an_exception() -> None:
    def leave(logp: torch.Tensor) -> torch.Tensor:
        raise SystemExit(0)

    assert observed(leave)["raised"]["type"] == "SystemExit"


# ---------------------------------------------------------------- gradients

GRAD_ASPECTS: list[Aspect] = ["backward", "grads"]


def grads_obs(**grads: torch.Tensor | None) -> dict[str, Any]:
    return {"grads": grads}


def test_no_gradient_expected_accepts_none_and_zeros() -> None:
    want = grads_obs(rollout_logp=None)
    assert compare_grads(grads_obs(rollout_logp=None), want, GRAD_ASPECTS, TOLERANCES) is None
    assert compare_grads(grads_obs(rollout_logp=torch.zeros(2, 3)), want, GRAD_ASPECTS, TOLERANCES) is None


def test_no_gradient_expected_rejects_a_nonzero_gradient() -> None:
    mismatch = compare_grads(
        grads_obs(rollout_logp=torch.ones(2, 3)), grads_obs(rollout_logp=None), GRAD_ASPECTS, TOLERANCES
    )
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
    sent: dict[str, Any] = {"logp": torch.tensor([1.0, float("nan")]), "clip_low": 0.2}
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


def test_an_input_not_handed_back_is_one_the_call_left_unchanged() -> None:
    """The worker hands back only the inputs a call changed (`protocol.changed_inputs`)."""
    assert compare_inputs({"logp": X, "mask": X > 0}, {"inputs_after": {}}) is None
    after = X.clone()
    after[0, 0] += 1.0
    assert compare_inputs({"logp": X, "mask": X > 0}, {"inputs_after": {"logp": after}}) is not None


def test_a_misreading_is_matched_on_the_inputs_it_changed_whichever_side_hands_them_back() -> None:
    sent = {"logp": X}
    edited = X.clone()
    edited[1, 1] = 0.0
    answer = {"output": tensor_output(X)["output"]}
    left = {**answer, "inputs_after": {}}
    both: tuple[Aspect, ...] = ("inputs_unchanged",)
    assert same_as("f", sent, left, {**answer, "inputs_after": {"logp": X.clone()}}, both, TOLERANCES)
    assert not same_as("f", sent, left, {**answer, "inputs_after": {"logp": edited}}, both, TOLERANCES)
    assert same_as(
        "f",
        sent,
        {**answer, "inputs_after": {"logp": edited}},
        {**answer, "inputs_after": {"logp": edited}},
        both,
        TOLERANCES,
    )


def test_in_place_edit_through_detach_is_caught_end_to_end() -> None:
    def sneaky(logp: torch.Tensor) -> torch.Tensor:
        logp.detach()[0, 0] = 0.0  # shares storage with the input
        return logp.detach()

    sent = {"logp": X.clone()}
    got = accept_observation(observe_call(sneaky, sent, [], False))
    outcome = judge_case("f", {"logp": X}, got, observed(double), ["inputs_unchanged"], TOLERANCES)
    assert outcome.verdict == Verdict.FAIL


# ---------------------------------------------------------------- allow-list of what may cross to the judge


@pytest.mark.parametrize("dtype", sorted(ALLOWED_DTYPES, key=str))
def test_allowed_dtypes_are_accepted(dtype: torch.dtype) -> None:
    got = accept_observation(tensor_output(torch.zeros(2, 3, dtype=dtype)))
    assert got["output"]["value"].dtype == dtype


@pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor")  # torch deprecates the quantized tensor refused here
@pytest.mark.parametrize(
    "make",
    [
        lambda: torch.zeros(3, dtype=torch.float8_e4m3fn),
        lambda: torch.zeros(3, dtype=torch.float8_e5m2),
        lambda: torch.zeros(3, dtype=torch.uint8).view(torch.bits8),
        lambda: torch.zeros(3, dtype=torch.complex64),
        lambda: torch.zeros(3, dtype=torch.uint16),
        lambda: torch.quantize_per_tensor(torch.zeros(3), 0.1, 0, torch.qint8),
    ],
    ids=["float8_e4m3fn", "float8_e5m2", "bits8", "complex64", "uint16", "qint8"],
)
def test_dtypes_outside_the_allow_list_are_malformed(make: Callable[[], torch.Tensor]) -> None:
    with pytest.raises(Malformed, match="dtype"):
        accept_observation(tensor_output(make()))


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (torch.zeros(3).to_sparse(), "dense"),
        (torch.zeros(3, device="meta"), "device"),
        (torch.zeros([1] * 17), "dimensions"),
    ],
)
def test_layouts_devices_and_shapes_outside_the_allow_list_are_malformed(value: torch.Tensor, reason: str) -> None:
    with pytest.raises(Malformed, match=reason):
        accept_observation(tensor_output(value))


def test_an_accepted_answer_is_a_fresh_copy_without_unknown_keys() -> None:
    forged = {**tensor_output(X), "op": "observed", "payload": [[[[[]]]]], "tainted": False}
    forged["output"]["smuggled"] = object()
    got = accept_observation(forged)
    assert set(got) == {"output", "inputs_after"} and "smuggled" not in got["output"]


def _nested(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    "forged",
    [
        {"raised": {"type": "ValueError", "bases": _nested(50_000), "message": "deep"}},
        {"raised": {"type": "ValueError", "bases": ["ValueError"], "message": _nested(50_000)}},
        {"output": {"kind": "python", "type": "list", "value": _nested(50_000)}},
        {
            "output": {
                "kind": "sequence",
                "type": "list",
                "items": [
                    {
                        "kind": "sequence",
                        "type": "t",
                        "items": [
                            {
                                "kind": "sequence",
                                "type": "t",
                                "items": [
                                    {
                                        "kind": "sequence",
                                        "type": "t",
                                        "items": [
                                            {
                                                "kind": "sequence",
                                                "type": "t",
                                                "items": [{"kind": "sequence", "type": "t", "items": []}],
                                            }
                                        ],
                                    }
                                ],
                            }
                        ],
                    }
                ],
            }
        },
        {**tensor_output(X), "grads": {("logp",): X}},
        {**tensor_output(X), "inputs_after": {"logp": X, 7: X}},
    ],
)
def test_deep_or_odd_nesting_is_malformed_never_a_recursion_error(forged: dict[str, Any]) -> None:
    with pytest.raises(Malformed):
        accept_observation(forged)


def test_every_sequence_level_can_hold_the_maximum_without_exhausting_the_judge() -> None:
    level: dict[str, Any] = {"kind": "python", "type": "int", "value": 1}
    for _ in range(MAX_DEPTH):
        level = {"kind": "sequence", "type": "list", "items": [level] * MAX_ITEMS}
    with pytest.raises(Malformed, match="more than"):
        accept_observation({"output": level})  # 64 ** 4 descriptions: refused once the answer's budget runs out


def test_learner_text_is_cleaned_and_bounded_where_it_is_accepted() -> None:
    raised = {
        "type": "Boom\x1b[2J",
        "bases": ["Boom\x1b[2J", "ValueError"],
        "message": "\ud800" + "m" * 9000,
        "where": "line 3\x1b]0;t\x07",
    }
    got = accept_observation({"raised": raised, "inputs_after": {}})["raised"]
    assert got["type"] == "Boom\\x1b[2J" and got["bases"][1] == "ValueError"
    assert got["message"].startswith("\N{REPLACEMENT CHARACTER}") and got["message"].endswith("more characters)")
    assert "\x1b" not in got["where"] and "\x07" not in got["where"]


def test_an_answer_carrying_megabytes_of_text_is_malformed() -> None:
    with pytest.raises(Malformed, match="characters of text"):
        accept_observation({"raised": {"type": "E" * (8 << 20), "bases": [], "message": ""}, "inputs_after": {}})


def test_huge_python_values_are_malformed() -> None:
    for value in (10**400, "s" * 100_000):
        with pytest.raises(Malformed):
            accept_observation({"output": {"kind": "python", "type": type(value).__name__, "value": value}})


# ---------------------------------------------------------------- the worker's first message


def _param(name: Any, kind: str = "POSITIONAL_OR_KEYWORD", has_default: Any = False) -> dict[str, Any]:
    return {"name": name, "kind": kind, "has_default": has_default}


def test_a_real_hello_is_accepted_as_sent() -> None:
    hello = {
        "op": "ready",
        "functions": {
            "f": {"callable": True, "params": [_param("logp"), _param("clip", "KEYWORD_ONLY", True)]},
            "g": {"callable": False, "type": "int"},
            "h": {"callable": True, "error": "no signature found for builtin"},
        },
    }
    assert accept_hello(hello) == hello


@pytest.mark.parametrize(
    "functions",
    [
        {"f": {"callable": True, "params": [_param(["logp"])]}},
        {"f": {"callable": True, "params": [_param(7)]}},
        {"f": {"callable": True, "params": [_param(None)]}},
        {"f": {"callable": True, "params": [_param("not an identifier")]}},
        {"f": {"callable": True, "params": [_param("logp", kind="SPREAD")]}},
        {"f": {"callable": True, "params": [_param("logp", has_default="no")]}},
        {"f": {"callable": True, "params": "logp"}},
        {"f": {"callable": "yes"}},
        {"f": 5},
        {7: {"callable": False, "type": "int"}},
        {"f": {"callable": True, "params": [_param(f"p{i}") for i in range(1000)]}},
        "functions",
    ],
)
def test_a_forged_hello_is_the_learners_import_error(functions: Any) -> None:
    accepted = accept_hello({"op": "ready", "functions": functions})
    assert accepted["op"] == "import_error" and accepted["line"] is None
    assert accepted["message"].startswith("the worker's first message could not be accepted")


def test_an_import_error_hello_is_bounded_and_clean() -> None:
    accepted = accept_hello(
        {"op": "import_error", "type": "SyntaxError", "message": "\x1b[2J" + "x" * (8 << 20), "line": "4"}
    )
    assert len(accepted["message"]) <= 4096 and "\x1b" not in accepted["message"]
    assert accepted["line"] is None and accepted["type"] == "SyntaxError"


@pytest.mark.parametrize("message", [None, [], {"op": "surprise"}, {"op": _nested(3)}])
def test_a_hello_of_no_known_kind_is_an_import_error(message: Any) -> None:
    assert accept_hello(message)["op"] == "import_error"
