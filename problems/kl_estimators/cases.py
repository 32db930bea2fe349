"""Case generators for kl_estimators: each takes a seeded torch.Generator and returns the calls to make.

Every call draws its inputs from the generator (log-ratios of both signs at random positions), so the public seed's
cases never answer a graded one. A call whose answer does not depend on its inputs (it must raise, its mask is
empty) is grouped with a partner whose answer does. Each check varies its own clause on a neutral background (bool
mask, finite padding of equal length in every response, estimator and reduction given).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch
from torch import Tensor

from grader.judge.cases import Call

F32, F64 = torch.float32, torch.float64
DTYPES = (F32, F64)
PENALTY, LOSS = "kl_penalty", "kl_loss"
ESTIMATORS = ("k1", "k2", "k3")
SHAPES = [(3, 7), (5, 5), (1, 9), (6, 1), (2, 3), (8, 33), (16, 64)]


def _randint(g: torch.Generator, low: int, high: int) -> int:
    """An int in [low, high], both included."""
    return int(torch.randint(low, high + 1, (), generator=g))


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def penalty(logp: Tensor, ref: Tensor, mask: Tensor, label: str, estimator: str | None = "k3",
            reduction: str | None = "none", **options: Any) -> Call:
    """A kl_penalty call; an option given as None is omitted, so only the default_arguments check relies on it."""
    kwargs = {"logp": logp, "ref_logp": ref, "mask": mask, "estimator": estimator, "reduction": reduction}
    kwargs = {k: v for k, v in kwargs.items() if v is not None}
    return Call(PENALTY, kwargs, f"{PENALTY}: {label}", **options)


def loss(logp: Tensor, ref: Tensor, mask: Tensor, label: str, estimator: str | None = "k3",
         requires_grad: tuple[str, ...] = ("logp",), **options: Any) -> Call:
    kwargs = {"logp": logp, "ref_logp": ref, "mask": mask, **({} if estimator is None else {"estimator": estimator})}
    return Call(LOSS, kwargs, f"{LOSS}: {label}", requires_grad=requires_grad, backward=bool(requires_grad),
                **options)


def batch(g: torch.Generator, shape: tuple[int, int], dtype: torch.dtype, padded: bool = False,
          spread: float = 0.8) -> tuple[Tensor, Tensor, Tensor]:
    """logp, ref_logp, bool mask [B, L]. The log-ratios d = logp - ref_logp are normal with scale `spread` (cut at 2.5), one of
    them +spread and one -0.6 spread (both signs: an estimator read with the ratio inverted moves). `padded` masks the
    same number of tokens in every response, at random positions, with finite padding: a token mean and a mean of
    per-response means then agree, that difference being the token_mean clause's business."""
    rows, cols = shape
    logp = -(torch.rand(shape, generator=g, dtype=F64) * 4 + 0.05)
    d = (torch.randn(shape, generator=g, dtype=F64) * spread).clamp(-2.5, 2.5)  # k3 below 10: clamps are large_ratios'
    picks = torch.randperm(rows * cols, generator=g)[:2]
    d.view(-1)[picks] = torch.tensor([spread, -0.6 * spread], dtype=F64)[: len(picks)]  # no two that cancel
    kept = _randint(g, 1, cols - 1) if padded and cols > 1 else cols
    order = torch.rand(shape, generator=g).argsort(dim=1)
    mask = order < kept  # [B, L], `kept` valid tokens per response
    pad = torch.randn(shape, generator=g, dtype=F64) * 3
    ref = torch.where(mask, logp - d, logp + pad)
    return logp.to(dtype), ref.to(dtype), mask


def non_finite(x: Tensor, mask: Tensor, g: torch.Generator) -> Tensor:
    """x with each padded position NaN, +inf or -inf at random, the first one NaN."""
    picks = torch.randint(0, 3, x.shape, generator=g)
    first = (mask == 0).nonzero()[:1].tolist()
    if first:
        picks[tuple(first[0])] = 0
    return torch.where(mask == 0, torch.tensor([math.nan, math.inf, -math.inf], dtype=x.dtype)[picks], x)


def _group(calls: list[Call], name: str) -> list[Call]:
    return [replace(call, group=name) for call in calls]


