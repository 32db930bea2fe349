"""Validate what a worker sent back and compare it, aspect by aspect, with the expected observation."""

from __future__ import annotations

import builtins
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from .compare import MAX_ELEMENTS, Mismatch, compare_tensors, describe_kind
from .spec import Aspect, Tolerance
from .verdicts import Verdict


class Malformed(Exception):
    """The worker's answer is not plain data of the expected form (a forged or corrupted frame)."""


def _tensor(value: Any, where: str) -> torch.Tensor:
    if type(value) is not torch.Tensor:
        raise Malformed(f"{where} is not a plain tensor")
    if value.layout != torch.strided:
        raise Malformed(f"{where} is a {value.layout} tensor; return a dense (strided) tensor")
    if value.numel() > MAX_ELEMENTS:
        raise Malformed(f"{where} has {value.numel()} elements, more than {MAX_ELEMENTS}")
    return value


def _described(value: Any, where: str, depth: int = 0) -> dict[str, Any]:
    if not isinstance(value, dict) or depth > 4:
        raise Malformed(f"{where} is not a description")
    kind = value.get("kind")
    if kind == "tensor":
        _tensor(value.get("value"), where)
        for flag in ("requires_grad", "has_grad_fn"):
            if not isinstance(value.get(flag), bool):
                raise Malformed(f"{where}.{flag} is not a bool")
    elif kind == "sequence":
        items = value.get("items")
        if not isinstance(items, list) or len(items) > 64:
            raise Malformed(f"{where} has no item list")
        for i, item in enumerate(items):
            _described(item, f"{where}[{i}]", depth + 1)
    elif kind == "python":
        if not isinstance(value.get("value"), (bool, int, float, str, type(None))):
            raise Malformed(f"{where} claims a Python scalar but holds something else")
    elif kind != "other":
        raise Malformed(f"{where} has unknown kind {kind!r}")
    return value


def _exception(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict) or not isinstance(value.get("type"), str):
        raise Malformed(f"{where} is not an exception description")
    if not isinstance(value.get("bases", []), list) or not isinstance(value.get("message", ""), str):
        raise Malformed(f"{where} is not an exception description")
    if not isinstance(value.get("where", ""), str):
        raise Malformed(f"{where} is not an exception description")
    return value


def sanitize(obs: Any) -> dict[str, Any]:
    """Accept only the shapes `protocol.observe_call` produces; raise Malformed otherwise."""
    if not isinstance(obs, dict):
        raise Malformed("observation is not a dict")
    if "raised" in obs:
        _exception(obs["raised"], "raised")
    else:
        _described(obs.get("output"), "output")
    if "backward_error" in obs:
        _exception(obs["backward_error"], "backward_error")
    grads = obs.get("grads", {})
    if not isinstance(grads, dict):
        raise Malformed("grads is not a dict")
    for name, grad in grads.items():
        if grad is not None:
            _tensor(grad, f"grad of {name}")
    after = obs.get("inputs_after", {})
    if not isinstance(after, dict):
        raise Malformed("inputs_after is not a dict")
    for name, value in after.items():
        _tensor(value, f"input {name} after the call")
    return obs


@dataclass(frozen=True)
class Outcome:
    """One case's verdict and, when it did not pass, the evidence."""

    verdict: Verdict
    mismatch: Mismatch | None = None



def _safe_exception(exc: dict[str, Any]) -> str:
    """An exception named by a builtin type only: its message and a custom class name are the learner's own
    text, which a hidden case must not echo (it could carry the case's inputs)."""
    for name in [exc["type"], *exc.get("bases", [])]:
        known = getattr(builtins, str(name), None)
        if isinstance(known, type) and issubclass(known, BaseException):
            return name if name == exc["type"] else f"an exception derived from {name}"
    return "an exception"


def _kind_word(obs: dict[str, Any]) -> str:
    """The kind of an observed value in the judge's own words (type names are the learner's choice)."""
    return {"tensor": "a torch.Tensor", "python": "a Python value", "sequence": "a sequence"}.get(
        str(obs.get("kind")), "another kind of value")


def tolerance_for(dtype: torch.dtype, tolerances: Mapping[str, Tolerance]) -> Tolerance:
    name = str(dtype).removeprefix("torch.")
    return tolerances.get(name) or tolerances.get("float64") or Tolerance(rtol=0.0, atol=0.0)


def _flatten(desc: dict[str, Any], name: str) -> list[tuple[str, dict[str, Any]]]:
    if desc.get("kind") == "sequence":
        return [(f"{name}[{i}]", item) for i, item in enumerate(desc["items"])]
    return [(name, desc)]


