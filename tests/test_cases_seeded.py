"""Replay earns nothing: every problem's cases change with the seed, call by call, and a submission that answers
with the learner pack's expected observations (public seed) scores no more than zeros under the grading seed."""

from __future__ import annotations

import base64
import functools
import io
import math
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from conftest import expectations_of, problem_named
from test_problems import (
    SANDBOXED_EXTRAS,
    Proof,
    proofs,  # noqa: F401 - a fixture: each problem graded once for the whole run
)

from grader.course.learner_pack import public_cases
from grader.judge.cases import Call, generator_for
from grader.judge.compare import judge_case
from grader.judge.expectations import LOWER
from grader.model.problem import Problem, list_problems
from grader.model.report import Report
from grader.model.verdicts import Verdict
from grader.worker.protocol import observe_call

PROBLEMS = list_problems()
GRADED_TIERS = ("T1", "T2", "T3")


def _generators(problem: Problem) -> list[str]:
    return sorted({check.cases for check in problem.spec.checks if check.cases})


def _fingerprint(value: Any) -> Any:
    """What a call's argument is, as far as its answer goes: a tensor's dtype, shape and values (NaN equal to
    NaN, strides ignored: a strided view of the same values asks the same question), any other value itself."""
    if isinstance(value, torch.Tensor):
        flat = value.detach().reshape(-1)
        if flat.is_floating_point():
            flat = torch.where(flat.isnan(), torch.full_like(flat, math.nan), flat)
        data = flat.contiguous().view(torch.uint8).numpy().tobytes() if flat.numel() else b""
        return ("tensor", str(value.dtype), tuple(value.shape), data)
    if isinstance(value, float) and math.isnan(value):
        return ("nan",)
    return (type(value).__name__, repr(value))


def _inputs(call: Call) -> tuple[Any, ...]:
    return (call.function, tuple(sorted((name, _fingerprint(v)) for name, v in call.kwargs.items())))


def _drawn(call: Call) -> bool:
    """Whether the call holds a tensor with something in it to draw (an empty tensor holds nothing)."""
    return any(isinstance(v, torch.Tensor) and v.numel() > 0 for v in call.kwargs.values())


def _tensors_differ(a: Call, b: Call) -> bool:
    if a.function != b.function or set(a.kwargs) != set(b.kwargs):
        return True
    return any(
        _fingerprint(a.kwargs[name]) != _fingerprint(b.kwargs[name])
        for name in a.kwargs
        if isinstance(a.kwargs[name], torch.Tensor) or isinstance(b.kwargs[name], torch.Tensor)
    )


@functools.cache
def _both_seeds(problem_id: str, name: str) -> tuple[list[Call], list[Call]]:
    """Generator `name`'s calls under the public seed and the first grading seed, drawn once for every test here."""
    problem = problem_named(problem_id)
    generator = problem.case_generator(name)
    return (
        generator(generator_for(problem.spec.public_seed, name)),
        generator(generator_for(problem.grading_seeds[0], name)),
    )


def _every_generator() -> Iterator[tuple[str, str]]:
    for problem_id in PROBLEMS:
        for name in _generators(problem_named(problem_id)):
            yield problem_id, name


GENERATORS = list(_every_generator())


@pytest.mark.parametrize(("problem_id", "name"), GENERATORS)
def test_every_call_changes_some_tensor_with_the_seed(problem_id: str, name: str) -> None:
    """Call i of the public seed and call i of the grading seed differ in some tensor input. A call whose tensors
    are all empty has nothing to draw: it must count in a group with a call that does."""
    public, graded = _both_seeds(problem_id, name)
    assert public and graded
    same = [
        f"call {i}: {b.label}"
        for i, (a, b) in enumerate(zip(public, graded, strict=False))
        if _drawn(b) and not _tensors_differ(a, b)
    ]
    assert not same, "inputs identical under both seeds:\n" + "\n".join(same)
    for calls in (public, graded):
        for call in (c for c in calls if not _drawn(c)):
            partners = [c for c in calls if c.group is not None and c.group == call.group and _drawn(c)]
            assert partners, f"{call.label}: nothing drawn, and no drawn call in its group"