def _random(g: torch.Generator, estimator: str) -> list[Call]:
    return [penalty(*batch(g, shape, dtype), f"{_name(dtype)} {list(shape)}, {estimator}, no padding", estimator,
                    hidden=True) for shape in SHAPES for dtype in DTYPES]


def random_k1(g: torch.Generator) -> list[Call]:
    return _random(g, "k1")


def random_k2(g: torch.Generator) -> list[Call]:
    return _random(g, "k2")


def random_k3(g: torch.Generator) -> list[Call]:
    return _random(g, "k3")


def _padded(g: torch.Generator, make: Callable[..., Call], estimators: tuple[str, ...] = ESTIMATORS) -> list[Call]:
    return [make(*batch(g, shape, dtype, padded=True), f"{_name(dtype)} {list(shape)}, {est}, padding", est,
                 hidden=True)
            for shape in SHAPES for dtype in DTYPES for est in estimators]


def _by_estimator(calls: list[Call]) -> list[Call]:  # a lone scalar may equal a public one within tolerance
    return [replace(call, group=f"{call.kwargs['estimator']} {call.kwargs['logp'].dtype}") for call in calls]


def random_mean(g: torch.Generator) -> list[Call]:
    return _by_estimator(_padded(g, lambda *a, hidden: penalty(*a, reduction="mean", hidden=hidden)))


def random_loss(g: torch.Generator) -> list[Call]:
    return _by_estimator(_padded(g, loss))


def random_grad(g: torch.Generator) -> list[Call]:
    return _padded(g, loss, ("k1", "k2"))


def random_grad_k3(g: torch.Generator) -> list[Call]:
    """k3's gradient apart: it alone flows through r as well as through d."""
    return _padded(g, loss, ("k3",))


def contract_penalty(g: torch.Generator) -> list[Call]:
    return [penalty(*batch(g, shape, dtype, padded=True), f"{_name(dtype)} {list(shape)}, {red}", est, red)
            for shape, dtype, est, red in [((3, 5), F32, "k3", "none"), ((4, 4), F64, "k1", "none"),
                                           ((2, 6), F32, "k2", "mean"), ((5, 3), F64, "k3", "mean")]]


def contract_penalty_grad(g: torch.Generator) -> list[Call]:
    return [penalty(*batch(g, (3, 5), dtype), f"{_name(dtype)}, logp requires grad, {red}", "k3", red,
                    requires_grad=("logp",)) for dtype in DTYPES for red in ("none", "mean")]


def contract_loss(g: torch.Generator) -> list[Call]:
    return [loss(*batch(g, (3, 5), dtype, padded=True), f"{_name(dtype)}, {est}", est)
            for dtype, est in [(F32, "k3"), (F64, "k2"), (F32, "k1")]]


def empty_mask(g: torch.Generator) -> list[Call]:
    """Each empty-mask call grouped with a partner whose mask is not empty, all one group. The padding is finite:
    NaN padding is the padding clause's business."""
    calls = []
    for dtype in DTYPES:
        for kind in ("mean", "loss"):
            logp, ref, mask = batch(g, (_randint(g, 2, 5), _randint(g, 2, 7)), dtype)
            est = ESTIMATORS[_randint(g, 0, 2)]
            for m, text in [(torch.zeros_like(mask), "every token masked"), (mask, "partner, valid tokens")]:
                made = (penalty(logp, ref, m, text, est, "mean", group="empty mask") if kind == "mean"
                        else loss(logp, ref, m, text, est, group="empty mask"))
                calls.append(made if m is not mask else made.as_partner())
    return calls


def mutation(g: torch.Generator) -> list[Call]:
    """NaN/inf padding, where an in-place clean-up (`nan_to_num_`, `x[~mask] = 0`) shows as a mutation."""
    calls = []
    for dtype in DTYPES:
        logp, ref, mask = batch(g, (4, _randint(g, 4, 8)), dtype, padded=True)
        logp, ref = non_finite(logp, mask, g), non_finite(ref, mask, g)
        label = f"{_name(dtype)} with NaN/inf padding"
        # the mean and the loss judged on inputs_unchanged alone: a NaN there is the padding clause's business
        calls += [penalty(logp, ref, mask, label, "k3", "none"),
                  penalty(logp, ref, mask, label, "k2", "mean", compare=("inputs_unchanged",)),
                  loss(logp, ref, mask, label, "k3", requires_grad=(), compare=("inputs_unchanged",))]
    return calls


