"""Case generators for glm5_offpolicy: each takes a seeded torch.Generator and returns the calls to make.

Every T1-T3 case mixes kept, rejected and padded tokens, so no trivial answer (zeros, a constant, the raw
ratio, the input echoed back) matches a case by accident. Every call draws its inputs from the generator: an
edge case keeps its edge (a ratio exactly on a bound, an empty mask, an overflowing ratio) while the other
tokens, their positions, the shapes and the advantages change from seed to seed, so the public seed's cases
(shipped to learners) never answer a graded one. A call whose right answer does not depend on its inputs (it
must raise, its mask is empty) is grouped with one whose answer does, so a constant answer earns nothing.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from decimal import Decimal, getcontext
from typing import Any

import torch
from torch import Tensor

from grader.author import as_one
from grader.judge.cases import Call

F32, F64 = torch.float32, torch.float64
DTYPES = (F32, F64)
WEIGHTS, LOSS = "masked_is_weights", "offpolicy_loss"
MASK_KINDS = ("bool", "float32", "int64", "float64", "uint8", "int32")
NON_FINITE = (math.nan, math.inf, -math.inf)
PAD_OUTSIDE = 3.0  # a padded log-ratio of +-3 gives a ratio outside every interval of every case (widest: 0.001, 6)


def _mask_as(mask: Tensor, kind: str) -> Tensor:
    return mask if kind == "bool" else mask.to(getattr(torch, kind))


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


DEFAULT_WIDTHS = (0.2, 0.2)


def _widths(clip: tuple[float, float] | None, omit: bool = False) -> dict[str, float]:
    """The widths as arguments: given even when they are the defaults (None), so that only the default_widths
    check, which omits them, depends on the signature's defaults."""
    if omit:
        return {}
    low, high = DEFAULT_WIDTHS if clip is None else clip
    return {"clip_low": low, "clip_high": high}


def _describe(dtype: torch.dtype, shape: tuple[int, ...], kind: str, clip: tuple[float, float] | None) -> str:
    low, high = DEFAULT_WIDTHS if clip is None else clip
    widths = f"widths {low:g}/{high:g}"
    return f"{_name(dtype)} {list(shape)} {kind} mask, {widths}"


def _uniform(g: torch.Generator, low: float, high: float) -> float:
    return low + (high - low) * float(torch.rand((), generator=g, dtype=F64))


def _randint(g: torch.Generator, low: int, high: int) -> int:
    """An int in [low, high], both included."""
    return int(torch.randint(low, high + 1, (), generator=g))


def _signed(g: torch.Generator, count: int, low: float = 0.5, high: float = 2.0) -> Tensor:
    """[count] float64 values of magnitude in [low, high] and random sign: advantages far from zero."""
    magnitude = low + (high - low) * torch.rand(count, generator=g, dtype=F64)
    return torch.where(torch.rand(count, generator=g) < 0.5, -magnitude, magnitude)


def _shuffled(calls: list[Call], g: torch.Generator) -> list[Call]:
    """The calls in an order drawn from `g`: a call's position says nothing about what it must return."""
    return [calls[i] for i in torch.randperm(len(calls), generator=g).tolist()]


def weights_call(logp: Tensor, rollout: Tensor, mask: Tensor, clip: tuple[float, float] | None, label: str,
                 requires_grad: tuple[str, ...] = (), hidden: bool = False, group: str | None = None,
                 omit_widths: bool = False) -> Call:
    kwargs = {"logp": logp, "rollout_logp": rollout, "mask": mask, **_widths(clip, omit_widths)}
    return Call(WEIGHTS, kwargs, f"{WEIGHTS}: {label}", requires_grad=requires_grad, hidden=hidden, group=group)


def loss_call(logp: Tensor, rollout: Tensor, adv: Tensor, mask: Tensor, clip: tuple[float, float] | None,
              label: str, requires_grad: tuple[str, ...] = ("logp",), hidden: bool = False,
              group: str | None = None, omit_widths: bool = False) -> Call:
    kwargs = {"logp": logp, "rollout_logp": rollout, "advantages": adv, "mask": mask, **_widths(clip, omit_widths)}
    return Call(LOSS, kwargs, f"{LOSS}: {label}", requires_grad=requires_grad, backward=bool(requires_grad),
                hidden=hidden, group=group)


# The aspects a loss call is judged on in a check whose clause is about which tokens count: its gradient,
# -m w A / max(1, sum m), shows every weight and the denominator; the loss's value is the masked_loss clause's.
GRADIENT_ASPECTS: tuple[Any, ...] = ("type", "shape", "dtype", "backward", "grads")


# What a loss call is judged on in a check whose clause is about what reaches the loss (non-finite padding, an
# empty response's advantage): its gradient, and where its value is NaN or inf, but not its finite value, which is
# the masked_loss clause's (a PPO-style surrogate -sum(m w A r) / N has this loss's gradient and another value).
REACH_ASPECTS: tuple[Any, ...] = ("type", "shape", "finite", "backward", "grads")


def losses_judged_on(aspects: tuple[Any, ...], calls: list[Call]) -> list[Call]:
    """The calls with every loss call judged on `aspects` alone."""
    return [replace(c, compare=aspects) if c.function == LOSS else c for c in calls]


def by_gradient(calls: list[Call]) -> list[Call]:
    """The calls with every loss call judged on its gradient, never on its value."""
    return losses_judged_on(GRADIENT_ASPECTS, calls)