@pytest.mark.parametrize(("problem_id", "name"), GENERATORS)
def test_no_graded_call_repeats_a_public_one(problem_id: str, name: str) -> None:
    """Matched by inputs, not by position: no call of the grading seed asks what a public call asked."""
    public, graded = _both_seeds(problem_id, name)
    shown = {_inputs(call) for call in public if _drawn(call)}
    repeated = [call.label for call in graded if _drawn(call) and _inputs(call) in shown]
    assert not repeated, repeated


@pytest.mark.parametrize("problem_id", PROBLEMS)
def test_which_calls_must_raise_changes_with_the_seed(problem_id: str) -> None:
    """Where a check holds calls that must raise and calls that must not, their order is drawn from the seed,
    so knowing the public seed's pattern says nothing about a graded call's position."""
    problem = problem_named(problem_id)
    for check in problem.spec.checks:
        if not check.cases or "raises" not in check.compare:
            continue
        patterns = []
        for calls in _both_seeds(problem_id, check.cases):
            functions = problem.oracle if check.expected == "oracle" else problem.reference
            patterns.append(
                [
                    "raised" in observe_call(functions[c.function], c.kwargs, list(c.requires_grad), c.backward)
                    for c in calls
                ]
            )
        public, graded = patterns
        if not any(public) and not any(graded):
            continue  # valid edge calls only: `raises` there proves they answer, and there is no pattern to hide
        assert any(public) and not all(public), f"{check.id}: must hold calls that raise and calls that do not"
        assert public != graded, f"{check.id}: the calls that must raise sit at the same positions under both seeds"


# ---------------------------------------------------------------------------------------------- replaying the pack

REPLAY_SOURCE = '''"""Answers every call with the learner pack's expected observation of the nearest public call."""

import base64
import io

import torch

PACK = torch.load(io.BytesIO(base64.b64decode(DATA)), weights_only=True)
SEEN = {}


def _distance(sent, shown):
    """How far a call's inputs are from a public call's; None when they cannot be compared."""
    if set(sent) != set(shown):
        return None
    total = 0.0
    for name, value in sent.items():
        other = shown[name]
        if isinstance(value, torch.Tensor) != isinstance(other, torch.Tensor):
            return None
        if not isinstance(value, torch.Tensor):
            total += 0.0 if value == other or value != value and other != other else 1e6
        elif value.shape != other.shape or value.dtype != other.dtype:
            return None
        elif value.numel():
            a = torch.nan_to_num(value.detach().double(), nan=7e7, posinf=8e7, neginf=-8e7)
            b = torch.nan_to_num(other.double(), nan=7e7, posinf=8e7, neginf=-8e7)
            total += float((a - b).abs().sum())
    return total


def _connected(value, grads, sent):
    """The pack's loss, connected to the inputs so that backward gives the pack's gradients."""
    for name, grad in (grads or {}).items():
        x = sent.get(name)
        if grad is None or not isinstance(x, torch.Tensor) or not x.requires_grad or x.shape != grad.shape:
            continue
        safe = torch.where(torch.isfinite(x.detach()), x, torch.zeros((), dtype=x.dtype))
        term = (safe * grad.to(x.dtype)).sum()
        value = value + (term - term.detach()).to(value.dtype)
    return value


def _value(desc, grads, sent, first):
    if desc["kind"] == "tensor":
        value = desc["value"].clone()
        if first and value.dim() == 0 and value.is_floating_point():
            return _connected(value, grads, sent)
        return value
    if desc["kind"] == "sequence":
        items = [_value(item, grads, sent, first and i == 0) for i, item in enumerate(desc["items"])]
        return tuple(items) if desc.get("type") == "tuple" else items
    return desc.get("value")


def _answer(function, sent):
    entries = PACK.get(function) or []
    if not entries:
        raise ValueError("no public call of this function")
    position = SEEN.get(function, 0)
    SEEN[function] = position + 1
    scored = [(d, i) for i, e in enumerate(entries) if (d := _distance(sent, e["kwargs"])) is not None]
    chosen = entries[min(scored)[1]] if scored else entries[position % len(entries)]
    expected = chosen["expected"]
    if "raised" in expected:
        raise ValueError("the public call raised")
    return _value(expected["output"], expected.get("grads"), sent, True)


def __getattr__(function):
    if function.startswith("__"):
        raise AttributeError(function)

    def answer(**sent):
        return _answer(function, sent)

    answer.__name__ = function
    return answer
'''

