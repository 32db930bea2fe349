"""Comparison: whether an accepted observation matches the expected one, aspect by aspect, and the evidence
that says why not (one case is judged here from start to end: `judge_case`, or `same_as` for a misreading)."""

from __future__ import annotations

import builtins
import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from grader.model.spec import Aspect, Tolerance
from grader.model.verdicts import Verdict

MAX_ELEMENTS = 1 << 24  # a returned tensor larger than this is refused before any arithmetic
InputContext = Callable[[tuple[int, ...], tuple[int, ...]], str]  # failing index, result shape -> the inputs there


@dataclass(frozen=True)
class Mismatch:
    """Evidence of a failed comparison: a sentence a learner can act on, and the hidden-safe version.

    `learner_message` is what a learner sees when the case is hidden: it names the result and the aspect
    that differs, never an input, an expected value or text the learner's code chose.
    """

    message: str
    learner_message: str

    @classmethod
    def of(cls, message: str, learner: str | None = None) -> Mismatch:
        """Evidence; `learner` is the hidden-safe sentence, needed whenever `message` shows data of the case."""
        return cls(message, message if learner is None else learner)


def _coords(flat: int, shape: torch.Size) -> tuple[int, ...]:
    coords = []
    for size in reversed(shape):
        coords.append(flat % size)
        flat //= size
    return tuple(reversed(coords))


def _index(flat: int, shape: torch.Size) -> str:
    return "[" + ", ".join(str(c) for c in _coords(flat, shape)) + "]" if shape else ""


def _fmt(x: float) -> str:
    return f"{x:.10g}"


# what a comparison asked for no evidence returns: only whether the values agree is wanted, not where or how
DIFFERS = Mismatch.of("values differ")


# How far beyond the reference's own float32 error an answer may stray, as a multiple of that error: float32
# arithmetic in another order of operations rounds differently from the reference's float32 run, by an amount of
# the same order (each ordering's error is a sum of the same rounding steps, differently signed); four times it
# leaves room for that, while a misreading moves a result by far more than its rounding does.
CONDITIONING = 4.0


