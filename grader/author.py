"""The one import of a problem's case generators: dtypes, seeded draws, masks, float neighbours, derived case variants.

A `problems/<id>/cases.py` builds `Call`s from tensors it draws from the seeded `torch.Generator` it is handed.
What every generator needs besides its own inputs lives here, written once: dtype names, scalars drawn from the
generator, a validity mask in every dtype a contract accepts, the consecutive floats around a value, rejection
sampling, and the case variants a contract asks of every function (strided inputs, inputs that must stay unchanged,
masks of every dtype, calls that only count together), each a function an author applies to a list of calls.

Every draw here consumes the generator exactly as the helpers it replaces did (`torch.rand`, `torch.randint`,
`torch.randperm` on the CPU), so a problem moved onto the kit draws the same cases from the same seeds.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import TypeVar

import torch
from torch import Tensor

from grader.judge.cases import Call, CaseGenerator, generator_for

__all__ = [
    "BF16",
    "DTYPES",
    "F16",
    "F32",
    "F64",
    "MASK_KINDS",
    "Call",
    "CaseGenerator",
    "as_one",
    "choice",
    "dtype_name",
    "dtype_variants",
    "generator_for",
    "log_uniform",
    "mask_as",
    "mask_dtype_variants",
    "mutation_variants",
    "neighbours",
    "partnered",
    "randint",
    "rejection_sample",
    "shuffled",
    "strided",
    "strided_variants",
    "uniform",
]

T = TypeVar("T")

F16, BF16, F32, F64 = torch.float16, torch.bfloat16, torch.float32, torch.float64
DTYPES = (F32, F64)  # the dtypes whose values every check compares; the half types are the contract checks'
# the dtypes a validity mask may come in: bool, and every integer and float kind a caller's mask is built from
MASK_KINDS = ("bool", "float32", "int64", "float64", "uint8", "int32")


# ---------------------------------------------------------------- names and seeded scalars


def dtype_name(dtype: torch.dtype) -> str:
    """`float32` for torch.float32: the name a case's label shows."""
    return str(dtype).removeprefix("torch.")


def uniform(g: torch.Generator, low: float, high: float) -> float:
    """A float in [low, high), drawn from `g` in float64."""
    return low + (high - low) * float(torch.rand((), generator=g, dtype=F64))


def log_uniform(g: torch.Generator, low: float, high: float) -> float:
    """A float between `low` and `high` (both > 0) whose logarithm is uniform: every scale equally likely."""
    return math.exp(uniform(g, math.log(low), math.log(high)))


def randint(g: torch.Generator, low: int, high: int) -> int:
    """An int in [low, high], both included."""
    return int(torch.randint(low, high + 1, (), generator=g))


def choice(g: torch.Generator, options: Sequence[T]) -> T:
    """One of `options`, drawn from `g`."""
    return options[randint(g, 0, len(options) - 1)]


def shuffled(items: Sequence[T], g: torch.Generator) -> list[T]:
    """The items in an order drawn from `g`: a call's position says nothing about what it must return."""
    return [items[i] for i in torch.randperm(len(items), generator=g).tolist()]


def rejection_sample(
    g: torch.Generator, draw: Callable[[torch.Generator], T], accept: Callable[[T], bool], tries: int = 1000
) -> T:
    """The first of `draw(g)`'s values that `accept` keeps; an error after `tries` draws, never an endless loop.

    Condition a case on what it must show (a group that is not constant, a ratio outside the interval) without
    bending the distribution of the values that pass."""
    for _ in range(tries):
        value = draw(g)
        if accept(value):
            return value
    raise RuntimeError(f"rejection_sample: no accepted draw in {tries} tries; the condition is too rare")


# ---------------------------------------------------------------- tensors


def mask_as(mask: Tensor, kind: str) -> Tensor:
    """A validity mask (bool, or 0/1 of any dtype) in the dtype named `kind`, one of MASK_KINDS."""
    if kind not in MASK_KINDS:
        raise ValueError(f"mask kind {kind!r} is none of {', '.join(MASK_KINDS)}")
    return mask.bool() if kind == "bool" else mask.to(getattr(torch, kind))


