"""Failures no misreading explains are listed by check, and localised by the visible case features that separate
them; a hidden case is only ever counted."""

from __future__ import annotations

import json
from types import ModuleType, SimpleNamespace

import pytest
import torch

from grader.judge.cases import Call
from grader.judge.checks import CaseOutcome
from grader.judge.compare import Mismatch, Outcome
from grader.judge.localise import CheckCases, case_features, problem_features, separating, unexplained_cases
from grader.model.report import UNEXPLAINED_LISTED, UnexplainedCases
from grader.model.spec import SpecError
from grader.model.verdicts import Verdict

PASS = Outcome(Verdict.PASS)
FAIL = Outcome(Verdict.FAIL, Mismatch("failed", "failed"))


def _call(label: str, dtype: torch.dtype = torch.float32, empty_row: bool = False, **flags: object) -> Call:
    mask = torch.ones(2, 3, dtype=torch.bool)
    if empty_row:
        mask[1] = False
    return Call("f", {"logp": torch.zeros(2, 3, dtype=dtype), "mask": mask, **flags}, label)


def _hidden(call: Call) -> Call:
    """The call as a hidden case, with values of its own that must never be quoted."""
    kwargs = {**call.kwargs, "logp": call.kwargs["logp"] - 0.8137}
    return Call(call.function, kwargs, call.label, hidden=True)


def test_generic_features_come_from_kwargs_alone() -> None:
    mask = torch.tensor([[1, 1], [0, 0]], dtype=torch.uint8)
    features = case_features({"x": torch.zeros(0, 4, dtype=torch.float64), "mask": mask, "dual_clip": None, "k": 0})
    assert "x is float64" in features and "x has a zero-size dimension" in features and "x is 2-D" in features
    assert "mask has an all-zero row" in features and "mask is all zero" not in features
    assert {"dual_clip is None", "k is 0"} <= features
    assert "mask is all zero" in case_features({"mask": torch.zeros(3, dtype=torch.bool)})
    assert case_features({"flag": True}) == {"flag is True"}


def test_a_problem_adds_named_features() -> None:
    empty = ("a response is empty", lambda kwargs: bool((kwargs["mask"].sum(-1) == 0).any()))
    assert "a response is empty" in case_features(_call("a", empty_row=True).kwargs, [empty])
    assert "a response is empty" not in case_features(_call("b").kwargs, [empty])


def test_a_problem_declares_its_features_in_its_case_module() -> None:
    module = ModuleType("cases")
    assert problem_features(SimpleNamespace(cases_module=module)) == []
    assert problem_features(SimpleNamespace()) == []  # a learner pack's problem has no case module
    empty = ("a response is empty", lambda kwargs: True)
    module.CASE_FEATURES = [empty]  # type: ignore[attr-defined]
    assert problem_features(SimpleNamespace(cases_module=module)) == [empty]
    module.CASE_FEATURES = ["a response is empty"]  # type: ignore[attr-defined]
    with pytest.raises(SpecError):
        problem_features(SimpleNamespace(cases_module=module))


def test_a_feature_is_named_only_when_it_separates_cleanly() -> None:
    f64, f32 = frozenset({"x is float64", "x is 2-D"}), frozenset({"x is float32", "x is 2-D"})
    assert separating([f64, f64], [f32]).sentences() == [
        "fails only where x is float64",
        "fails only where x is not float32",
    ]
    # one passing case shares the failing feature: it separates nothing
    assert separating([f64], [f32, f64]).features == ()
    # a failing case lacks it: nothing either
    assert separating([f64, f32], [f32]).features == ()
    # without passing cases there is nothing to separate from
    assert separating([f64], []).features == ()
    assert separating([frozenset({"x is 2-D"})], [frozenset({"x is 2-D", "dual_clip is None"})]).features == (
        "dual_clip is not None",
    )


def test_unexplained_cases_name_visible_labels_count_hidden_and_localise() -> None:
    calls = [
        _call("float32 plain"),
        _call("float32 one empty response", empty_row=True),
        _call("float64 one empty response", torch.float64, empty_row=True),
        _hidden(_call("hidden float64 secret 9123", torch.float64, empty_row=True)),
        _hidden(_call("hidden float32 secret 9124")),
    ]
    outcomes = [
        CaseOutcome(calls[0].label, False, PASS),
        CaseOutcome(calls[1].label, False, FAIL),
        CaseOutcome(calls[2].label, False, FAIL),
        CaseOutcome(calls[3].label, True, FAIL),
        CaseOutcome(calls[4].label, True, PASS),
    ]
    (entry,) = unexplained_cases([CheckCases("weights", outcomes, calls)], lambda case: False, localise=True)
    assert entry.cases == ["float32 one empty response", "float64 one empty response"]
    assert entry.hidden == 1 and entry.more == 0 and entry.total() == 3
    assert entry.features == ["fails only where mask has an all-zero row"]
    text = entry.describe()
    assert text.startswith("weights: 'float32 one empty response'") and "1 hidden" in text
    _assert_nothing_hidden(entry, calls)


def test_hidden_cases_take_no_part_in_the_separation() -> None:
    # only a hidden case is float64: were it compared, "only in float64" would separate; it must not be said
    calls = [_call("a"), _call("b", empty_row=True), _hidden(_call("secret", torch.float64))]
    outcomes = [CaseOutcome("a", False, PASS), CaseOutcome("b", False, FAIL), CaseOutcome("secret", True, FAIL)]
    (entry,) = unexplained_cases([CheckCases("c", outcomes, calls)], lambda case: False, localise=True)
    assert not any("float64" in f for f in entry.features)
    assert entry.features == ["fails only where mask has an all-zero row"]
    _assert_nothing_hidden(entry, calls)


def test_explained_cases_are_left_out_and_the_listing_is_bounded() -> None:
    many = UNEXPLAINED_LISTED + 3
    outcomes = [CaseOutcome(f"case {i}", False, FAIL, explained_by=("bessel",) if i == 0 else ()) for i in range(many)]
    (entry,) = unexplained_cases([CheckCases("c", outcomes)], lambda case: "bessel" in case.explained_by)
    assert entry.cases[0] == "case 1" and len(entry.cases) == UNEXPLAINED_LISTED and entry.more == 2
    assert entry.features == []  # no calls: a check of another kind is listed, not localised
    passing = [CaseOutcome("p", False, PASS)]
    assert unexplained_cases([CheckCases("c", passing)], lambda case: False) == []


def _assert_nothing_hidden(entry: UnexplainedCases, calls: list[Call]) -> None:
    """No hidden case's label, value or seed-like number reaches the text."""
    text = json.dumps(entry.model_dump()) + entry.describe()
    for call in calls:
        if not call.hidden:
            continue
        assert call.label not in text
        for word in call.label.split():
            if word.isdigit():
                assert word not in text
        for value in call.kwargs.values():
            if isinstance(value, torch.Tensor) and value.numel() and value.is_floating_point():
                assert f"{abs(value.reshape(-1)[0].item()):.4f}" not in text