def exception_text(exc: dict[str, Any]) -> str:
    """`Type: message (your file, line N in fn: code)`; no dangling colon when the message is empty."""
    text = f"{exc['type']}: {exc.get('message', '')}".strip().rstrip(":")
    return f"{text} (your file, {exc['where']})" if exc.get("where") else text


def _is_instance(exc: dict[str, Any], type_name: str) -> bool:
    return type_name == exc["type"] or type_name in exc.get("bases", [])


def compare_output(
    name: str, got: dict[str, Any], want: dict[str, Any], aspects: Sequence[Aspect],
    tolerances: Mapping[str, Tolerance],
) -> Mismatch | None:
    if want["kind"] != "tensor":
        if got.get("kind") != want["kind"] or got.get("value") != want.get("value"):
            return Mismatch.of(f"{name}: expected {want.get('value')!r}, got {describe_kind(got)} {got.get('value')!r}",
                         f"{name}: the result differs from the expected value")
        return None
    if got["kind"] != "tensor":
        return Mismatch.of(f"{name}: expected a torch.Tensor, got {describe_kind(got)}",
                     f"{name}: expected a torch.Tensor, got {_kind_word(got)}")
    g, w = got["value"], want["value"]
    checks: list[tuple[Aspect, bool, str]] = [
        ("shape", g.shape == w.shape, f"expected shape {tuple(w.shape)}, got {tuple(g.shape)}"),
        ("dtype", g.dtype == w.dtype, f"expected dtype {w.dtype}, got {g.dtype}"),
        ("device", got.get("device") == want.get("device"),
         f"expected device {want.get('device')}, got {got.get('device')}"),
        ("requires_grad", got["requires_grad"] == want["requires_grad"],
         "requires grad; detach it (the result must carry no autograd graph)" if got["requires_grad"]
         else "carries no autograd graph, but it must be connected to the inputs"),
        ("connected", got["has_grad_fn"] == want["has_grad_fn"] or not want["has_grad_fn"],
         "is detached from the graph (no grad_fn); return a tensor built from the inputs so backward reaches them"),
    ]
    for aspect, ok, text in checks:
        if aspect in aspects and not ok:
            # a shape, dtype or device would tell a hidden case's inputs; the hidden-safe text names the aspect
            safe = f"the {aspect} differs from the expected {aspect}" if aspect in SHOWS_INPUTS else text
            return Mismatch.of(f"{name}: {text}", f"{name}: {safe}")
    if "values" in aspects or "values_exact" in aspects:
        tol = None if "values_exact" in aspects else tolerance_for(w.dtype, tolerances)
        if g.shape != w.shape:
            return Mismatch.of(f"{name}: expected shape {tuple(w.shape)}, got {tuple(g.shape)}",
                         f"{name}: the shape differs from the expected shape")
        return compare_tensors(name, g, w, tol)
    return None


def compare_grads(
    got: dict[str, Any], want: dict[str, Any], aspects: Sequence[Aspect], tolerances: Mapping[str, Tolerance],
) -> Mismatch | None:
    if "backward_error" in want:
        raise AssertionError(f"the expected side failed backward: {want['backward_error']}")
    if "backward_error" in got:
        return Mismatch.of(f"loss.backward() raised {exception_text(got['backward_error'])}",
                     f"loss.backward() raised {_safe_exception(got['backward_error'])}")
    for name, w in want.get("grads", {}).items():
        g = got.get("grads", {}).get(name)
        if "connected" in aspects and w is not None and g is None:
            return Mismatch.of(f"{name} received no gradient (grad is None): the loss is not connected to {name}")
        if "grads" not in aspects:
            continue
        if w is None and g is None:
            continue
        reference = w if w is not None else torch.zeros_like(g)
        actual = g if g is not None else torch.zeros_like(reference)
        if w is None and bool((actual != 0).any()):
            return Mismatch.of(f"{name} received a gradient, but it must receive none (stop-gradient)")
        mismatch = compare_tensors(f"d loss / d {name}", actual, reference, tolerance_for(reference.dtype, tolerances))
        if mismatch:
            return mismatch
    return None