def default_arguments(g: torch.Generator) -> list[Call]:
    calls = []
    for dtype in DTYPES:
        logp, ref, mask = batch(g, (3, 6), dtype, padded=True)
        calls += [penalty(logp, ref, mask, "estimator and reduction omitted", None, None),
                  penalty(logp, ref, mask, "estimator omitted, reduction mean", None, "mean"),
                  penalty(logp, ref, mask, "k2, reduction omitted", "k2", None),
                  loss(logp, ref, mask, "estimator omitted", None)]
    return _group(calls, "defaults")


def padding_nan_inf(g: torch.Generator) -> list[Call]:
    calls = []
    for dtype in DTYPES:
        for est in ESTIMATORS:
            logp, ref, mask = batch(g, (_randint(g, 3, 6), _randint(g, 4, 9)), dtype, padded=True)
            logp, ref = non_finite(logp, mask, g), non_finite(ref, mask, g)
            label = f"{_name(dtype)} {est}, NaN/inf padding"
            calls += [penalty(logp, ref, mask, label, est, "none"), penalty(logp, ref, mask, label, est, "mean"),
                      loss(logp, ref, mask, label, est)]
    return _group(calls, "NaN/inf padding")


def token_mean(g: torch.Generator) -> list[Call]:
    """Responses of very different lengths and one empty response: a token mean over the batch differs from a mean
    of per-response means and from a mean over every position."""
    calls = []
    for dtype in DTYPES:
        for est in ESTIMATORS:
            logp, ref, mask = batch(g, (4, _randint(g, 8, 12)), dtype)
            mask[1, 2:] = False
            mask[2, :] = False
            mask[3, _randint(g, 4, 7):] = False
            mask = mask[torch.randperm(4, generator=g)]
            calls += [penalty(logp, ref, mask, f"{_name(dtype)} {est}, ragged with an empty response", est, "mean"),
                      loss(logp, ref, mask, f"{_name(dtype)} {est}, ragged with an empty response", est)]
    return _group(calls, "token mean")


def stop_gradient(g: torch.Generator) -> list[Call]:
    return [loss(*batch(g, (3, 6), dtype, padded=True), f"{_name(dtype)} {est}, ref_logp requires grad too", est,
                 requires_grad=("logp", "ref_logp")) for dtype in DTYPES for est in ESTIMATORS]


def large_ratios(g: torch.Generator) -> list[Call]:
    """Log-ratios of magnitude 10 to 30, both signs: a clamp of d or of the value to [-10, 10] or [-20, 20] moves
    them; exp(30) stays far from float32's overflow."""
    calls = []
    for dtype in DTYPES:
        for est in ESTIMATORS:
            logp, ref, mask = batch(g, (3, 6), dtype)
            d = (torch.rand(3, 6, generator=g, dtype=F64) * 20 + 10) * torch.where(
                torch.rand(3, 6, generator=g) < 0.5, -1.0, 1.0).to(F64)
            ref = (logp.to(F64) - d).to(dtype)
            calls += [penalty(logp, ref, mask, f"{_name(dtype)} {est}, |d| in [10, 30]", est),
                      loss(logp, ref, mask, f"{_name(dtype)} {est}, |d| in [10, 30]", est)]
    return _group(calls, "large ratios")


def mask_dtypes(g: torch.Generator) -> list[Call]:
    calls = []
    for dtype, kind in [(F32, torch.float64), (F64, torch.float32), (F32, torch.int64), (F64, torch.uint8)]:
        logp, ref, mask = batch(g, (3, 7), dtype, padded=True)
        label = f"{_name(dtype)}, {_name(kind)} mask"
        calls += [penalty(logp, ref, mask.to(kind), label, "k3", "none"),
                  penalty(logp, ref, mask.to(kind), label, "k2", "mean"), loss(logp, ref, mask.to(kind), label)]
    return _group(calls, "mask dtypes")