ZEROS_SOURCE = '''"""Zeros of the promised shape and dtype, detached: the baseline a cheat must not beat."""

import torch

RECIPES = {recipes!r}


def _zeros(recipe, sent):
    if recipe[0] == "sequence":
        return tuple(_zeros(item, sent) for item in recipe[1])
    _, shape_from, shape, dtype_from, dtype = recipe
    size = sent[shape_from].shape if shape_from else shape
    kind = sent[dtype_from].dtype if dtype_from else getattr(torch, dtype)
    return torch.zeros(size, dtype=kind)


def __getattr__(function):
    if function.startswith("__") or function not in RECIPES:
        raise AttributeError(function)

    def answer(**sent):
        return _zeros(RECIPES[function], sent)

    answer.__name__ = function
    return answer
'''


def _recipe(desc: dict[str, Any], sent: dict[str, Any]) -> tuple[Any, ...]:
    """How to build zeros like an expected output from a call's inputs: the input whose shape (and the one whose
    dtype) it has, or the fixed shape and dtype when no input has them."""
    if desc["kind"] == "sequence":
        return ("sequence", tuple(_recipe(item, sent) for item in desc["items"]))
    value = desc["value"]
    tensors = {name: v for name, v in sent.items() if isinstance(v, torch.Tensor)}
    shape_from = next((n for n, v in tensors.items() if v.shape == value.shape and value.dim() > 0), None)
    dtype_from = next((n for n, v in tensors.items() if v.dtype == value.dtype), None)
    return ("tensor", shape_from, tuple(value.shape), dtype_from, str(value.dtype).removeprefix("torch."))


def zeros_source(problem: Problem, seed: int) -> str:
    """A zeros submission for `problem`, its output shapes learned from the reference's answers to valid calls."""
    expectations = expectations_of(problem.id, seed)  # shared with the proofs
    recipes: dict[str, tuple[Any, ...]] = {}
    for check in problem.spec.checks:
        if not check.cases:
            continue
        for index, call in enumerate(expectations.cases(check.cases)):
            if call.function in recipes or not _drawn(call):
                continue
            want = expectations.observation("reference", check.cases, index)
            if "output" in want and want["output"]["kind"] in ("tensor", "sequence"):
                recipes[call.function] = _recipe(want["output"], dict(call.kwargs))
    assert {f.name for f in problem.spec.functions} <= set(recipes), "a function never returned a tensor"
    return ZEROS_SOURCE.format(recipes=recipes)


@functools.cache
def pack_answers(problem: Problem) -> dict[str, list[dict[str, Any]]]:
    """The learner pack's public calls and the expected observation of each, by function (made once per problem)."""
    data = public_cases(problem)
    by_function: dict[str, list[dict[str, Any]]] = {}
    for key, observations in data["observations"].items():
        if key.startswith(LOWER):
            continue  # the same calls computed in float32: the width of their tolerance, not other answers
        for call, expected in zip(data["cases"][key.split("/", 1)[1]], observations, strict=True):
            by_function.setdefault(call["function"], []).append({"kwargs": call["kwargs"], "expected": expected})
    return by_function