def compare_inputs(sent: Mapping[str, Any], got: dict[str, Any]) -> Mismatch | None:
    after = got.get("inputs_after", {})
    for name, before in sent.items():
        if type(before) is not torch.Tensor:
            continue
        now = after.get(name)
        if now is None:
            return Mismatch.of(f"input {name} was not handed back after the call")
        if now.dtype != before.dtype or now.shape != before.shape or now.stride() != before.stride():
            return Mismatch.of(
                f"input {name} changed its dtype, shape or strides during the call; do not modify inputs")
        mismatch = compare_tensors(f"input {name} after the call", now, before, None)
        if mismatch:
            return Mismatch.of(f"{mismatch.message}; the function modified its input in place (copy before editing)",
                         f"{mismatch.learner_message}; the function modified its input in place (copy before editing)")
    return None


def judge_case(
    function: str, sent: Mapping[str, Any], got: dict[str, Any], want: dict[str, Any],
    aspects: Sequence[Aspect], tolerances: Mapping[str, Tolerance],
) -> Outcome:
    """Compare one learner observation with the expected one on the aspects a check names."""
    if "raised" in want:
        if "raises" not in aspects:
            raise AssertionError(f"expected side raised {exception_text(want['raised'])} on a case that must not raise")
        expected_type = want["raised"]["type"]
        if "raised" not in got:
            return Outcome(Verdict.FAIL, Mismatch.of(
                f"{function} returned normally; expected it to raise {expected_type}",
                f"{function} returned normally, but this case must raise an exception"))
        if not _is_instance(got["raised"], expected_type):
            return Outcome(Verdict.FAIL, Mismatch.of(
                f"{function} raised {exception_text(got['raised'])}; expected {expected_type}",
                f"{function} raised {_safe_exception(got['raised'])}, not the exception this case expects"))
        return Outcome(Verdict.PASS)
    if "raised" in got:
        return Outcome(Verdict.ERROR, Mismatch.of(f"{function} raised {exception_text(got['raised'])}",
                                            f"{function} raised {_safe_exception(got['raised'])} (message withheld)"))
    if OUTPUT_ASPECTS & set(aspects):
        mismatch = _compare_outputs(function, got, want, aspects, tolerances)
        if mismatch:
            return Outcome(Verdict.FAIL, mismatch)
    if {"backward", "connected", "grads"} & set(aspects):
        mismatch = compare_grads(got, want, aspects, tolerances)
        if mismatch:
            return Outcome(Verdict.FAIL, mismatch)
    if "inputs_unchanged" in aspects:
        mismatch = compare_inputs(sent, got)
        if mismatch:
            return Outcome(Verdict.FAIL, mismatch)
    return Outcome(Verdict.PASS)


SHOWS_INPUTS = {"shape", "dtype", "device"}
OUTPUT_ASPECTS = {"type", "shape", "dtype", "device", "values", "values_exact", "requires_grad", "connected"}


def _compare_outputs(function: str, got: dict[str, Any], want: dict[str, Any], aspects: Sequence[Aspect],
                     tolerances: Mapping[str, Tolerance]) -> Mismatch | None:
    for (name, g), (_, w) in zip(_flatten(got["output"], function), _flatten(want["output"], function), strict=False):
        mismatch = compare_output(name, g, w, aspects, tolerances)
        if mismatch:
            return mismatch
    if len(_flatten(got["output"], function)) != len(_flatten(want["output"], function)):
        return Mismatch.of(f"{function}: expected {describe_kind(want['output'])}, got {describe_kind(got['output'])}",
                     f"{function}: the result holds a different number of items than expected")
    return None



def same_as(function: str, sent: Mapping[str, Any], got: dict[str, Any], other: dict[str, Any],
            aspects: Sequence[Aspect], tolerances: Mapping[str, Tolerance]) -> bool:
    """Whether the learner's observation matches `other` (a misconception's) on every aspect a check compares.

    Unlike `judge_case`, both sides may raise or modify their inputs: a misreading can do either, and then
    matching it means doing the same.
    """
    if "raised" in got or "raised" in other:
        return "raised" in got and "raised" in other and _is_instance(got["raised"], other["raised"]["type"])
    if ("backward_error" in got or "backward_error" in other) and {"backward", "grads", "connected"} & set(aspects):
        return "backward_error" in got and "backward_error" in other
    compared = [a for a in aspects if a not in ("inputs_unchanged", "raises")]
    if compared and judge_case(function, sent, got, other, compared, tolerances).verdict != Verdict.PASS:
        return False
    if "inputs_unchanged" in aspects:
        mine, theirs = got.get("inputs_after", {}), other.get("inputs_after", {})
        for name, value in theirs.items():
            if name not in mine or compare_tensors(name, mine[name], value, None) is not None:
                return False
    return True