def random_batch(g: torch.Generator, shape: tuple[int, int], dtype: torch.dtype, spread: float = 0.25,
                 shortest: int = 1, ragged: bool = False, padded: bool = False,
                 ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """logp, rollout_logp, bool mask, advantages, with at least one kept valid token and, where three tokens are
    valid, one rejected above the interval and one below it (so ignoring either bound changes the answer);
    every response keeps at least `shortest` valid tokens (`cols` of them: no padding at all), and `padded` leaves
    at least one padded position wherever a response has two. Responses share one
    length unless `ragged` (a token mean and a mean of per-response means then agree: that difference is the
    token_mean clause's business). The padding is finite
    and its ratio lies outside every interval a case uses, so a weight left unmasked there is 0 all the same:
    zero weights on padding that an interval keeps are the padding family's business."""
    rows, cols = shape
    logp = -(torch.rand(shape, generator=g, dtype=F64) * 4 + 0.05)  # [B, L]
    diff = torch.randn(shape, generator=g, dtype=F64) * spread
    lengths = torch.randint(0, cols + 1, (rows if ragged else 1,), generator=g).clamp(min=min(shortest, cols))
    if padded and cols > 1:
        lengths = lengths.clamp(max=cols - 1)
    lengths[0] = max(int(lengths[0]), min(cols - int(padded), 3))
    lengths = lengths.expand(rows) if not ragged else lengths
    mask = torch.arange(cols)[None, :] < lengths[:, None]  # [B, L], ragged right padding
    if int(mask.sum()) < 2:  # L = 1: make a second row valid
        mask[-1, 0] = True
    valid = mask.nonzero()
    # two distinct valid tokens at random positions: no position's answer is the same from seed to seed
    (i0, t0), (i1, t1) = valid[torch.randperm(len(valid), generator=g)[:2]].tolist()
    # one certainly kept (ratio 1.02 lies inside every interval of RANDOM_WIDTHS), one certainly rejected
    diff[i0, t0], diff[i1, t1] = 0.02, 0.9
    # and one rejected below every interval (ratio 0.41), beside the kept token where its row has room: its
    # advantage is far from zero, so a lower bound ignored moves the loss and its gradient
    others = [(i, t) for i, t in valid.tolist() if (i, t) not in ((i0, t0), (i1, t1))]
    if others:
        beside = [(i, t) for i, t in others if i == i0] or others
        i2, t2 = beside[_randint(g, 0, len(beside) - 1)]
        diff[i2, t2] = -0.9
    rollout = logp - diff
    outside = PAD_OUTSIDE * (1 - 2 * ((torch.arange(rows)[:, None] + torch.arange(cols)[None, :]) % 2))  # [B, L]
    logp = torch.where(mask, logp, rollout + outside)
    adv = torch.randn(rows, generator=g, dtype=F64)
    adv[i0] = adv[i0] + (1.0 if adv[i0] >= 0 else -1.0)  # the kept token's advantage is far from zero
    return logp.to(dtype), rollout.to(dtype), mask, adv.to(dtype)


def _pad_non_finite(x: Tensor, mask: Tensor, g: torch.Generator) -> Tensor:
    """x with every padded position replaced by NaN, +inf or -inf drawn at random, the first one NaN."""
    picks = torch.randint(0, len(NON_FINITE), x.shape, generator=g)  # [B, L]
    padded = mask == 0
    first = padded.nonzero()[:1].tolist()
    if first:
        picks[tuple(first[0])] = 0
    return torch.where(padded, torch.tensor(NON_FINITE, dtype=x.dtype)[picks], x)


RANDOM_SHAPES = [(3, 7), (5, 5), (1, 9), (6, 1), (2, 3), (8, 33), (16, 64), (64, 256)]
# Given and equal: omitted and unequal widths are the default_widths and separate_widths clauses' business.
RANDOM_WIDTHS: list[tuple[float, float] | None] = [(0.2, 0.2), (0.1, 0.1), (0.3, 0.3), (0.35, 0.35), (0.05, 0.05)]

# The oracle's random batches come in families, each moving one convention over a neutral background (bool mask,
# no response without a valid token, finite padding whose ratio lies outside the interval), so one convention
# misread costs its own family, never the whole tier.
Family = str  # "core", "padding", "empty_rows" or "mask_dtypes"


def _random_configs(g: torch.Generator, family: Family, full: bool = False):
    """The batches of one family; `full` leaves no padding (the core weights: zero on padding is the padding
    family's business)."""
    for index, shape in enumerate(RANDOM_SHAPES):
        for dtype in DTYPES:
            kind = MASK_KINDS[(index + (dtype == F64)) % len(MASK_KINDS)] if family == "mask_dtypes" else "bool"
            clip = RANDOM_WIDTHS[(2 * index + (dtype == F64)) % len(RANDOM_WIDTHS)]
            # mask dtypes on full masks: zero weights on padding are the padding family's business
            shortest = 0 if family == "empty_rows" else shape[1] if full or family == "mask_dtypes" else 1
            # the core loss batches always pad (where a response has room): a mean over every position is charged
            padded = family == "core" and not full
            logp, rollout, mask, adv = random_batch(g, shape, dtype, shortest=shortest, padded=padded)
            if family == "padding":  # finite padding at any ratio, inside the interval too
                pad = (torch.randn(shape, generator=g, dtype=F64) * 0.3).to(dtype)
                logp = torch.where(mask, logp, rollout + pad)
            if family == "empty_rows":  # one more response, with no valid token and a NaN advantage
                at = _randint(g, 0, shape[0])
                empty_rollout = rollout[:1]
                logp = torch.cat([logp[:at], empty_rollout + PAD_OUTSIDE, logp[at:]])  # [B + 1, L]
                rollout = torch.cat([rollout[:at], empty_rollout, rollout[at:]])
                mask = torch.cat([mask[:at], torch.zeros_like(mask[:1]), mask[at:]])
                adv = torch.cat([adv[:at], torch.full_like(adv[:1], math.nan), adv[at:]])
            label = _describe(dtype, shape, kind, clip)
            yield logp, rollout, _mask_as(mask, kind), adv, clip, f"{label}, {family.replace('_', ' ')}"


def random_weights(g: torch.Generator) -> list[Call]:
    return [weights_call(lp, rl, m, clip, label, hidden=True)
            for lp, rl, m, _, clip, label in _random_configs(g, "core", full=True)]


def random_loss(g: torch.Generator) -> list[Call]:
    return [loss_call(lp, rl, a, m, clip, label, hidden=True)
            for lp, rl, m, a, clip, label in _random_configs(g, "core")]


def _family_calls(g: torch.Generator, family: Family) -> list[Call]:
    """Weights and loss calls of each batch; the loss alone where a response has no valid token, whose zero
    weights are the padding family's business."""
    calls = []
    for lp, rl, m, a, clip, label in _random_configs(g, family):
        if family != "empty_rows":
            calls.append(weights_call(lp, rl, m, clip, label, hidden=True))
        calls.append(loss_call(lp, rl, a, m, clip, label, hidden=True))
    return calls


def random_padding(g: torch.Generator) -> list[Call]:
    return as_one(_family_calls(g, "padding"), "padding")


def random_empty_rows(g: torch.Generator) -> list[Call]:
    return _family_calls(g, "empty_rows")


def random_mask_dtypes(g: torch.Generator) -> list[Call]:
    return as_one(_family_calls(g, "mask_dtypes"), "mask dtypes")


# ---------------------------------------------------------------- T0 contracts


def _small(g: torch.Generator, dtype: torch.dtype, shape: tuple[int, int] = (3, 5)):
    return random_batch(g, shape, dtype)


def contract_weights(g: torch.Generator) -> list[Call]:
    calls = []
    # bool masks: another mask dtype is the mask_dtypes family's business
    for dtype, kind, shape in [(F32, "bool", (3, 5)), (F64, "bool", (4, 4)), (F32, "bool", (1, 6)),
                               (F64, "bool", (7, 2))]:
        logp, rollout, mask, _ = _small(g, dtype, shape)
        calls.append(weights_call(logp, rollout, _mask_as(mask, kind), None, _describe(dtype, shape, kind, None)))
    return calls


def contract_weights_grad(g: torch.Generator) -> list[Call]:
    calls = []
    for dtype in DTYPES:
        logp, rollout, mask, _ = _small(g, dtype)
        calls.append(weights_call(logp, rollout, mask, None, f"{_name(dtype)}, logp requires grad",
                                  requires_grad=("logp",)))
    return calls


def contract_loss(g: torch.Generator) -> list[Call]:
    calls = []
    for dtype, kind in [(F32, "bool"), (F64, "bool"), (F32, "bool")]:
        logp, rollout, mask, adv = _small(g, dtype)
        calls.append(loss_call(logp, rollout, adv, _mask_as(mask, kind), None, _describe(dtype, (3, 5), kind, None)))
    return calls


def empty_mask(g: torch.Generator) -> list[Call]:
    """Every empty-mask loss call is grouped with a loss call of the same shape whose mask is not empty.

    The padding of an empty call is either NaN/inf or the finite values of its partner, so a loss that turns
    only non-finite padding into NaN is told apart from one that divides 0 by 0. The weights of an empty mask
    are all padding: the padding checks' business.
    """
    calls = []
    for dtype in DTYPES:
        for function, kind, padding in [(LOSS, "bool", "finite"), (LOSS, "bool", "NaN/inf")]:
            shape = (_randint(g, 2, 5), _randint(g, 2, 7))
            logp, rollout, _, adv = random_batch(g, shape, dtype)
            empty = torch.zeros(shape, dtype=torch.bool)
            if padding != "finite":
                logp, rollout = _pad_non_finite(logp, empty, g), _pad_non_finite(rollout, empty, g)
            group = f"{_name(dtype)} {function} {kind} mask, {padding} padding"
            label = f"{_name(dtype)} {list(shape)} {kind} mask"
            filled = random_batch(g, shape, dtype)
            for lp, rl, m, a, text in [(logp, rollout, empty, adv, f"every token masked, padding {padding}"),
                                       (*filled, "valid tokens, the partner of an empty-mask case")]:
                if function == WEIGHTS:
                    made = weights_call(lp, rl, _mask_as(m, kind), None, f"{label}, {text}", group=group)
                else:
                    made = loss_call(lp, rl, a, _mask_as(m, kind), None, f"{label}, {text}", group=group)
                calls.append(made if m is empty else made.as_partner())
    return _shuffled(calls, g)


def mutation(g: torch.Generator) -> list[Call]:
    """NaN/inf padding, where an in-place clean-up (`nan_to_num_`, `x[~mask] = 0`) shows as a mutation."""
    calls = []
    for dtype in DTYPES:
        shape = (_randint(g, 3, 5), _randint(g, 4, 8))
        logp, rollout, mask, adv = random_batch(g, shape, dtype)
        if bool(mask.all()):
            mask[-1, -1] = False
        logp, rollout = _pad_non_finite(logp, mask, g), _pad_non_finite(rollout, mask, g)
        label = f"{_name(dtype)} {list(shape)} with NaN/inf padding"
        calls.append(weights_call(logp, rollout, mask, None, label))
        calls.append(loss_call(logp, rollout, adv, mask, None, label, requires_grad=()))
        calls.append(loss_call(logp.t().contiguous().t(), rollout, adv, mask, (0.3, 0.3),
                               label + ", column-major logp", requires_grad=()))
    return calls


# ---------------------------------------------------------------- T2 edge cases


def _ulp_neighbours(x: Tensor, count: int) -> Tensor:
    """The 2 * count + 1 consecutive floats of x's dtype centred on x."""
    below, above, current = [], [], x.clone()
    for _ in range(count):
        current = torch.nextafter(current, torch.tensor(-math.inf, dtype=x.dtype))
        below.append(current)
    current = x.clone()
    for _ in range(count):
        current = torch.nextafter(current, torch.tensor(math.inf, dtype=x.dtype))
        above.append(current)
    return torch.stack([*reversed(below), x, *above])


def exact_log(bound: Tensor) -> Tensor:
    """A log-ratio d of bound's dtype whose true exp(d) sits within a quarter ulp of `bound`.

    Any faithfully rounded exp then returns `bound` itself; the assertion documents that torch does.
    """
    getcontext().prec = 60
    target = Decimal(float(bound))
    spacing = Decimal(float(torch.nextafter(bound, torch.tensor(math.inf, dtype=bound.dtype)))) - target
    candidates = _ulp_neighbours(torch.log(bound), 16)
    best = min(candidates.tolist(), key=lambda d: abs(Decimal(d).exp() - target))
    d = torch.tensor(best, dtype=bound.dtype)
    assert abs(Decimal(best).exp() - target) < spacing / 4, f"no log lands well inside the rounding of {bound}"
    assert torch.exp(d) == bound, f"torch.exp({best}) != {float(bound)}"
    return d


def _exact_pair(d: Tensor) -> tuple[Tensor, Tensor]:
    """logp, rollout_logp of d's dtype with logp - rollout_logp == d and exp(logp) / exp(rollout_logp) == exp(d)
    exactly: rollout_logp = 0, so a ratio computed as a quotient of probabilities lands on the bound too (that
    quotient's rounding elsewhere is the extreme_ratios clause's business)."""
    return d.clone(), torch.zeros((), dtype=d.dtype)


# Equal widths: which width goes with which bound is the separate_widths clause's business. A bound that float32
# rounds into the interval is where a ratio compared in float64 keeps the rounded bound: the meeting of the open
# interval and the dtype of the bounds, rounded_endpoints' own check. So exact_endpoints takes widths whose bounds
# float32 rounds exactly or outward (float32 cases) and float32 rounds exactly or inward (float64 cases, where bounds
# built in float32 would keep an outward-rounded one), and endpoint_sweep leaves every exact endpoint out.
ENDPOINT_WIDTHS = {F32: [(0.1, 0.1), (0.35, 0.35), (0.25, 0.25)], F64: [(0.15, 0.15), (0.28, 0.28), (0.25, 0.25)]}
SWEEP_WIDTHS = [(0.2, 0.2), (0.3, 0.3)]
# float32's 0.8 lies above 0.8 and its 1.3 below 1.3: each is a ratio inside the interval of the exact bounds
INWARD_ROUNDED = [((0.2, 0.2), "low"), ((0.3, 0.3), "high")]


def _endpoint_batch(g: torch.Generator, dtype: torch.dtype, clip: tuple[float, float], sides: str = "both",
                    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """[B, L], every token valid (no padding: that is the padding check's business): log-ratios exactly on the
    logs of the bounds (`sides`: low, high or both) and one float inside each, one token surely kept, the others at
    random ratios in [0.5, 1.6], all at random positions, the others with random rollout log-probabilities, random
    advantages."""
    inf = torch.tensor(math.inf, dtype=dtype)
    d_low = exact_log(torch.tensor(1 - clip[0], dtype=dtype))
    d_high = exact_log(torch.tensor(1 + clip[1], dtype=dtype))
    special = [d_low, torch.nextafter(d_low, inf)] if sides != "high" else []
    special += [d_high, torch.nextafter(d_high, -inf)] if sides != "low" else []
    rows, cols = _randint(g, 2, 4), _randint(g, 4, 7)
    others = torch.log(torch.rand(rows * cols - len(special), generator=g, dtype=F64) * 1.1 + 0.5)
    others[0] = math.log(_uniform(g, 1 - clip[0] + 0.02, 1 + clip[1] - 0.02))  # one token surely kept
    rollout_others = -(torch.rand(len(others), generator=g, dtype=F64) * 2.95 + 0.05)
    pairs = [_exact_pair(d) for d in special]
    logp = torch.cat([torch.stack([p[0] for p in pairs]), (rollout_others + others).to(dtype)])
    rollout = torch.cat([torch.stack([p[1] for p in pairs]), rollout_others.to(dtype)])
    order = torch.randperm(rows * cols, generator=g)
    mask = torch.ones(rows, cols, dtype=torch.bool)
    return logp[order].reshape(rows, cols), rollout[order].reshape(rows, cols), mask, _signed(g, rows).to(dtype)


def exact_endpoints(g: torch.Generator) -> list[Call]:
    calls = []
    for dtype in DTYPES:
        for clip in ENDPOINT_WIDTHS[dtype]:
            logp, rollout, mask, adv = _endpoint_batch(g, dtype, clip)
            label = (f"{_name(dtype)} {list(logp.shape)}, widths {clip[0]:g}/{clip[1]:g}: ratios exactly on "
                     "1 - clip_low and 1 + clip_high, no padding")
            calls.append(weights_call(logp, rollout, mask, clip, label))
            calls.append(loss_call(logp, rollout, adv, mask, clip, label))
    return as_one(by_gradient(calls), "open interval")


def rounded_endpoints(g: torch.Generator) -> list[Call]:
    """float32 ratios exactly on a bound that float32 rounds into the interval: inside the exact bounds, on the
    bounds as logp's dtype holds them, so rejected."""
    calls = []
    for clip, side in INWARD_ROUNDED:
        logp, rollout, mask, adv = _endpoint_batch(g, F32, clip, side)
        label = (f"float32 {list(logp.shape)}, widths {clip[0]:g}/{clip[1]:g}: ratios exactly on the float32 "
                 f"{'1 - clip_low' if side == 'low' else '1 + clip_high'}, which float32 rounds inward, no padding")
        calls.append(weights_call(logp, rollout, mask, clip, label))
        calls.append(loss_call(logp, rollout, adv, mask, clip, label))
    return as_one(by_gradient(calls), "inward-rounded bounds")


def endpoint_sweep(g: torch.Generator) -> list[Call]:
    calls = []
    for dtype in DTYPES:
        for clip in SWEEP_WIDTHS:
            rows = []
            for bound in (1 - clip[0], 1 + clip[1]):
                window = _ulp_neighbours(torch.log(torch.tensor(bound, dtype=dtype)), 64)  # [129]
                # a ratio exactly on the bound is exact_endpoints' and rounded_endpoints' business
                rounded = float(torch.tensor(bound, dtype=dtype))
                window = window[torch.exp(window) != rounded][:120]  # [120]
                rows.append(window[torch.randperm(len(window), generator=g)])
            logp = torch.stack(rows)  # [2, 120], each row in an order drawn from g
            rollout = torch.zeros_like(logp)
            mask = torch.ones(logp.shape, dtype=torch.bool)
            label = f"{_name(dtype)}, widths {clip[0]:g}/{clip[1]:g}: every float within 64 ulps of log(bound)"
            calls.append(weights_call(logp, rollout, mask, clip, label))
    return calls


def _ratio_grid(ratios: list[float], dtype: torch.dtype, g: torch.Generator):
    """[2, n]: each row holds the given ratios in its own random order; one random token of each row is padding,
    so both responses have n - 1 valid tokens (a token mean and a mean of means agree)."""
    n = len(ratios)
    r = torch.tensor(ratios, dtype=F64)
    columns = torch.stack([r[torch.randperm(n, generator=g)] for _ in range(2)])  # [2, n]
    rollout = -(torch.rand(2, n, generator=g, dtype=F64) + 0.5)  # [2, n]
    logp = rollout + torch.log(columns)
    mask = torch.ones(2, n, dtype=torch.bool)
    for row in range(2):
        padded = _randint(g, 0, n - 1)
        mask[row, padded] = False
        logp[row, padded] = rollout[row, padded] + PAD_OUTSIDE  # finite padding no interval keeps
    return logp.to(dtype), rollout.to(dtype), mask, _signed(g, 2).to(dtype)


GRID = [0.55, 0.65, 0.75, 0.85, 0.95, 1.05, 1.15, 1.25, 1.4, 1.6]


def _grid_calls(logp: Tensor, rollout: Tensor, adv: Tensor, mask: Tensor, clip: tuple[float, float] | None,
                label: str, omit_widths: bool = False) -> list[Call]:
    """A weights call and a loss call on one ratio grid; the weights on a full mask (the padded token's ratio is
    rejected all the same), since zero weights on padding are the padding checks' business."""
    full = torch.ones_like(mask)
    return [weights_call(logp, rollout, full, clip, label, omit_widths=omit_widths),
            loss_call(logp, rollout, adv, mask, clip, label, omit_widths=omit_widths)]


def asymmetric_widths(g: torch.Generator) -> list[Call]:
    calls = []
    for dtype in DTYPES:
        for clip in [(0.1, 0.5), (0.4, 0.05), (0.3, 0.1)]:
            logp, rollout, mask, adv = _ratio_grid(GRID, dtype, g)
            label = f"{_name(dtype)}, widths {clip[0]:g}/{clip[1]:g}, ratios {GRID}"
            calls += _grid_calls(logp, rollout, adv, mask, clip, label)
    return by_gradient(calls)


def default_widths(g: torch.Generator) -> list[Call]:
    ratios = [0.7, 0.79, 0.81, 0.9, 1.1, 1.19, 1.21, 1.3]
    calls = []
    for dtype in DTYPES:
        logp, rollout, mask, adv = _ratio_grid(ratios, dtype, g)
        label = f"{_name(dtype)}, clip_low and clip_high omitted, ratios {ratios}"
        calls += _grid_calls(logp, rollout, adv, mask, None, label, omit_widths=True)
    return by_gradient(calls)


def padding_nan_inf(g: torch.Generator) -> list[Call]:
    calls = []
    for dtype in DTYPES:
        for pad_logp, pad_rollout in [(math.nan, math.nan), (math.inf, -math.inf), (-math.inf, math.nan),
                                      (math.nan, math.inf)]:
            logp, rollout, mask, adv = random_batch(g, (4, 6), dtype, padded=True)
            logp = torch.where(mask, logp, torch.tensor(pad_logp, dtype=dtype))
            rollout = torch.where(mask, rollout, torch.tensor(pad_rollout, dtype=dtype))
            label = f"{_name(dtype)} [4, 6], padding logp={pad_logp}, rollout_logp={pad_rollout}"
            calls += [weights_call(logp, rollout, mask, None, label), loss_call(logp, rollout, adv, mask, None, label)]
    return as_one(losses_judged_on(REACH_ASPECTS, calls), "non-finite padding")


def empty_row_nan_advantage(g: torch.Generator) -> list[Call]:
    calls = []
    for dtype in DTYPES:
        logp, rollout, mask, adv = random_batch(g, (4, 5), dtype)
        # every valid ratio inside the default interval: with nothing rejected, a denominator that counts only the
        # kept tokens is N all the same (that is denominator_counts_rejected's business), and the loss's
        # gradient here moves with the empty response's advantage alone
        inside = (torch.rand(mask.shape, generator=g, dtype=F64) * 0.2 - 0.1).to(dtype)
        rollout = torch.where(mask, logp - inside, rollout)
        row = _randint(g, 0, 3)
        mask[row] = False
        # the row's padding is finite and no interval keeps it: NaN padding is the padding checks' business, so a
        # loss that multiplies NaN padding by the mask fails there, and here only if the advantage reaches it
        logp[row] = rollout[row] + PAD_OUTSIDE
        adv[row] = math.nan
        label = f"{_name(dtype)} [4, 5], row {row} has no valid token (finite padding) and advantage NaN"
        # the loss alone: the row's zero weights are the padding checks' business
        calls.append(loss_call(logp, rollout, adv, mask, None, label))
    return losses_judged_on(REACH_ASPECTS, calls)


def _extreme_batch(g: torch.Generator, dtype: torch.dtype) -> tuple[Tensor, Tensor, Tensor, Tensor, float]:
    """[2, L], every token valid: two log-ratios that overflow exp, one that underflows, two tokens with equal
    log-probabilities below -1000 (ratio 1), the rest ordinary, at random positions."""
    least = 120.0 if dtype == F32 else 800.0  # exp overflows in this dtype from about 88.7 and 709.8 on
    big = [_uniform(g, least, 2.5 * least) for _ in range(3)]
    low = [_uniform(g, 0.05, 3.0) for _ in range(3)]
    deep = [-1000.0 - _uniform(g, 0.0, 50.0) for _ in range(2)]
    special = [(-low[0], -low[0] - big[0]), (-low[1], -low[1] - big[1]), (-big[2] - low[2], -low[2]),
               (deep[0], deep[0]), (deep[1], deep[1])]
    cols = _randint(g, 4, 7)
    others = 2 * cols - len(special)
    rollout_others = -(torch.rand(others, generator=g, dtype=F64) * 3 + 0.05)
    logp_others = rollout_others + torch.log(torch.rand(others, generator=g, dtype=F64) * 1.1 + 0.5)
    logp = torch.cat([torch.tensor([s[0] for s in special], dtype=F64), logp_others])
    rollout = torch.cat([torch.tensor([s[1] for s in special], dtype=F64), rollout_others])
    order = torch.randperm(2 * cols, generator=g)
    mask = torch.ones(2, cols, dtype=torch.bool)
    shaped = (logp[order].reshape(2, cols).to(dtype), rollout[order].reshape(2, cols).to(dtype))
    return *shaped, mask, _signed(g, 2).to(dtype), least


def extreme_ratios(g: torch.Generator) -> list[Call]:
    calls = []
    for dtype in DTYPES:
        logp, rollout, mask, adv, least = _extreme_batch(g, dtype)
        label = (f"{_name(dtype)} {list(logp.shape)}: log-ratios above {least:g} (exp overflows) and below "
                 f"-{least:g} (underflows), and logp = rollout_logp below -1000 (ratio 1)")
        calls += [weights_call(logp, rollout, mask, None, label), loss_call(logp, rollout, adv, mask, None, label)]
    return by_gradient(calls)


def _constant_input(g: torch.Generator, other: str) -> list[Call]:
    """Which inputs receive gradient, never its values, with `other` requiring grad beside logp; its calls count as
    one case. Every valid token has logp = -1, where a ratio left attached adds -A r logp / N to the explicit
    factor's -A r / N and cancels it exactly (advantages and 1 / N are powers of two): a loss whose gradient flows
    through the weights gives logp none at all. Each batch comes with a still one, where no input receives
    gradient: the responses with valid tokens have advantage 0, and one response without any has an advantage that
    is not, over finite padding whose ratio no interval keeps. An answer whose gradient reaches logp whatever the
    inputs (the input echoed back, the raw ratio with neither mask nor interval) fails; both shapes are drawn per
    seed, so no public observation answers a graded call."""
    calls = []
    for dtype in DTYPES:
        for still in (False, True):
            logp, rollout, mask, adv = _unit_logp_batch(g, dtype, still)
            note = (
                "one response without a valid token, every other one with advantage 0"
                if still
                else "logp = -1 on every valid token"
            )
            label = f"{_name(dtype)} {list(logp.shape)}, {note}; logp and {other} require grad"
            calls.append(loss_call(logp, rollout, adv, mask, None, label, requires_grad=("logp", other)))
    return as_one(calls, f"{other} constant")


def rollout_detached(g: torch.Generator) -> list[Call]:
    """A function that cannot take a rollout_logp that requires grad (it edits it in place) fails here."""
    return _constant_input(g, "rollout_logp")


def advantages_detached(g: torch.Generator) -> list[Call]:
    return _constant_input(g, "advantages")


def _unit_logp_batch(g: torch.Generator, dtype: torch.dtype, still: bool) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """logp, rollout_logp, bool mask, advantages at a shape drawn from `g`: 2^k valid tokens, left-aligned,
    logp = -1 on each, ratios inside and outside the default interval (at least one inside), finite padding
    whose ratio no interval keeps, advantages of +-0.5, 1 or 2. Every response has a valid token, except, when
    `still`, one response that has none and keeps its advantage while every other advantage is 0."""
    rows = _randint(g, 4, 12)
    cols = _randint(g, rows + 1, 240 // rows)  # one of about 300 shapes
    valid = 2 ** int(math.log2(rows * cols * 3 // 4))
    lengths = torch.ones(rows, dtype=torch.long)
    empty = _randint(g, 0, rows - 1) if still else None
    if empty is not None:
        lengths[empty] = 0
    while int(lengths.sum()) < valid:
        room = ((lengths < cols) & (lengths > 0)).nonzero().flatten()
        lengths[room[_randint(g, 0, len(room) - 1)]] += 1
    mask = torch.arange(cols)[None, :] < lengths[:, None]  # [B, L]
    inside = torch.rand(rows, cols, generator=g, dtype=F64) * 0.3 + 0.85  # [B, L], within (0.8, 1.2)
    outside = torch.where(torch.rand(rows, cols, generator=g) < 0.5, inside - 0.45, inside + 0.45)
    ratio = torch.where(torch.rand(rows, cols, generator=g) < 0.6, inside, outside)
    ratio[0 if empty != 0 else 1, 0] = inside[0, 0]
    logp = torch.full((rows, cols), -1.0, dtype=F64)
    pad = PAD_OUTSIDE * (1 - 2 * ((torch.arange(rows)[:, None] + torch.arange(cols)[None, :]) % 2))  # [B, L]
    rollout = torch.where(mask, logp - torch.log(ratio), logp - pad)
    scale = torch.tensor([0.5, 1.0, 2.0], dtype=F64)[torch.randint(0, 3, (rows,), generator=g)]
    adv = torch.where(torch.rand(rows, generator=g) < 0.5, -scale, scale)
    if empty is not None:
        adv = torch.where(torch.arange(rows) == empty, adv, torch.zeros((), dtype=F64))
    return logp.to(dtype), rollout.to(dtype), mask, adv.to(dtype)


def both_signs_rejected(g: torch.Generator) -> list[Call]:
    """Both sides of the interval under both signs of A: a rejection that depends on the sign (PPO-clip's
    zero-gradient side only) keeps some out-of-interval tokens here, whatever the seed."""
    calls = []
    for dtype in DTYPES:
        logp, rollout, mask, adv = _ratio_grid(GRID, dtype, g)
        adv = adv.abs() * torch.tensor([1.0, -1.0], dtype=dtype)[torch.randperm(2, generator=g)]
        label = f"{_name(dtype)}, ratios {GRID}, one response with A > 0 and one with A < 0"
        calls.append(loss_call(logp, rollout, adv, mask, None, label))
    return calls


def denominator_counts_rejected(g: torch.Generator) -> list[Call]:
    calls = []
    for dtype in DTYPES:
        for share in (0.5, 0.8):
            logp, rollout, mask, adv = random_batch(g, (4, 10), dtype, spread=0.05)
            far = torch.rand(4, 10, generator=g) < share
            i, t = mask.nonzero()[_randint(g, 0, int(mask.sum()) - 1)].tolist()
            far[i, t] = False
            rollout[i, t] = logp[i, t] - 0.01  # one valid token surely kept
            rollout = torch.where(far, logp - 1.0, rollout)
            label = f"{_name(dtype)} [4, 10], about {share:.0%} of valid tokens rejected by the ratio test"
            calls.append(loss_call(logp, rollout, adv, mask, None, label))
    return by_gradient(calls)


def token_mean(g: torch.Generator) -> list[Call]:
    """Responses of very different lengths with different advantages, where a mean of means differs."""
    calls = []
    for dtype in DTYPES:
        cols = _randint(g, 12, 24)
        logp, rollout, _, _ = random_batch(g, (3, cols), dtype, spread=0.05)
        lengths = torch.tensor([_randint(g, 1, 3), cols, _randint(g, 4, cols - 4)])
        lengths = lengths[torch.randperm(3, generator=g)]
        mask = torch.arange(cols)[None, :] < lengths[:, None]  # [3, L]
        adv = _signed(g, 3, 0.5, 3.0).to(dtype)
        label = f"{_name(dtype)} [3, {cols}], responses of {', '.join(map(str, lengths.tolist()))} valid tokens"
        calls.append(loss_call(logp, rollout, adv, mask, None, label))
    return by_gradient(calls)


def mixed_mask_dtype(g: torch.Generator) -> list[Call]:
    calls = []
    for kind in ("float64", "int32", "uint8"):
        logp, rollout, mask, adv = random_batch(g, (3, 6), F32, shortest=6)  # no padding: the padding checks'
        label = f"float32 logp with a {kind} mask"
        m = _mask_as(mask, kind)
        calls += [weights_call(logp, rollout, m, None, label), loss_call(logp, rollout, adv, m, None, label)]
    return as_one(by_gradient(calls), "mixed mask dtype")


def non_contiguous(g: torch.Generator) -> list[Call]:
    calls = []
    for dtype in DTYPES:
        logp, rollout, mask, adv = random_batch(g, (6, 8), dtype, shortest=8)  # no padding: the padding checks'
        label = f"{_name(dtype)}: transposed [6, 8] views and a strided advantages vector"
        lp, rl, m = logp.t().contiguous().t(), rollout.t().contiguous().t(), mask.t().contiguous().t()
        a = torch.stack([adv, adv], dim=1)[:, 0]
        assert not lp.is_contiguous() and not a.is_contiguous()
        calls += [weights_call(lp, rl, m, None, label), loss_call(lp, rl, a, m, None, label)]
        sliced = random_batch(g, (5, 16), dtype, shortest=16)
        lp2, rl2, m2 = (t[:, ::2] for t in sliced[:3])
        calls.append(weights_call(lp2, rl2, m2, (0.3, 0.3), f"{_name(dtype)}: every second column of [5, 16]"))
    return by_gradient(calls)


Batch = tuple[Tensor, Tensor, Tensor, Tensor]  # logp, rollout_logp, mask, advantages
Change = Callable[[Batch], dict[str, Any]]  # the arguments that replace valid ones


def _bad_arguments(g: torch.Generator) -> list[tuple[str, Change]]:
    """(label, batch -> the arguments that replace valid ones) for each input the Errors clause rejects."""
    return [
        ("logp 1-D", lambda b: {"logp": b[0][0], "rollout_logp": b[1][0], "mask": b[2][0]}),
        ("logp 3-D", lambda b: {"logp": b[0][None], "rollout_logp": b[1][None], "mask": b[2][None]}),
        ("rollout_logp one column wider than logp", lambda b: {"rollout_logp": torch.cat([b[1], b[1][:, :1]], 1)}),
        ("rollout_logp [1, L] (broadcastable)", lambda b: {"rollout_logp": b[1][:1]}),
        ("mask one column narrower than logp", lambda b: {"mask": b[2][:, :-1]}),
        ("mask [1, L] (broadcastable)", lambda b: {"mask": b[2][:1]}),
        ("mask [B, 1] (broadcastable)", lambda b: {"mask": b[2][:, :1]}),
        ("clip_low = 0", lambda b: {"clip_low": 0.0}),
        ("clip_low = 1", lambda b: {"clip_low": 1.0}),
        *[(f"clip_low = {v:.3g}", lambda b, v=v: {"clip_low": v})
          for v in (-_uniform(g, 0.01, 0.5), 1 + _uniform(g, 0.01, 1.0))],
        ("clip_low = NaN", lambda b: {"clip_low": math.nan}),
        ("clip_high = 0", lambda b: {"clip_high": 0.0}),
        *[(f"clip_high = {v:.3g}", lambda b, v=v: {"clip_high": v}) for v in (-_uniform(g, 0.01, 0.5),)],
        ("clip_high = inf", lambda b: {"clip_high": math.inf}),
        ("clip_high = NaN", lambda b: {"clip_high": math.nan}),
    ]


BAD_ADVANTAGES = [
    ("advantages [B + 1]", lambda b: torch.cat([b[3], b[3][:1]])),
    ("advantages [B, 1]", lambda b: b[3][:, None]),
    ("advantages 0-dim", lambda b: b[3][0]),
    ("advantages [B, L]", lambda b: b[0].detach().clone()),
]


ERROR_FAMILIES = ("shapes", "advantages", "widths")


def _error_pairs(g: torch.Generator, family: str) -> list[tuple[str, str, Change]]:
    """(function, label, change) of every call the family's clause says must raise."""
    bad = [(label, change) for label, change in _bad_arguments(g) if label.startswith("clip_") == (family == "widths")]
    if family == "advantages":
        return [(LOSS, label, lambda b, bad=bad: {"advantages": bad(b)}) for label, bad in BAD_ADVANTAGES]
    return [(f, label, change) for label, change in bad for f in (WEIGHTS, LOSS)]


def _value_errors(g: torch.Generator, family: str) -> list[Call]:
    """Each call that must raise is grouped with a valid call of the same function, in an order drawn from g:
    raising on everything, or never, earns nothing.

    The shapes are drawn from a wide range, so a graded pair's shapes are almost never a public pair's: an answer
    copied from the public cases has the wrong shape, or a loss that no gradient connects to this call's logp (the
    valid loss call requires grad). The valid call's widths are equal: which width goes with which bound is the
    separate_widths clause's business, and a partner is judged on answering only."""
    calls = []
    for function, label, change in _error_pairs(g, family):
        batch = random_batch(g, (_randint(g, 2, 9), _randint(g, 25, 300)), F32)
        logp, rollout, mask, adv = batch
        base = {"logp": logp, "rollout_logp": rollout, "mask": mask}
        if function == LOSS:
            base["advantages"] = adv
        shape = f"batch [{logp.shape[0]}, {logp.shape[1]}]"
        calls.append(Call(function, {**base, **_widths(None), **change(batch)},
                          f"{function}: {label} ({shape}): must raise"))
        width = round(_uniform(g, 0.05, 0.5), 3)
        valid = f"{function}: valid {shape}, widths {width:g}/{width:g}: must not raise"
        if function == LOSS:
            partner = loss_call(logp, rollout, adv, mask, (width, width), "")
            calls.append(replace(partner, label=valid).as_partner())
        else:
            calls.append(Call(function, {**base, **_widths((width, width))}, valid).as_partner())
    return as_one(_shuffled(calls, g), f"bad {family}")


def value_errors_shapes(g: torch.Generator) -> list[Call]:
    return _value_errors(g, "shapes")


def value_errors_advantages(g: torch.Generator) -> list[Call]:
    return _value_errors(g, "advantages")


def value_errors_widths(g: torch.Generator) -> list[Call]:
    return _value_errors(g, "widths")


def valid_edge_widths(g: torch.Generator) -> list[Call]:
    # no ratio on a bound of any of these widths: a ratio exactly on a bound is exact_endpoints' business
    ratios = [0.0005, 0.01, 0.45, 0.9999995, 1.0, 1.5, 5.5, 7.0]
    calls = []
    for dtype in DTYPES:
        for clip in [(1e-6, 0.2), (0.999, 0.2), (0.2, 5.0), (0.5, 1e-6)]:
            logp, rollout, mask, adv = _ratio_grid(ratios, dtype, g)
            label = f"{_name(dtype)}, widths {clip[0]:g}/{clip[1]:g} (valid), ratios {ratios}"
            calls += _grid_calls(logp, rollout, adv, mask, clip, label)
    return by_gradient(calls)


def float64_precision(g: torch.Generator) -> list[Call]:
    """Ordinary float64 batches: weights and a loss computed in float64 agree with the reference to 1e-9, ones
    computed in float32 and cast back do not."""
    calls = []
    for index in range(2):
        logp, rollout, mask, adv = random_batch(g, (4, 8), F64, shortest=8)  # no padding: the padding checks'
        calls.append(weights_call(logp, rollout, mask, None, f"float64 arithmetic, batch {index}"))
        calls.append(loss_call(logp, rollout, adv, mask, None, f"float64 arithmetic, batch {index}"))
    return by_gradient(calls)
