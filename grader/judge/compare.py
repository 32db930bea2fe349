"""Comparators: decide whether an observed value matches the expected one, and say why not."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from grader.model.spec import Tolerance

MAX_ELEMENTS = 1 << 24  # a returned tensor larger than this is refused before any arithmetic


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


def compare_tensors(
    name: str, got: torch.Tensor, want: torch.Tensor, tol: Tolerance | None,
    context: Callable[[tuple[int, ...], tuple[int, ...]], str] | None = None, evidence: bool = True,
) -> Mismatch | None:
    """Elementwise comparison, NaN matching NaN and inf matching inf of the same sign; tol None means bitwise.

    Without `evidence`, a mismatch is DIFFERS: the diagnosis compares each failing case with every misreading's
    result and needs only the answer, which costs a fraction of finding and describing the first difference."""
    if got.shape != want.shape:
        text = f"{name}: expected shape {tuple(want.shape)}, got {tuple(got.shape)}"
        return Mismatch(text, f"{name}: the shape differs from the expected shape")
    if got.numel() > MAX_ELEMENTS:
        text = f"{name}: {got.numel()} elements is too large to compare"
        return Mismatch(text, f"{name}: too many elements to compare")
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
    around = context(_coords(bad, got.shape), tuple(got.shape)) if context is not None else ""
    text = f"{where}: {detail}; {count} of {got.numel()} elements differ ({bound}){around}"
    # element counts would reveal a hidden case's shape and the tolerance its dtype: the hidden-safe sentence
    # says only whether the comparison was bitwise
    return Mismatch(text, f"{name}: values differ from the expected ones{' (bitwise)' if tol is None else ''}")


def describe_kind(obs: dict[str, Any]) -> str:
    kind = obs.get("kind")
    if kind == "tensor":
        return "a torch.Tensor"
    if kind == "python":
        return f"a Python {obs.get('type')}"
    if kind == "sequence":
        return f"a {obs.get('type')} of {len(obs.get('items', []))} items"
    return f"a {obs.get('type', 'value of unknown type')}"