def neighbours(x: Tensor, below: int, above: int) -> Tensor:
    """The consecutive floats of x's dtype from `below` steps under x to `above` steps over it: [below + 1 + above,
    *x.shape], x itself at index `below`."""
    down, up = [], []
    current = x.clone()
    for _ in range(below):
        current = torch.nextafter(current, torch.tensor(-math.inf, dtype=x.dtype))
        down.append(current)
    current = x.clone()
    for _ in range(above):
        current = torch.nextafter(current, torch.tensor(math.inf, dtype=x.dtype))
        up.append(current)
    return torch.stack([*reversed(down), x, *up])


def strided(x: Tensor) -> Tensor:
    """x's values in a non-contiguous view (stride 2 in the last dimension, storage offset 1), beside other values
    in the same storage, so a solution that reads the storage as if it were contiguous reads the wrong numbers."""
    if x.dim() == 0 or x.numel() < 2:
        return x
    buffer = torch.stack([x.flip(-1), x], dim=-1)  # [..., L, 2]: x's values interleaved with others
    view = buffer[..., 1]
    assert not view.is_contiguous() and torch.equal(view, x)
    return view


# ---------------------------------------------------------------- derived case variants


def as_one(calls: Iterable[Call], name: str) -> list[Call]:
    """The calls scored as one case: a convention is kept or broken as a whole, so breaking it costs its weight."""
    return [replace(call, group=name) for call in calls]


def partnered(call: Call, partner: Call, group: str) -> list[Call]:
    """`call`, whose right answer does not depend on its inputs (it raises, it is empty, every value is zero), grouped
    with `partner`, whose answer does and which is judged only on answering: a constant answer earns nothing."""
    return [replace(call, group=group), replace(partner, group=group).as_partner()]


def _relabel(call: Call, kwargs: dict[str, object], note: str) -> Call:
    return replace(call, kwargs=kwargs, label=f"{call.label}, {note}")


def strided_variants(calls: Iterable[Call], params: Sequence[str]) -> list[Call]:
    """Each call with its tensor arguments among `params` made non-contiguous (`strided`): the same answers."""
    out = []
    for call in calls:
        kwargs = dict(call.kwargs)
        changed = [p for p in params if isinstance(kwargs.get(p), Tensor) and kwargs[p].numel() > 1]
        kwargs.update({p: strided(kwargs[p]) for p in changed})
        out.append(_relabel(call, kwargs, f"strided {', '.join(changed)}") if changed else call)
    return out


def mutation_variants(calls: Iterable[Call], params: Sequence[str]) -> list[Call]:
    """Each call as it is and again with its `params` strided: inputs a solution writes into through a view (or a
    contiguous copy it makes only sometimes) must stay unchanged both ways."""
    calls = list(calls)
    return [*calls, *strided_variants(calls, params)]


def dtype_variants(
    calls: Iterable[Call], params: Sequence[str], dtypes: Sequence[torch.dtype] = (F32, F64, BF16, F16)
) -> list[Call]:
    """Each call once per dtype in `dtypes`, its floating tensors among `params` converted: the contract's cases (the
    result's dtype follows the inputs', whatever their precision)."""
    out = []
    for call in calls:
        for dtype in dtypes:
            kwargs = dict(call.kwargs)
            floats = [p for p in params if isinstance(kwargs.get(p), Tensor) and kwargs[p].is_floating_point()]
            kwargs.update({p: kwargs[p].to(dtype) for p in floats})
            out.append(_relabel(call, kwargs, dtype_name(dtype)))
    return out


def mask_dtype_variants(calls: Iterable[Call], param: str, kinds: Sequence[str] = MASK_KINDS) -> list[Call]:
    """Each call once per mask dtype in `kinds`, its mask `param` converted: the same answers whatever the dtype."""
    out = []
    for call in calls:
        for kind in kinds:
            kwargs = dict(call.kwargs)
            kwargs[param] = mask_as(kwargs[param], kind)
            out.append(_relabel(call, kwargs, f"{param} {kind}"))
    return out