def non_contiguous(g: torch.Generator) -> list[Call]:
    calls = []
    for dtype in DTYPES:
        logp, ref, mask = batch(g, (7, 4), dtype, padded=True)
        logp = logp.t().contiguous().t()  # column-major
        ref = torch.stack([ref, ref], dim=-1)[..., 0]  # every second element of a [B, L, 2] tensor
        calls += [penalty(logp, ref, mask, f"{_name(dtype)}, strided inputs", "k3", "none"),
                  loss(logp, ref, mask, f"{_name(dtype)}, strided inputs", "k1")]
    return _group(calls, "strided")


Change = Callable[[Tensor, Tensor, Tensor], dict[str, Any]]
SHAPE_ERRORS: list[tuple[str, Change]] = [
    ("logp 1-D", lambda lp, rl, m: {"logp": lp[0], "ref_logp": rl[0], "mask": m[0]}),
    ("logp 3-D", lambda lp, rl, m: {"logp": lp[None], "ref_logp": rl[None], "mask": m[None]}),
    ("ref_logp [B, 1]", lambda lp, rl, m: {"ref_logp": rl[:, :1]}),
    ("mask [1, L]", lambda lp, rl, m: {"mask": m[:1]}),
    ("mask transposed", lambda lp, rl, m: {"mask": torch.ones(m.shape[::-1], dtype=torch.bool)}),
]
DTYPE_ERRORS: list[tuple[str, Change]] = [
    ("ref_logp in the other float dtype", lambda lp, rl, m: {
        "ref_logp": rl.to(F64 if rl.dtype == F32 else F32)}),
    ("logp and ref_logp int64", lambda lp, rl, m: {"logp": lp.long(), "ref_logp": rl.long()}),
    ("ref_logp int64", lambda lp, rl, m: {"ref_logp": rl.long()}),
    ("logp and ref_logp bool", lambda lp, rl, m: {"logp": lp > -2, "ref_logp": rl > -2}),
]
OPTION_ERRORS: list[tuple[str, Change]] = [
    (f"estimator {name!r}", lambda lp, rl, m, name=name: {"estimator": name})
    for name in ("K3", "kl", "low_var_kl", "mse", "k4", "")
] + [(f"reduction {name!r}", lambda lp, rl, m, name=name: {"reduction": name})
     for name in ("sum", "batchmean", "token-mean", "None")]


def _errors(g: torch.Generator, family: str, changes: list[tuple[str, Change]]) -> list[Call]:
    """Each call that must raise beside a valid partner on the same inputs, all scored as one case."""
    calls = []
    for label, change in changes:
        dtype = DTYPES[_randint(g, 0, 1)]
        logp, ref, mask = batch(g, (_randint(g, 2, 5), _randint(g, 3, 7)), dtype, padded=True)
        fn = PENALTY if "reduction" in label or _randint(g, 0, 1) else LOSS
        kwargs = {"logp": logp, "ref_logp": ref, "mask": mask, **change(logp, ref, mask)}
        calls.append(Call(fn, kwargs, f"{fn}: {label}: must raise", group=family))
        est = ESTIMATORS[_randint(g, 0, 2)]
        calls.append((penalty(logp, ref, mask, "valid: must not raise", est, group=family) if fn == PENALTY
                      else loss(logp, ref, mask, "valid: must not raise", est, (), group=family)).as_partner())
    return [calls[i] for i in torch.randperm(len(calls), generator=g).tolist()]


def shape_errors(g: torch.Generator) -> list[Call]:
    return _errors(g, "bad shapes", SHAPE_ERRORS)


def dtype_errors(g: torch.Generator) -> list[Call]:
    return _errors(g, "bad dtypes", DTYPE_ERRORS)


def option_errors(g: torch.Generator) -> list[Call]:
    return _errors(g, "bad options", OPTION_ERRORS)


def float64_precision(g: torch.Generator) -> list[Call]:
    """float64 log-ratios: computed in float32 and cast back, the values are off by about 1e-7 relative."""
    calls = []
    for est in ESTIMATORS:
        logp, ref, mask = batch(g, (4, 9), F64, padded=True)
        calls += [penalty(logp, ref, mask, f"float64 {est}", est), loss(logp, ref, mask, f"float64 {est}", est)]
    return _group(calls, "float64")