def _shared(value: Any, seen: dict[tuple[Any, ...], torch.Tensor]) -> Any:
    """A copy in which tensors of equal dtype, shape and bytes are one tensor owning its storage, so the saved data
    has one size whichever cache or order built it (torch.save keeps what storages share, views' whole bases too)."""
    if isinstance(value, torch.Tensor):
        compact = value.detach().clone()
        key = (compact.dtype, tuple(compact.shape), compact.reshape(-1).view(torch.uint8).numpy().tobytes())
        return seen.setdefault(key, compact)
    if isinstance(value, dict):
        return {key: _shared(item, seen) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_shared(item, seen) for item in value)
    return value


def replay_source(problem: Problem) -> str:
    """A submission that holds the learner pack's public calls and expected observations, and replays them."""
    buffer = io.BytesIO()
    torch.save(_shared(pack_answers(problem), {}), buffer)
    return f"DATA = {base64.b64encode(buffer.getvalue()).decode()!r}\n" + REPLAY_SOURCE


def _shapes(observation: dict[str, Any]) -> Any:
    """The form of an observation: raised, or the shape and dtype of every output tensor."""

    def form(desc: dict[str, Any]) -> Any:
        if desc["kind"] == "tensor":
            return (tuple(desc["value"].shape), desc["value"].dtype)
        return tuple(form(item) for item in desc.get("items", [])) or desc["kind"]

    return "raised" if "raised" in observation else form(observation["output"])


@pytest.mark.parametrize("problem_id", PROBLEMS)
def test_no_graded_group_can_be_answered_from_the_pack(problem_id: str) -> None:
    """Whatever call a replay picks, no group of a T1-T3 check under the grading seed passes with answers copied
    from the learner pack: each holds a call that no public observation answers."""
    problem = problem_named(problem_id)
    shown = {function: [entry["expected"] for entry in entries] for function, entries in pack_answers(problem).items()}
    expectations = expectations_of(problem_id, problem.grading_seeds[0])  # shared with the proofs
    tolerances = problem.tolerances
    copied = []
    for check in problem.spec.checks:
        if check.kind != "differential" or check.tier not in GRADED_TIERS or not check.cases:
            continue
        groups: dict[object, list[tuple[bool, str]]] = {}
        for index, call in enumerate(expectations.cases(check.cases)):
            want = expectations.observation(check.expected, check.cases, index)
            unchanged = {name: v for name, v in call.kwargs.items() if isinstance(v, torch.Tensor)}
            answered = any(
                judge_case(
                    call.function, call.kwargs, {**old, "inputs_after": unchanged}, want, check.compare, tolerances
                ).verdict
                == Verdict.PASS
                for old in shown.get(call.function, [])
                if _shapes(old) == _shapes(want)
            )
            groups.setdefault(index if call.group is None else call.group, []).append((answered, call.label))
        copied += [f"{check.id}: {group[0][1]}" for group in groups.values() if all(a for a, _ in group)]
    assert not copied, "groups whose every answer a public observation gives:\n" + "\n".join(copied)


def graded_score(report: Report) -> float:
    return sum(tier.score for tier in report.tiers if tier.tier in GRADED_TIERS)


SANDBOXED_EXTRAS["replay"] = lambda proof: replay_source(proof.problem)
SANDBOXED_EXTRAS["zeros"] = lambda proof: zeros_source(proof.problem, proof.first_seed)


@pytest.mark.slow
@pytest.mark.parametrize("problem_id", PROBLEMS)
def test_replaying_the_learner_pack_earns_no_more_than_zeros(problem_id: str, proofs) -> None:  # noqa: F811
    """Graded in the problem's one sandboxed batch, as `grade-all` grades (one zygote, one set of expectations)."""
    proof: Proof = proofs(problem_id)
    reports = dict(
        zip(("replay", "zeros"), proof.sandboxed([proof.extra("replay"), proof.extra("zeros")]), strict=True)
    )
    assert all(r.status == "graded" for r in reports.values()), {n: r.message for n, r in reports.items()}
    earned = {c.id: c.score for t in reports["replay"].tiers if t.tier in GRADED_TIERS for c in t.checks if c.score > 0}
    assert graded_score(reports["replay"]) <= graded_score(reports["zeros"]), f"the replay earns in {earned}"