def _agreement(
    got: torch.Tensor, want: torch.Tensor, tol: Tolerance | None, lower: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Both sides in a common dtype and where they agree, elementwise; the shapes are equal.

    `lower` is the expected value computed in float32 from the same inputs rounded to float32 (see
    `Expectations.lower_observation`): an answer agrees within `tol` of either, or within `CONDITIONING` times
    their distance from the expected value, which is large exactly where the case is ill-conditioned."""
    g = got.detach().to(torch.float64) if got.is_floating_point() or want.is_floating_point() else got.detach()
    w = want.detach().to(g.dtype)
    both_nan = torch.isnan(g) & torch.isnan(w) if g.is_floating_point() else torch.zeros_like(g, dtype=torch.bool)
    if tol is None:
        same = (g == w) | both_nan
        if g.is_floating_point():  # bitwise: 0.0 and -0.0 count as equal, as torch.equal does
            same &= ~(torch.isnan(g) ^ torch.isnan(w))
    else:
        finite_close = torch.isclose(g, w, rtol=tol.rtol, atol=tol.atol, equal_nan=True)
        same = finite_close | both_nan
        # what agrees already needs no wider bound
        if lower is not None and lower.shape == w.shape and g.is_floating_point() and not bool(same.all()):
            low = lower.detach().to(g.dtype)
            same |= torch.isclose(g, low, rtol=tol.rtol, atol=tol.atol, equal_nan=True)
            spread = torch.nan_to_num((low - w).abs(), nan=0.0, posinf=0.0)
            same |= (g - w).abs() <= CONDITIONING * spread
    return g, w, same


def compare_tensors(
    name: str,
    got: torch.Tensor,
    want: torch.Tensor,
    tol: Tolerance | None,
    context: InputContext | None = None,
    evidence: bool = True,
    lower: torch.Tensor | None = None,
) -> Mismatch | None:
    """Elementwise comparison, NaN matching NaN and inf matching inf of the same sign; tol None means bitwise;
    `lower`, the expected value computed in float32, widens the tolerance as `_agreement` says.

    Without `evidence`, a mismatch is DIFFERS: the diagnosis compares each failing case with every misreading's
    result and needs only the answer, which costs a fraction of finding and describing the first difference."""
    if got.shape != want.shape:
        text = f"{name}: expected shape {tuple(want.shape)}, got {tuple(got.shape)}"
        return Mismatch(text, f"{name}: the shape differs from the expected shape")
    if got.numel() > MAX_ELEMENTS:
        text = f"{name}: {got.numel()} elements is too large to compare"
        return Mismatch(text, f"{name}: too many elements to compare")
    g, w, same = _agreement(got, want, tol, lower)
    if bool(same.all()):
        return None
    if not evidence:
        return DIFFERS
    bad = int((~same).reshape(-1).nonzero()[0])
    expected, actual = float(w.reshape(-1)[bad]), float(g.reshape(-1)[bad])
    where = f"{name}{_index(bad, got.shape)}"
    err = abs(actual - expected)
    count = int((~same).sum())
    detail = f"expected {_fmt(expected)}, got {_fmt(actual)}"
    if err == err and err != float("inf"):
        detail += f" (abs err {err:.3g}{f', rel err {err / abs(expected):.3g}' if expected else ''})"
    bound = "bitwise" if tol is None else f"rtol {tol.rtol:g}, atol {tol.atol:g}"
    if lower is not None and tol is not None:
        bound += f", or {CONDITIONING:g} times the expected value's own float32 error"
    around = context(_coords(bad, got.shape), tuple(got.shape)) if context is not None else ""
    text = f"{where}: {detail}; {count} of {got.numel()} elements differ ({bound}){around}"
    # element counts would reveal a hidden case's shape and the tolerance its dtype: the hidden-safe sentence
    # says only whether the comparison was bitwise
    return Mismatch(text, f"{name}: values differ from the expected ones{' (bitwise)' if tol is None else ''}")


def compare_series(name: str, got: torch.Tensor, want: torch.Tensor, tol: Tolerance | None) -> Mismatch | None:
    """A toy series against the reference's for the same seed, with `compare_tensors`'s evidence for instructors.

    At a grading seed the reference's series is the answer itself: a learner who read its values could send them
    back. The learner's sentence therefore says which point is the first outside the tolerance and on which side
    of the reference's band the learner's value lies, how many points differ (the length of a series is the
    toy's, which is public) and the tolerance, and never a value of the reference, its error or its sign."""
    mismatch = compare_tensors(name, got, want, tol)
    if mismatch is None or mismatch is DIFFERS:
        return mismatch
    if got.shape != want.shape or got.numel() > MAX_ELEMENTS:
        return Mismatch(
            mismatch.message, f"{name}: your series has {got.numel()} points, the reference's another number"
        )
    g, w, same = _agreement(got, want, tol)
    bad = int((~same).reshape(-1).nonzero()[0])
    mine, theirs = g.reshape(-1)[bad], w.reshape(-1)[bad]
    if bool(torch.isnan(mine)) or bool(torch.isinf(mine)):
        side = f"your value is {float(mine)}"  # the learner's own value; the reference's stays unsaid
    elif not bool(torch.isfinite(theirs)):
        side = "differs from the reference's value"  # a side would tell which infinity, or that it is NaN
    else:
        band = "value" if tol is None else "band"  # the band: the reference's value widened by the tolerance
        side = f"{'above' if bool(mine > theirs) else 'below'} the reference's {band}"
    bound = "bitwise" if tol is None else f"rtol {tol.rtol:g}, atol {tol.atol:g}"
    count = int((~same).sum())
    return Mismatch(
        mismatch.message, f"{name}{_index(bad, got.shape)}: {side}; {count} of {got.numel()} points differ ({bound})"
    )


def describe_kind(obs: dict[str, Any]) -> str:
    kind = obs.get("kind")
    if kind == "tensor":
        return "a torch.Tensor"
    if kind == "python":
        return f"a Python {obs.get('type')}"
    if kind == "sequence":
        return f"a {obs.get('type')} of {len(obs.get('items', []))} items"
    return f"a {obs.get('type', 'value of unknown type')}"


def input_context(sent: Mapping[str, Any], mask: str | None = None, group_size: str | None = None) -> InputContext:
    """What the inputs hold at a failing element, for a visible case's message: the same element of every input
    of the result's shape, the element's whole group when the function takes a group size, the entry of every 1-D
    input that runs along exactly one of the result's dimensions, and whether the element is padding."""

    def describe(index: tuple[int, ...], shape: tuple[int, ...]) -> str:
        shown = []
        group = sent.get(group_size) if group_size else None
        for name, value in sent.items():
            if type(value) is not torch.Tensor or value.dim() == 0:
                continue
            if (
                value.dim() == 1
                and isinstance(group, int)
                and not isinstance(group, bool)
                and group > 0
                and len(index) == 1
                and value.shape[0] == shape[0]
            ):
                start = index[0] // group * group
                shown.append(f"{name}[{start}:{start + group}] = {_values(value[start : start + group])}")
            elif tuple(value.shape) == shape:
                shown.append(f"{name}{list(index)} = {_values(value[index])}")
            elif value.dim() == 1:
                along = [d for d, size in enumerate(shape) if size == value.shape[0]]
                if len(along) == 1:
                    shown.append(f"{name}[{index[along[0]]}] = {_values(value[index[along[0]]])}")
        text = f"; the inputs there: {', '.join(shown)}" if shown else ""
        held = sent.get(mask) if mask else None
        if type(held) is torch.Tensor and tuple(held.shape) == shape and not bool(held[index]):
            text += "; this element is padding (its mask is 0)"
        return text[:600]

    return describe


def _values(value: torch.Tensor) -> str:
    if value.dim() == 0:
        return f"{value.item():.6g}" if value.is_floating_point() else str(value.item())
    return "[" + ", ".join(_values(v) for v in value[:16]) + (", ..." if value.numel() > 16 else "") + "]"


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
        str(obs.get("kind")), "another kind of value"
    )


def _lower_value(want: torch.Tensor, lower: dict[str, Any] | None) -> torch.Tensor | None:
    """The float32-computed counterpart of a float64 expected tensor, when there is one of the same shape."""
    if lower is None or want.dtype != torch.float64 or lower.get("kind") != "tensor":
        return None
    value = lower.get("value")
    return value if isinstance(value, torch.Tensor) and value.shape == want.shape else None


def tolerance_for(dtype: torch.dtype, tolerances: Mapping[str, Tolerance], lowered: bool = False) -> Tolerance:
    """The tolerance of a result of `dtype`; a `lowered` float64 result (compared beside its float32-computed
    counterpart) takes float32's."""
    name = "float32" if lowered and dtype == torch.float64 else str(dtype).removeprefix("torch.")
    return tolerances.get(name) or tolerances.get("float64") or Tolerance(rtol=0.0, atol=0.0)


def flatten_output(desc: dict[str, Any], name: str) -> list[tuple[str, dict[str, Any]]]:
    if desc.get("kind") == "sequence":
        return [(f"{name}[{i}]", item) for i, item in enumerate(desc["items"])]
    return [(name, desc)]


def exception_text(exc: dict[str, Any]) -> str:
    """`Type: message (your file, line N in fn: code)`; no dangling colon when the message is empty."""
    text = f"{exc['type']}: {exc.get('message', '')}".strip().rstrip(":")
    return f"{text} (your file, {exc['where']})" if exc.get("where") else text


def _is_instance(exc: dict[str, Any], type_name: str) -> bool:
    return type_name == exc["type"] or type_name in exc.get("bases", [])


def _number_as_tensor(got: dict[str, Any], want: dict[str, Any]) -> dict[str, Any]:
    """A Python int or float where a 0-dim tensor is expected, as that tensor: a check that leaves the type to
    another check (one that does not compare "type") judges the value, so a number returned for a tensor is charged
    once, where the type is compared. Anything else is returned as it is."""
    value, expected = got.get("value"), want["value"]
    if got.get("kind") != "python" or isinstance(value, bool) or not isinstance(value, (int, float)):
        return got
    if expected.dim() != 0 or not expected.is_floating_point():
        return got
    tensor = torch.tensor(float(value), dtype=expected.dtype)
    return {"kind": "tensor", "value": tensor, "requires_grad": False, "has_grad_fn": False, "device": want["device"]}


def compare_output(
    name: str,
    got: dict[str, Any],
    want: dict[str, Any],
    aspects: Sequence[Aspect],
    tolerances: Mapping[str, Tolerance],
    context: InputContext | None = None,
    evidence: bool = True,
    lower: dict[str, Any] | None = None,
) -> Mismatch | None:
    """One result against the expected one; `lower` is the expected result computed in float32, which sets a
    float64 result's tolerance to float32's (see `_agreement`)."""
    if want["kind"] != "tensor":
        if got.get("kind") != want["kind"] or got.get("value") != want.get("value"):
            return Mismatch.of(
                f"{name}: expected {want.get('value')!r}, got {describe_kind(got)} {got.get('value')!r}",
                f"{name}: the result differs from the expected value",
            )
        return None
    if got["kind"] != "tensor" and "type" not in aspects:
        got = _number_as_tensor(got, want)
    if got["kind"] != "tensor":
        return Mismatch.of(
            f"{name}: expected a torch.Tensor, got {describe_kind(got)}",
            f"{name}: expected a torch.Tensor, got {_kind_word(got)}",
        )
    g, w = got["value"], want["value"]
    checks: list[tuple[Aspect, bool, str]] = [
        ("shape", g.shape == w.shape, f"expected shape {tuple(w.shape)}, got {tuple(g.shape)}"),
        ("dtype", g.dtype == w.dtype, f"expected dtype {w.dtype}, got {g.dtype}"),
        (
            "device",
            got.get("device") == want.get("device"),
            f"expected device {want.get('device')}, got {got.get('device')}",
        ),
        (
            "requires_grad",
            got["requires_grad"] == want["requires_grad"],
            "requires grad; detach it (the result must carry no autograd graph)"
            if got["requires_grad"]
            else "carries no autograd graph, but it must be connected to the inputs",
        ),
        (
            "connected",
            got["has_grad_fn"] == want["has_grad_fn"] or not want["has_grad_fn"],
            "is detached from the graph (no grad_fn); return a tensor built from the inputs so backward reaches them",
        ),
        (
            # where NaN and inf sit, not what the finite values are: a check whose clause is about what reaches
            # the result (padding, an empty response) leaves its values to the clause of the formula
            "finite",
            g.shape != w.shape or torch.equal(torch.isfinite(g), torch.isfinite(w)),
            "holds NaN or inf where the expected result is finite, or the reverse",
        ),
    ]
    for aspect, ok, text in checks:
        if aspect in aspects and not ok:
            # a shape, dtype or device would tell a hidden case's inputs; the hidden-safe text names the aspect
            safe = f"the {aspect} differs from the expected {aspect}" if aspect in SHOWS_INPUTS else text
            return Mismatch.of(f"{name}: {text}", f"{name}: {safe}")
    if "values" in aspects or "values_exact" in aspects:
        low = _lower_value(w, lower)
        tol = None if "values_exact" in aspects else tolerance_for(w.dtype, tolerances, low is not None)
        if g.shape != w.shape:
            return Mismatch.of(
                f"{name}: expected shape {tuple(w.shape)}, got {tuple(g.shape)}",
                f"{name}: the shape differs from the expected shape",
            )
        return compare_tensors(name, g, w, tol, context, evidence, low if tol is not None else None)
    return None


def compare_grads(
    got: dict[str, Any],
    want: dict[str, Any],
    aspects: Sequence[Aspect],
    tolerances: Mapping[str, Tolerance],
    evidence: bool = True,
    lower: dict[str, Any] | None = None,
) -> Mismatch | None:
    """The gradients against the expected ones; `lower` as in `compare_output`."""
    if "backward_error" in want:
        raise AssertionError(f"the expected side failed backward: {want['backward_error']}")
    if "backward_error" in got:
        return Mismatch.of(
            f"loss.backward() raised {exception_text(got['backward_error'])}",
            f"loss.backward() raised {_safe_exception(got['backward_error'])}",
        )
    for name, w in want.get("grads", {}).items():
        g = got.get("grads", {}).get(name)
        if "connected" in aspects and w is not None and g is None:
            return Mismatch.of(f"{name} received no gradient (grad is None): the loss is not connected to {name}")
        if "grad_flow" in aspects:
            mismatch = _grad_flow(name, g, w)
            if mismatch:
                return mismatch
        if "grads" not in aspects:
            continue
        if w is None and g is None:
            continue
        reference = w if w is not None else torch.zeros_like(g)
        actual = g if g is not None else torch.zeros_like(reference)
        if w is None and bool((actual != 0).any()):
            return Mismatch.of(f"{name} received a gradient, but it must receive none (stop-gradient)")
        low = _lower_value(reference, _lower_grad(lower, name))
        tol = tolerance_for(reference.dtype, tolerances, low is not None)
        mismatch = compare_tensors(f"d loss / d {name}", actual, reference, tol, evidence=evidence, lower=low)
        if mismatch:
            return mismatch
    return None


def _grad_flow(name: str, got: torch.Tensor | None, want: torch.Tensor | None) -> Mismatch | None:
    """Which inputs a gradient reaches, whatever its values: an input the expected side gives none (or only
    zeros) must receive none, and one it gives a nonzero gradient must receive one that is not zero throughout."""
    if got is not None and want is not None and got.shape != want.shape:
        # autograd gives an input a gradient of its own shape: this one was answered for another call
        return Mismatch.of(
            f"{name}: gradient of shape {tuple(got.shape)} for an input of shape {tuple(want.shape)}",
            f"{name}: the gradient's shape differs from the input's",
        )
    stopped = want is None or not bool((want != 0).any())
    reached = got is not None and bool((got != 0).any())
    if stopped and reached:
        return Mismatch.of(f"{name} received a gradient, but it must receive none (stop-gradient)")
    if not stopped and got is None:
        return Mismatch.of(f"{name} received no gradient (grad is None): the loss is not connected to {name}")
    if not stopped and not reached:
        return Mismatch.of(
            f"{name} received a gradient of zeros only, where the statement's function gives it one: a term of the "
            "gradient cancels the one that must reach it (a factor the statement holds constant carries gradient)"
        )
    return None


def _lower_grad(lower: dict[str, Any] | None, name: str) -> dict[str, Any] | None:
    """The float32-computed gradient of input `name` as a tensor description, when there is one."""
    grad = (lower or {}).get("grads", {}).get(name)
    return {"kind": "tensor", "value": grad} if isinstance(grad, torch.Tensor) else None


def compare_inputs(sent: Mapping[str, Any], got: dict[str, Any]) -> Mismatch | None:
    after = got.get("inputs_after", {})
    for name, before in sent.items():
        if type(before) is not torch.Tensor:
            continue
        now = after.get(name)
        if now is None:  # the worker hands back only the inputs a call changed
            continue
        if now.dtype != before.dtype or now.shape != before.shape or now.stride() != before.stride():
            return Mismatch.of(
                f"input {name} changed its dtype, shape or strides during the call; do not modify inputs"
            )
        mismatch = compare_tensors(f"input {name} after the call", now, before, None)
        if mismatch:
            return Mismatch.of(
                f"{mismatch.message}; the function modified its input in place (copy before editing)",
                f"{mismatch.learner_message}; the function modified its input in place (copy before editing)",
            )
    return None


def judge_case(
    function: str,
    sent: Mapping[str, Any],
    got: dict[str, Any],
    want: dict[str, Any],
    aspects: Sequence[Aspect],
    tolerances: Mapping[str, Tolerance],
    context: InputContext | None = None,
    evidence: bool = True,
    lower: dict[str, Any] | None = None,
) -> Outcome:
    """Compare one learner observation with the expected one on the aspects a check names (without `evidence`, a
    failing value comparison says only that the values differ: see `compare_tensors`). `lower` is the expected
    side computed in float32 on the same inputs rounded to float32, for a check that compares float64 results at
    float32's precision; None compares them at float64's."""
    if lower is not None and ("raised" in lower or "backward_error" in lower):
        lower = None  # float32 cannot even compute this case: its float64 tolerance stands
    if "raised" in want:
        if "raises" not in aspects:
            raise AssertionError(f"expected side raised {exception_text(want['raised'])} on a case that must not raise")
        expected_type = want["raised"]["type"]
        if "raised" not in got:
            return Outcome(
                Verdict.FAIL,
                Mismatch.of(
                    f"{function} returned normally; expected it to raise {expected_type}",
                    f"{function} returned normally, but this case must raise an exception",
                ),
            )
        if not _is_instance(got["raised"], expected_type):
            return Outcome(
                Verdict.FAIL,
                Mismatch.of(
                    f"{function} raised {exception_text(got['raised'])}; expected {expected_type}",
                    f"{function} raised {_safe_exception(got['raised'])}, not the exception this case expects",
                ),
            )
        return Outcome(Verdict.PASS)
    if "raised" in got:
        return Outcome(
            Verdict.ERROR,
            Mismatch.of(
                f"{function} raised {exception_text(got['raised'])}",
                f"{function} raised {_safe_exception(got['raised'])} (message withheld)",
            ),
        )
    if OUTPUT_ASPECTS & set(aspects):
        mismatch = _compare_outputs(function, got, want, aspects, tolerances, context, evidence, lower)
        if mismatch:
            return Outcome(Verdict.FAIL, mismatch)
    if {"backward", "connected", "grads", "grad_flow"} & set(aspects):
        mismatch = compare_grads(got, want, aspects, tolerances, evidence, lower)
        if mismatch:
            return Outcome(Verdict.FAIL, mismatch)
    if "inputs_unchanged" in aspects:
        mismatch = compare_inputs(sent, got)
        if mismatch:
            return Outcome(Verdict.FAIL, mismatch)
    return Outcome(Verdict.PASS)


SHOWS_INPUTS = {"shape", "dtype", "device"}
OUTPUT_ASPECTS = {
    "type",
    "shape",
    "dtype",
    "device",
    "values",
    "values_exact",
    "finite",
    "requires_grad",
    "connected",
}


def _compare_outputs(
    function: str,
    got: dict[str, Any],
    want: dict[str, Any],
    aspects: Sequence[Aspect],
    tolerances: Mapping[str, Tolerance],
    context: InputContext | None,
    evidence: bool = True,
    lower: dict[str, Any] | None = None,
) -> Mismatch | None:
    lowers = flatten_output(lower["output"], function) if lower is not None and "output" in lower else []
    for index, ((name, g), (_, w)) in enumerate(
        zip(flatten_output(got["output"], function), flatten_output(want["output"], function), strict=False)
    ):
        low = lowers[index][1] if index < len(lowers) else None
        mismatch = compare_output(name, g, w, aspects, tolerances, context, evidence, low)
        if mismatch:
            return mismatch
    if len(flatten_output(got["output"], function)) != len(flatten_output(want["output"], function)):
        return Mismatch.of(
            f"{function}: expected {describe_kind(want['output'])}, got {describe_kind(got['output'])}",
            f"{function}: the result holds a different number of items than expected",
        )
    return None


def same_as(
    function: str,
    sent: Mapping[str, Any],
    got: dict[str, Any],
    other: dict[str, Any],
    aspects: Sequence[Aspect],
    tolerances: Mapping[str, Tolerance],
    lowered: bool = False,
) -> bool:
    """Whether the learner's answer matches `other` (a misconception's) on every aspect a check compares.

    Only answers match: where either side raised, or failed backward on a check that runs it, nothing is
    matched here (`fails_alike` says whether both failed the same way). Unlike `judge_case`, either side may
    modify its inputs: a misreading can, and then matching it means doing the same. `lowered`: the check compares
    float64 results at float32's precision, and so does the match (a misreading computed in float32 is that
    misreading still).
    """
    if _failure(got, aspects) is not None or _failure(other, aspects) is not None:
        return False
    if lowered and "float32" in tolerances:
        tolerances = {**tolerances, "float64": tolerances["float32"]}
    compared = [a for a in aspects if a not in ("inputs_unchanged", "raises")]
    if (
        compared
        and judge_case(function, sent, got, other, compared, tolerances, evidence=False).verdict != Verdict.PASS
    ):
        return False
    if "inputs_unchanged" in aspects:
        # each side hands back the inputs it changed; one it left out is as it was sent
        mine, theirs = got.get("inputs_after", {}), other.get("inputs_after", {})
        for name in mine.keys() | theirs.keys():
            now, then = mine.get(name, sent.get(name)), theirs.get(name, sent.get(name))
            if not isinstance(now, torch.Tensor) or not isinstance(then, torch.Tensor):
                return False
            if compare_tensors(name, now, then, None, evidence=False) is not None:
                return False
    return True


def fails_alike(
    function: str,
    sent: Mapping[str, Any],
    got: dict[str, Any],
    other: dict[str, Any],
    aspects: Sequence[Aspect],
    tolerances: Mapping[str, Tolerance],
) -> bool:
    """Whether the learner and a misconception's solution fail this call the same way: the same exception class
    (not a subclass: a starter's NotImplementedError must not match a misreading that raises RuntimeError), raised
    by the call itself or by backward; a backward failure only when what they returned agrees too."""
    mine, theirs = _failure(got, aspects), _failure(other, aspects)
    if mine is None or theirs is None or mine != theirs:
        return False
    if mine[0] == "raised":
        return True
    compared = [a for a in aspects if a in OUTPUT_ASPECTS and a != "connected"] or ["type", "values"]
    return judge_case(function, sent, got, other, compared, tolerances, evidence=False).verdict == Verdict.PASS


def _failure(obs: dict[str, Any], aspects: Sequence[Aspect]) -> tuple[str, str] | None:
    """How an observation failed, if it did: ("raised", type) or ("backward_error", type)."""
    if "raised" in obs:
        return "raised", str(obs["raised"]["type"])
    if "backward_error" in obs and {"backward", "grads", "grad_flow", "connected"} & set(aspects):
        return "backward_error", str(obs["backward_error"]["type"])
    return None


# What a misreading of a result's form changes: its Python type, dtype, device or graph flags, never its values.
FORM_ASPECTS = frozenset({"type", "dtype", "device", "requires_grad", "connected"})


def differs_only_in_form(
    sent: Mapping[str, Any],
    got: dict[str, Any],
    want: dict[str, Any],
    aspects: Sequence[Aspect],
    tolerances: Mapping[str, Tolerance],
) -> bool:
    """Whether an answer that failed agrees with the expected one once its form is set aside: the same number of
    results of the same shapes, every value equal within the coarser dtype's tolerance (a Python number read as a
    0-dim tensor), gradients as expected and inputs left alone. Such a failure is a form's, not a value's."""
    if "raised" in got or "raised" in want or "backward_error" in got or "backward_error" in want:
        return False
    mine, theirs = flatten_output(got["output"], ""), flatten_output(want["output"], "")
    if len(mine) != len(theirs):
        return False
    for (_, g), (_, w) in zip(mine, theirs, strict=True):
        gv, wv = as_tensor(g), as_tensor(w)
        if gv is None or wv is None:
            if g.get("kind") != w.get("kind") or g.get("value") != w.get("value"):
                return False
            continue
        if gv.shape != wv.shape:
            return False
        if {"values", "values_exact"} & set(aspects):
            coarse = max((_RTOL.get(gv.dtype, 0.0), _RTOL.get(wv.dtype, 0.0)))
            if compare_tensors("", gv, wv, Tolerance(rtol=coarse, atol=coarse * 1e-3), evidence=False) is not None:
                return False
    if "grads" in aspects and compare_grads(got, want, ["grads"], tolerances, evidence=False) is not None:
        return False
    return "inputs_unchanged" not in aspects or compare_inputs(sent, got) is None


# The rounding step of each dtype an answer may come in: two answers in different dtypes agree in value when they
# differ by no more than the coarser one's step.
_RTOL = {
    torch.float64: 1e-9,
    torch.float32: 1e-5,
    torch.float16: 2e-3,
    torch.bfloat16: 1.6e-2,
}


def as_tensor(desc: dict[str, Any]) -> torch.Tensor | None:
    value = desc.get("value")
    if desc.get("kind") == "tensor" and isinstance(value, torch.Tensor):
        return value
    if desc.get("kind") == "python" and isinstance(value, (bool, int, float)):
        return torch.tensor(float(value), dtype=torch.float64)
    return None


def answer_key(obs: dict[str, Any]) -> tuple[object, ...] | None:
    """What an answer says, for telling whether answers change with the inputs: each result's Python value, or a
    tensor's shape and bytes; a tensor holding one value throughout (zeros, ones, NaN everywhere) keys by that value
    alone, whatever its shape, and an empty one by nothing, so a constant answer keys alike at every size. None when
    the call raised: it answered nothing."""
    if "raised" in obs or "output" not in obs:
        return None
    return tuple(_item_key(item) for _, item in flatten_output(obs["output"], ""))


def _item_key(item: dict[str, Any]) -> object:
    value = item.get("value")
    if item.get("kind") != "tensor" or not isinstance(value, torch.Tensor):
        return ("python", repr(value))
    flat = value.detach().reshape(-1)
    if flat.numel() == 0:
        return ("constant", None)
    first = flat[:1].to(torch.float64) if flat.is_floating_point() or flat.dtype == torch.bool else flat[:1]
    both = flat.to(first.dtype)
    if bool(((both == first) | (torch.isnan(both) & torch.isnan(first))).all()):
        return ("constant", repr(float(first)))
    return ("tensor", tuple(value.shape), str(value.dtype), hashlib.sha256(_bytes(value)).hexdigest())


def _bytes(value: torch.Tensor) -> bytes:
    flat = value.detach().contiguous().reshape(-1)
    return (flat.to(torch.float64) if flat.dtype in (torch.bfloat16, torch.float16) else flat).numpy().tobytes()


def constant_answers(mine: Sequence[tuple[object, ...]], theirs: Sequence[tuple[object, ...]]) -> bool:
    """Whether answers `mine` stay the same where the expected answers `theirs` (of the same calls) change: once
    the empty answers (alike with anything constant) are set aside, one key among the learner's and more than one
    among the expected."""
    return len(_filled(theirs)) >= 2 and len(_filled(mine)) <= 1


def _filled(keys: Sequence[tuple[object, ...]]) -> set[tuple[object, ...]]:
    return {key for key in keys if any(item != ("constant", None) for item in key)}


NO_RESPONSE = Mismatch.of(
    "the answers do not change with the inputs: every call of this check that returned gave one answer, where the "
    "expected answers differ from call to call"
)
