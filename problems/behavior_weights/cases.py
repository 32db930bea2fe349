"""Case generators for behavior_weights: each takes a seeded torch.Generator and returns the calls to make.

Every T1-T2 case that returns a result mixes padding, tokens whose weight equals their ratio and tokens whose
weight differs from it, so no trivial answer (zeros, ones, the raw ratio echoed back, a clipfrac of 0 or 1)
matches a case by accident. Cases compared bitwise have 8 or 129 valid tokens: k/8 is exact and k/129 repeats
with period 14 in binary, so every faithful way of dividing the changed count by the valid count, in the
input dtype or in float64 then rounded, gives the same clipfrac.

Every call draws its inputs from the generator: an edge case keeps its edge (a ratio exactly on a bound, an
empty mask, an overflowing ratio) while the other tokens, their positions, the rollout log-probabilities and
the ratios around the edge change from seed to seed, so the public seed's cases (shipped to learners) never
answer a graded one. NaN and infinite padding appear only where a check is about padding or mutation. A call
whose right answer does not depend on its inputs (it must raise, its mask is empty) is grouped with one whose
answer does, so a constant answer earns nothing.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from decimal import Decimal, getcontext
from typing import Any

import torch
from torch import Tensor

from grader.author import as_one
from grader.judge.cases import Call

F32, F64, BF16 = torch.float32, torch.float64, torch.bfloat16
DTYPES = (F32, F64)
FUNCTION = "behavior_weights"
TIS, ICEPOP = "tis", "icepop"
MODES = (TIS, ICEPOP)
MASK_KINDS = ("bool", "float32", "int64", "float64", "uint8", "int32")
NON_FINITE = (math.nan, math.inf, -math.inf)

Bounds = dict[str, float | None]  # the low/high keyword arguments a call passes; {} passes neither


def _mask_as(mask: Tensor, kind: str) -> Tensor:
    return mask if kind == "bool" else mask.to(getattr(torch, kind))


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _bounds_text(bounds: Bounds) -> str:
    if not bounds:
        return "low and high omitted"
    return ", ".join(f"{key}={value:g}" if value is not None else f"{key}=None" for key, value in bounds.items())


def call(train: Tensor, rollout: Tensor, mask: Tensor, mode: str, bounds: Bounds, label: str,
         requires_grad: tuple[str, ...] = (), hidden: bool = False, group: str | None = None) -> Call:
    kwargs = {"train_logp": train, "rollout_logp": rollout, "mask": mask, "mode": mode, **bounds}
    return Call(FUNCTION, kwargs, f"{mode}: {label}", requires_grad=requires_grad, hidden=hidden, group=group)


def _uniform(g: torch.Generator, low: float, high: float) -> float:
    return low + (high - low) * float(torch.rand((), generator=g, dtype=F64))


def _randint(g: torch.Generator, low: int, high: int) -> int:
    """An int in [low, high], both included."""
    return int(torch.randint(low, high + 1, (), generator=g))


def _shuffled(calls: list[Call], g: torch.Generator) -> list[Call]:
    """The calls in an order drawn from `g`: a call's position says nothing about what it must return."""
    return [calls[i] for i in torch.randperm(len(calls), generator=g).tolist()]


def _pad_non_finite(x: Tensor, mask: Tensor, g: torch.Generator) -> Tensor:
    """x with every padded position replaced by NaN, +inf or -inf drawn at random, the first one NaN."""
    picks = torch.randint(0, len(NON_FINITE), x.shape, generator=g)  # [B, L]
    padded = mask == 0
    first = padded.nonzero()[:1].tolist()
    if first:
        picks[tuple(first[0])] = 0
    return torch.where(padded, torch.tensor(NON_FINITE, dtype=x.dtype)[picks], x)


def resolved(mode: str, bounds: Bounds) -> tuple[float, float]:
    low, high = bounds.get("low"), bounds.get("high")
    default_low, default_high = (0.0, 2.0) if mode == TIS else (0.5, 2.0)
    return (default_low if low is None else low), (default_high if high is None else high)


NEUTRAL_BOUNDS: dict[str, Bounds] = {TIS: {"low": 0.0, "high": 2.0}, ICEPOP: {"low": 0.5, "high": 2.0}}


def neutral(mode: str) -> Bounds:
    """The mode's default bounds passed explicitly: a check about something else never depends on the defaults."""
    return dict(NEUTRAL_BOUNDS[mode])


def random_batch(g: torch.Generator, shape: tuple[int, int], dtype: torch.dtype, mode: str, bounds: Bounds,
                 pad_value: float | str | None = None, spread: float = 0.7, full: bool = False,
                 ) -> tuple[Tensor, Tensor, Tensor]:
    """train_logp, rollout_logp and a bool mask; some valid token keeps its ratio and some does not.

    Padding is ragged unless `full`; `pad_value` None leaves random log-ratios on it, any float that value in
    train_logp, and NEUTRAL_PAD a log-ratio that underflows exp to 0 (see `_neutral_padding`) on rows that all
    hold as many valid tokens, so that neither a padding convention nor a per-response clipfrac shows."""
    rows, cols = shape
    rollout = -(torch.rand(shape, generator=g, dtype=F64) * 4 + 0.05)  # [B, L]
    log_ratio = torch.randn(shape, generator=g, dtype=F64) * spread  # [B, L]
    if full:
        lengths = torch.full((rows,), cols)
    elif pad_value == NEUTRAL_PAD:  # every row as long: the share per response is the share of the batch
        lengths = torch.full((rows,), _randint(g, max(1, cols // 2), cols))
    else:
        lengths = torch.randint(0, cols + 1, (rows,), generator=g)
    mask = torch.arange(cols)[None, :] < lengths[:, None]  # [B, L], ragged right padding
    flat = mask.reshape(-1)
    if int(flat.sum()) < 3:  # tiny shapes: make the first three positions valid
        flat[:3] = True
        mask = flat.reshape(shape)
    valid = mask.nonzero()
    low, high = resolved(mode, bounds)
    # three distinct valid tokens at random positions: no position's answer is the same from seed to seed
    (i0, t0), (i1, t1), (i2, t2) = valid[torch.randperm(len(valid), generator=g)[:3]].tolist()
    log_ratio[i0, t0] = math.log(_uniform(g, 0.95, 1.15))  # inside every interval used here: weight = ratio
    log_ratio[i1, t1] = math.log(high) + 0.7  # above the interval: weight != ratio
    if low > 0:
        log_ratio[i2, t2] = math.log(low) - 0.7  # below the interval
    train = rollout + log_ratio
    if pad_value == NEUTRAL_PAD:
        train = _neutral_padding(train, rollout, mask, g)
    elif isinstance(pad_value, float):
        train = torch.where(mask, train, torch.full_like(train, pad_value))
    return train.to(dtype), rollout.to(dtype), mask


NEUTRAL_PAD = "neutral"  # random_batch's pad_value for padding that no padding convention can tell apart


def _neutral_padding(train: Tensor, rollout: Tensor, mask: Tensor, g: torch.Generator) -> Tensor:
    """train with every padded position set to a finite log-ratio below -800: its ratio underflows to 0 in every
    dtype, so a weight left on the padding is 0 under ICE-POP and under TIS with low = 0, and a check about
    something else does not charge the padding convention (owned by oracle_padded and padding_nan_inf)."""
    deep = rollout - 800.0 - torch.rand(train.shape, generator=g, dtype=F64) * 100  # [B, L]
    return torch.where(mask, train, deep)


RANDOM_SHAPES = [(3, 7), (5, 5), (1, 9), (6, 1), (2, 2), (8, 33), (16, 64), (64, 256)]
# Explicit bounds only: the defaults, the mask dtypes and the padding conventions own checks of their own, so the
# formula's batches keep them at a neutral background (both bounds given, a bool mask, no padding).
RANDOM_BOUNDS: dict[str, list[Bounds]] = {
    TIS: [{"low": 0.0, "high": 2.0}, {"low": 0.0, "high": 1.5}, {"low": 0.5, "high": 2.0}, {"low": 0.8, "high": 1.25},
          {"low": 0.0, "high": 3.0}, {"low": 0.25, "high": 2.0}, {"low": 0.0, "high": 1.2}],
    ICEPOP: [{"low": 0.5, "high": 2.0}, {"low": 0.8, "high": 1.2}, {"low": 0.2, "high": 5.0}, {"low": 0.0, "high": 1.5},
             {"low": 0.5, "high": 3.0}, {"low": 0.7, "high": 2.0}, {"low": 0.9, "high": 2.0}],
}


def _random_configs(g: torch.Generator, mode: str, padded: bool) -> Iterator[Call]:
    options = RANDOM_BOUNDS[mode]
    for index, shape in enumerate(RANDOM_SHAPES):
        for dtype in DTYPES:
            bounds = options[(2 * index + (dtype == F64)) % len(options)]
            if padded:  # ragged rows whose padding holds random finite log-ratios: weight 0 there, never counted
                train, rollout, mask = random_batch(g, shape, dtype, mode, bounds)
                padding = "ragged rows, random finite padding"
            else:
                train, rollout, mask = random_batch(g, shape, dtype, mode, bounds, full=True)
                padding = "no padding"
            label = f"{_name(dtype)} {list(shape)}, {_bounds_text(bounds)}, {padding}"
            yield call(train, rollout, mask, mode, bounds, label, hidden=True)


def random_tis(g: torch.Generator) -> list[Call]:
    return list(_random_configs(g, TIS, padded=False))


def random_icepop(g: torch.Generator) -> list[Call]:
    return list(_random_configs(g, ICEPOP, padded=False))


def random_padded(g: torch.Generator) -> list[Call]:
    """Both modes on ragged batches: what varies is the padding alone, finite and owned by padding_zeroed."""
    calls = [c for mode in MODES for c in _random_configs(g, mode, padded=True)]
    # every second configuration: half the batches of the formula checks, both modes and dtypes
    return as_one(calls[::2], "padding")


# ---------------------------------------------------------------- T0 contracts


def contract(g: torch.Generator) -> list[Call]:
    calls = []
    plan = [(F32, (3, 5)), (F64, (4, 4)), (F32, (1, 6)), (F64, (7, 2)), (BF16, (2, 8))]
    for mode in MODES:
        for dtype, shape in plan:
            train, rollout, mask = random_batch(g, shape, dtype, mode, neutral(mode), pad_value=NEUTRAL_PAD)
            calls.append(call(train, rollout, mask, mode, neutral(mode), f"{_name(dtype)} {list(shape)}, "
                              f"{_bounds_text(neutral(mode))}"))
    return calls


def contract_grad(g: torch.Generator) -> list[Call]:
    calls = []
    for mode in MODES:
        for dtype in DTYPES:
            train, rollout, mask = random_batch(g, (3, 5), dtype, mode, neutral(mode), pad_value=NEUTRAL_PAD)
            calls.append(call(train, rollout, mask, mode, neutral(mode), f"{_name(dtype)}, train_logp and rollout_logp "
                              "require grad", requires_grad=("train_logp", "rollout_logp")))
    return calls


def empty_mask(g: torch.Generator) -> list[Call]:
    """Every empty-mask call is grouped with a call of the same mode, dtype and shape whose mask is not empty.

    The padding of an empty call is finite with ratios that underflow to 0 (see `_neutral_padding`): NaN and inf
    padding is the padding check's business, so what varies here is the emptiness alone."""
    calls = []
    for mode in MODES:
        for index, dtype in enumerate([F32, F64, F32]):
            shape = (_randint(g, 2, 5), _randint(g, 3, 7))
            empty = torch.zeros(shape, dtype=torch.bool)
            rollout = -(torch.rand(shape, generator=g, dtype=F64) * 4 + 0.05)  # [B, L]
            train = _neutral_padding(rollout, rollout, empty, g)
            group = f"{mode} {_name(dtype)} pair {index}"
            label = f"{_name(dtype)} {list(shape)}"
            calls.append(call(train.to(dtype), rollout.to(dtype), empty, mode, neutral(mode),
                              f"{label}, every token masked", group=group))
            filled = random_batch(g, shape, dtype, mode, neutral(mode), pad_value=NEUTRAL_PAD)
            calls.append(call(*filled, mode, neutral(mode),
                              f"{label}, valid tokens: the partner of an empty-mask case", group=group).as_partner())
    return _shuffled(calls, g)


def mutation(g: torch.Generator) -> list[Call]:
    """NaN/inf padding, where an in-place clean-up (`nan_to_num_`, `x[~mask] = 0`) shows as a mutation."""
    calls = []
    for mode in MODES:
        for dtype in DTYPES:
            shape = (_randint(g, 3, 5), _randint(g, 4, 8))
            train, rollout, mask = random_batch(g, shape, dtype, mode, neutral(mode))
            if bool(mask.all()):
                mask[-1, -1] = False
            train, rollout = _pad_non_finite(train, mask, g), _pad_non_finite(rollout, mask, g)
            label = f"{_name(dtype)} {list(shape)} with NaN/inf padding"
            calls.append(call(train, rollout, mask, mode, neutral(mode), label))
            calls.append(call(train.t().contiguous().t(), rollout, mask, mode, neutral(mode),
                              label + ", column-major train_logp"))
    return calls


# ---------------------------------------------------------------- T2 edge cases


def _neighbours(x: Tensor, below: int, above: int) -> Tensor:
    """The consecutive floats of x's dtype from `below` steps under x to `above` steps over it."""
    down, up, current = [], [], x.clone()
    for _ in range(below):
        current = torch.nextafter(current, torch.tensor(-math.inf, dtype=x.dtype))
        down.append(current)
    current = x.clone()
    for _ in range(above):
        current = torch.nextafter(current, torch.tensor(math.inf, dtype=x.dtype))
        up.append(current)
    return torch.stack([*reversed(down), x, *up])


def exact_log(target: Tensor) -> Tensor:
    """A log-ratio d of target's dtype whose true exp(d) sits within 3/8 of an ulp of `target`.

    Any exp accurate to 1/8 ulp then rounds to `target` itself (bfloat16's exp is float32's, rounded: far
    more accurate than that); the assertions document that torch does.
    """
    getcontext().prec = 60
    dtype = target.dtype
    value = Decimal(float(target))
    up = Decimal(float(torch.nextafter(target, torch.tensor(math.inf, dtype=dtype)))) - value
    down = value - Decimal(float(torch.nextafter(target, torch.tensor(-math.inf, dtype=dtype))))
    candidates = _neighbours(torch.log(target.to(F64)).to(dtype), 16, 16)

    def ulps_off(d: float) -> Decimal:  # distance from target in ulps of the side it falls on
        error = Decimal(d).exp() - value
        return abs(error) / (up if error > 0 else down)

    best = min(candidates.tolist(), key=ulps_off)
    d = torch.tensor(best, dtype=dtype)
    assert ulps_off(best) < Decimal(3) / 8, f"no log lands well inside the rounding of {target}"
    assert torch.exp(d) == target, f"torch.exp({best}) != {float(target)} in {dtype}"
    return d


def _step(x: Tensor, toward: float) -> Tensor:
    return torch.nextafter(x, torch.tensor(toward, dtype=x.dtype))


def _exact_pair(d: Tensor, g: torch.Generator) -> tuple[Tensor, Tensor]:
    """train_logp, rollout_logp of d's dtype, rollout drawn at random, with train - rollout == d exactly."""
    rollout = -(torch.rand(512, generator=g, dtype=F64) * 2.95 + 0.05).to(d.dtype)  # candidates
    train = d + rollout
    exact = ((train - rollout) == d).nonzero()
    if len(exact) == 0:  # never seen: each candidate is exact with a probability of a few percent at least
        return d.clone(), torch.zeros((), dtype=d.dtype)
    first = int(exact[0])
    return train[first], rollout[first]


ENDPOINT_BOUNDS = [(0.8, 1.2), (0.5, 1.5), (0.7, 1.3)]
# float64 takes one pair of bounds: its endpoints are the same convention, and a float64 ratio computed in float32
# (the precision check's business) misses them bitwise
ENDPOINT_PLAN = [(F32, ENDPOINT_BOUNDS), (BF16, ENDPOINT_BOUNDS), (F64, ENDPOINT_BOUNDS[:1])]


ENDPOINT_SHAPES = ((2, 4), (4, 2), (1, 8), (8, 1))  # 8 tokens, every one valid


def _endpoint_batch(g: torch.Generator, dtype: torch.dtype, low: float, high: float,
                    ) -> tuple[Tensor, Tensor, Tensor]:
    """8 valid tokens and no padding (that is the padding check's business): a ratio exactly on each bound, the
    next ratio inside each, a random ratio inside the interval and one outside each bound, at random positions
    of a random shape, with random rollout log-probabilities."""
    low_t, high_t = torch.tensor(low, dtype=dtype), torch.tensor(high, dtype=dtype)
    exact = [exact_log(t) for t in (low_t, _step(low_t, math.inf), high_t, _step(high_t, -math.inf))]
    loose = [math.log(_uniform(g, 1.1 * low, 0.9 * high)) for _ in range(2)]
    loose += [math.log(low) - _uniform(g, 0.2, 0.9), math.log(high) + _uniform(g, 0.2, 0.9)]
    pairs = [_exact_pair(d, g) for d in exact]
    rollout_loose = -(torch.rand(len(loose), generator=g, dtype=F64) * 2.95 + 0.05)
    train = torch.cat([torch.stack([p[0] for p in pairs]), (rollout_loose + torch.tensor(loose, dtype=F64)).to(dtype)])
    rollout = torch.cat([torch.stack([p[1] for p in pairs]), rollout_loose.to(dtype)])
    shape = ENDPOINT_SHAPES[_randint(g, 0, len(ENDPOINT_SHAPES) - 1)]
    order = torch.randperm(8, generator=g)
    return train[order].reshape(shape), rollout[order].reshape(shape), torch.ones(shape, dtype=torch.bool)


def _exact_endpoints(g: torch.Generator, mode: str) -> list[Call]:
    calls = []
    for dtype, pairs in ENDPOINT_PLAN:
        for low, high in pairs:
            train, rollout, mask = _endpoint_batch(g, dtype, low, high)
            label = (f"{_name(dtype)} {list(train.shape)}, low={low:g}, high={high:g}: ratios exactly on low "
                     "and on high, no padding")
            calls.append(call(train, rollout, mask, mode, {"low": low, "high": high}, label))
    return calls


def exact_endpoints(g: torch.Generator) -> list[Call]:
    """ICE-POP keeps a ratio exactly on either bound, with its weight rho, and does not count it."""
    return _exact_endpoints(g, ICEPOP)


def exact_endpoints_tis(g: torch.Generator) -> list[Call]:
    """TIS leaves a ratio exactly on a bound as it is, and does not count it as clipped."""
    return _exact_endpoints(g, TIS)


# ICE-POP bounds whose float32 and bfloat16 roundings fall outside the interval (0.7, 0.9 and 0.65 round down,
# 1.2, 1.1 and 1.6 round up): a ratio exactly on the rounded bound is kept when compared in the input dtype and
# rejected when widened and compared with the unrounded bound, so every case of the sweep tells the two apart.
SWEEP_PLAN: list[tuple[Bounds, str]] = [({"low": 0.7, "high": 1.2}, "low"), ({"low": 0.7, "high": 1.2}, "high"),
                                        ({"low": 0.9, "high": 1.1}, "low"), ({"low": 0.65, "high": 1.6}, "high")]
SWEEP_DTYPES = (F32, BF16)


def endpoint_sweep(g: torch.Generator) -> list[Call]:
    calls = []
    for mode in (ICEPOP,):
        for dtype in SWEEP_DTYPES:
            for bounds, side in SWEEP_PLAN:
                low, high = resolved(mode, bounds)
                bound = torch.tensor(low if side == "low" else high, dtype=dtype)
                log_ratio = _neighbours(torch.log(bound.to(F64)).to(dtype), 64, 64)  # [129]
                train = log_ratio[torch.randperm(len(log_ratio), generator=g)][None, :]  # [1, 129], a random order
                rollout = torch.zeros_like(train)
                mask = torch.ones(train.shape, dtype=torch.bool)  # 129 valid tokens, no padding
                label = f"{_name(dtype)}, {_bounds_text(bounds)}: every log-ratio within 64 floats of log({side})"
                calls.append(call(train, rollout, mask, mode, bounds, label))
    return calls


def _ratio_grid(ratios: list[float], dtype: torch.dtype, g: torch.Generator, rows: int = 2,
                ) -> tuple[Tensor, Tensor, Tensor]:
    """[rows, n]: each row holds the given ratios in an order of its own, every token valid (padding is the padding
    check's business), with random rollout log-probabilities."""
    n = len(ratios)
    r = torch.tensor(ratios, dtype=F64)
    log_ratio = torch.log(torch.stack([r[torch.randperm(n, generator=g)] for _ in range(rows)]))  # [rows, n]
    rollout = -(torch.rand(rows, n, generator=g, dtype=F64) + 0.5)  # [rows, n]
    return (rollout + log_ratio).to(dtype), rollout.to(dtype), torch.ones(rows, n, dtype=torch.bool)


# A partner call is judged on answering only, so any answer of its shape passes, and a public call of another shape
# answers none. So the shapes of the calls a partner stands beside are drawn once per generator, from ranges wide
# enough that a graded seed's shape is seldom the public seed's: each error family's batches have one of its own
# two row counts and a width drawn from ERROR_COLUMNS, and the edge-bound grids keep their seven ratios per row over
# a number of rows drawn from EDGE_ROWS. Both miss every float32 or float64 shape of the cases whose shape is fixed
# (at most 16 wide, or [1, 129], or [8, 32]) and the edge grids' other [4, 7] and [5, 7] batches.
ERROR_ROWS = {"shape": (3, 6), "bound": (2, 5), "mode": (4, 7)}
ERROR_COLUMNS = (17, 70)
EDGE_ROWS = (6, 60)


DEFAULT_GRID = [0.3, 0.45, 0.55, 0.9, 1.0, 1.5, 1.9, 2.1, 3.0, 6.0]


def mode_defaults(g: torch.Generator) -> list[Call]:
    """Both bounds omitted or None."""
    return as_one(_defaults(g, ({}, {"low": None, "high": None})), "mode defaults")


def defaults_each_bound(g: torch.Generator) -> list[Call]:
    """One bound given, the other omitted: the given one is honoured and the other takes its own default."""
    # high given, low omitted: the ICE-POP default low stays 0.5, not 1 / high
    given = ({"low": None, "high": 1.6}, {"low": 0.4, "high": None}, {"high": 4.0}, {"low": 0.7})
    return as_one(_defaults(g, given), "default bounds")


def _defaults(g: torch.Generator, plan: tuple[Bounds, ...]) -> list[Call]:
    calls = []
    for mode in MODES:
        for dtype in DTYPES:
            for bounds in plan:
                train, rollout, mask = _ratio_grid(DEFAULT_GRID, dtype, g)
                label = f"{_name(dtype)}, {_bounds_text(bounds)}, ratios {DEFAULT_GRID}"
                calls.append(call(train, rollout, mask, mode, bounds, label))
    return calls


BOUNDS_GRID = [0.15, 0.3, 0.55, 0.75, 0.95, 1.0, 1.1, 1.35, 1.7, 2.6, 4.5]
# Under TIS every low is positive: with low = 0 a missing cap leaves every weight its ratio, which the raw ratio
# echoed back would match, so the check would charge a trivial answer for that misreading.
EXPLICIT_BOUNDS: dict[str, list[Bounds]] = {
    TIS: [{"low": 0.5, "high": 1.5}, {"low": 0.25, "high": 4.0}, {"low": 0.9, "high": 1.15}, {"low": 0.4, "high": 1.2},
          {"low": 0.7, "high": 2.0}, {"low": 0.2, "high": 1.6}],
    ICEPOP: [{"low": 0.5, "high": 1.5}, {"low": 0.25, "high": 4.0}, {"low": 0.9, "high": 1.15},
             {"low": 0.0, "high": 1.2}, {"low": 0.7, "high": 2.0}, {"low": 0.5, "high": 1.6}],
}


def bounds_honoured(g: torch.Generator) -> list[Call]:
    calls = []
    for mode in MODES:
        for dtype in DTYPES:
            for bounds in EXPLICIT_BOUNDS[mode]:
                train, rollout, mask = _ratio_grid(BOUNDS_GRID, dtype, g)
                label = f"{_name(dtype)}, {_bounds_text(bounds)}, ratios {BOUNDS_GRID}"
                calls.append(call(train, rollout, mask, mode, bounds, label))
    return as_one(calls, "separate bounds")


def padding_nan_inf(g: torch.Generator) -> list[Call]:
    calls = []
    for mode in MODES:
        for dtype in DTYPES:
            # every pair makes the padded log-ratio NaN (inf - inf included): what a mask multiplied in keeps
            for pad_train, pad_rollout in [(math.nan, math.nan), (math.inf, math.inf), (-math.inf, math.nan),
                                           (math.nan, math.inf)]:
                bounds: Bounds = {"low": 0.5, "high": 1.5}
                train, rollout, mask = random_batch(g, (4, 6), dtype, mode, bounds)
                train = torch.where(mask, train, torch.tensor(pad_train, dtype=dtype))
                rollout = torch.where(mask, rollout, torch.tensor(pad_rollout, dtype=dtype))
                label = f"{_name(dtype)} [4, 6], padding train_logp={pad_train}, rollout_logp={pad_rollout}"
                calls.append(call(train, rollout, mask, mode, bounds, label))
    return as_one(calls, "non-finite padding")


def _extreme_batch(g: torch.Generator, dtype: torch.dtype) -> tuple[Tensor, Tensor, Tensor, float]:
    """[2, L], every token valid: two log-ratios that overflow exp, one that underflows to 0, one token with equal
    log-probabilities below -1000 (ratio 1), the others at random log-ratios in [-2.5, 5], at random positions."""
    least = 120.0 if dtype == F32 else 800.0  # exp overflows in this dtype from about 88.7 and 709.8 on
    big = [_uniform(g, least, 2.5 * least) for _ in range(3)]
    shift = [_uniform(g, 0.05, 3.0) for _ in range(3)]
    deep = -1000.0 - _uniform(g, 0.0, 50.0)
    special = [(-shift[0], -shift[0] - big[0]), (-shift[1], -shift[1] - big[1]), (-big[2] - shift[2], -shift[2]),
               (deep, deep)]
    cols = _randint(g, 4, 7)
    others = 2 * cols - len(special)
    rollout_others = -(torch.rand(others, generator=g, dtype=F64) * 3 + 0.05)
    train_others = rollout_others + torch.rand(others, generator=g, dtype=F64) * 7.5 - 2.5
    train = torch.cat([torch.tensor([s[0] for s in special], dtype=F64), train_others])
    rollout = torch.cat([torch.tensor([s[1] for s in special], dtype=F64), rollout_others])
    order = torch.randperm(2 * cols, generator=g)
    mask = torch.ones(2, cols, dtype=torch.bool)
    return train[order].reshape(2, cols).to(dtype), rollout[order].reshape(2, cols).to(dtype), mask, least


def extreme_ratios(g: torch.Generator) -> list[Call]:
    """TIS: an overflowing ratio gets weight high and counts."""
    return _extreme_calls(g, TIS)


def extreme_ratios_icepop(g: torch.Generator) -> list[Call]:
    """ICE-POP: an overflowing ratio gets 0 and counts; one that underflows to 0 keeps w = 0 = rho, not counted."""
    return _extreme_calls(g, ICEPOP)


def _extreme_calls(g: torch.Generator, mode: str) -> list[Call]:
    calls = []
    for _ in range(2):  # as many cases per mode as when both modes shared the check
        for dtype in DTYPES:
            for bounds in (neutral(mode), {"low": 0.5, "high": 1.5}):
                train, rollout, mask, least = _extreme_batch(g, dtype)
                label = (f"{_name(dtype)} {list(train.shape)}, {_bounds_text(bounds)}: log-ratios above {least:g} "
                         f"(exp overflows) and below -{least:g} (underflows to 0), train_logp = rollout_logp below "
                         "-1000 (ratio 1)")
                calls.append(call(train, rollout, mask, mode, bounds, label))
    return calls


CLIPFRAC_SIDES = {"below": ("low", "in", "in", "in", "low"), "above": ("in", "in", "in", "high", "high"),
                  "both": ("low", "in", "in", "in", "high")}
CLIPFRAC_REGIONS = {"low": (0.15, 0.4), "in": (0.6, 1.8), "high": (2.5, 6.0)}  # around bounds 0.5 and 2


def clipfrac_counts(g: torch.Generator) -> list[Call]:
    """Heavy padding and one-sided changes: clipfrac counts both sides, over valid tokens only.

    The padding is finite, with ratios that underflow to 0: the padding conventions are the padding checks'
    business."""
    calls = []
    for mode in MODES:
        for dtype in DTYPES:
            for side, regions in CLIPFRAC_SIDES.items():
                bounds: Bounds = {"low": 0.5, "high": 2.0}
                ratios = torch.tensor([_uniform(g, *CLIPFRAC_REGIONS[r]) for r in regions], dtype=F64)
                rollout = -(torch.rand(4, 8, generator=g, dtype=F64) * 3 + 0.05)  # [4, 8]: 5 valid tokens, 27 padded
                mask = torch.zeros(32, dtype=torch.bool)
                mask[torch.randperm(32, generator=g)[:5]] = True
                mask = mask.reshape(4, 8)
                train = _neutral_padding(rollout.clone(), rollout, mask, g)
                train[mask] = rollout[mask] + torch.log(ratios)
                label = (f"{_name(dtype)} [4, 8], 5 valid tokens of 32, ratios {[round(float(r), 2) for r in ratios]} "
                         f"(changes {side} the interval)")
                calls.append(call(train.to(dtype), rollout.to(dtype), mask, mode, bounds, label))
    return calls


def mask_dtypes(g: torch.Generator) -> list[Call]:
    calls = []
    for mode in MODES:
        for dtype, kind in [(F32, "float64"), (F32, "int32"), (F32, "uint8"), (F64, "float32"), (F64, "int64"),
                            (F32, "bool")]:
            # neutral padding: the padding conventions are the padding checks' business
            train, rollout, mask = random_batch(g, (3, 6), dtype, mode, neutral(mode), pad_value=NEUTRAL_PAD)
            label = f"{_name(dtype)} inputs with a {kind} mask"
            calls.append(call(train, rollout, _mask_as(mask, kind), mode, neutral(mode), label))
    return as_one(calls, "mask dtypes")


def non_contiguous(g: torch.Generator) -> list[Call]:
    calls = []
    for mode in MODES:
        for dtype in DTYPES:
            bounds = {"low": 0.0, "high": 1.5} if mode == TIS else {"low": 0.5, "high": 1.5}
            train, rollout, mask = random_batch(g, (6, 8), dtype, mode, bounds, pad_value=NEUTRAL_PAD)
            views = [t.t().contiguous().t() for t in (train, rollout, mask)]
            assert not views[0].is_contiguous()
            calls.append(call(*views, mode, bounds, f"{_name(dtype)}: transposed [6, 8] views"))
            narrow = random_batch(g, (5, 8), dtype, mode, neutral(mode), pad_value=NEUTRAL_PAD)
            # interleave with columns of other values, then take every second column: the batch again, strided
            train2, rollout2, mask2 = (torch.stack([t, t.flip(1)], dim=-1).reshape(5, 16)[:, ::2] for t in narrow)
            assert not train2.is_contiguous()
            calls.append(call(train2, rollout2, mask2, mode, neutral(mode),
                              f"{_name(dtype)}: every second column of [5, 16]"))
    return calls


Inputs = tuple[Tensor, Tensor, Tensor]  # train_logp, rollout_logp, mask
Change = Callable[[Inputs], dict[str, Any]]  # the arguments that replace valid ones

SHAPE_ERRORS: list[tuple[str, Change]] = [
    ("rollout_logp one column wider than train_logp", lambda b: {"rollout_logp": torch.cat([b[1], b[1][:, :1]], 1)}),
    ("rollout_logp [1, L] (broadcastable)", lambda b: {"rollout_logp": b[1][:1]}),
    ("mask one column narrower than train_logp", lambda b: {"mask": b[2][:, :-1]}),
    ("mask [B, 1] (broadcastable)", lambda b: {"mask": b[2][:, :1]}),
    ("mask [L] (broadcastable)", lambda b: {"mask": b[2][0]}),
]
BOUND_ERRORS: list[tuple[str, Bounds]] = [
    ("low = -0.1", {"low": -0.1}), ("low = NaN", {"low": math.nan}), ("low = -inf", {"low": -math.inf}),
    ("low = inf", {"low": math.inf, "high": 2.0}), ("high = inf", {"high": math.inf}),
    ("high = NaN", {"high": math.nan}), ("high = -inf", {"low": 0.0, "high": -math.inf}),
    ("low = 0, high = 0", {"low": 0.0, "high": 0.0}), ("high = -1", {"low": 0.0, "high": -1.0}),
    ("low = 1.5 > high = 1.2", {"low": 1.5, "high": 1.2}), ("low = 2.5 > default high", {"low": 2.5}),
]


def shape_errors(g: torch.Generator) -> list[Call]:
    """Mismatched or broadcastable shapes must raise."""
    bad = [(mode, label, change) for mode in MODES for label, change in SHAPE_ERRORS]
    return _must_raise(g, ERROR_ROWS["shape"], bad)


def bound_errors(g: torch.Generator) -> list[Call]:
    """Bounds that are not finite, negative, crossed (after the defaults) or a high of 0 must raise."""
    bad: list[tuple[str, str, Change]] = [
        (mode, label, lambda b, bounds=bounds: dict(bounds)) for mode in MODES for label, bounds in BOUND_ERRORS
    ]
    bad.append((ICEPOP, "high = 0.3 < default low 0.5", lambda b: {"high": 0.3}))
    return _must_raise(g, ERROR_ROWS["bound"], bad)


def mode_errors(g: torch.Generator) -> list[Call]:
    """A mode other than exactly "tis" or "icepop" must raise."""
    modes = ("mis", "TIS", "IcePop", "", "tis ", "ICEPOP")
    return _must_raise(g, ERROR_ROWS["mode"], [(mode, f"unknown mode {mode!r}", lambda b: {}) for mode in modes])


def _must_raise(g: torch.Generator, rows: tuple[int, int], bad: list[tuple[str, str, Change]]) -> list[Call]:
    """Each call that must raise is grouped with a valid call in the same mode, in an order drawn from g:
    raising on everything, or never, earns nothing. Every batch has the shape drawn once, rows from `rows`."""
    calls = []
    shape = (rows[_randint(g, 0, 1)], _randint(g, *ERROR_COLUMNS))
    for index, (mode, label, change) in enumerate(bad):
        group = f"pair {index}"
        valid_mode = mode if mode in MODES else MODES[index % 2]
        inputs = random_batch(g, shape, F32, valid_mode, {}, pad_value=NEUTRAL_PAD)
        base = {"train_logp": inputs[0], "rollout_logp": inputs[1], "mask": inputs[2]}
        batch = f"batch {list(inputs[0].shape)}"
        prefix = f"{mode}: " if mode in MODES else ""
        calls.append(Call(FUNCTION, {**base, "mode": mode, **change(inputs)}, f"{prefix}{label} ({batch}): must raise",
                          group=group))
        low = _uniform(g, 0.0, 0.9) if valid_mode == TIS else _uniform(g, 0.1, 0.9)
        bounds: Bounds = {"low": round(low, 3), "high": round(_uniform(g, 1.1, 3.0), 3)}
        calls.append(Call(FUNCTION, {**base, "mode": valid_mode, **bounds},
                          f"{valid_mode}: valid {batch}, {_bounds_text(bounds)}: must not raise",
                          group=group).as_partner())
    return _shuffled(calls, g)


EDGE_GRID = [1e-7, 0.5, 0.9995, 1.0, 1.0005, 2.0, 9e6]
EDGE_BOUNDS: list[Bounds] = [{"low": 1.0, "high": 1.0}, {"low": 0.0, "high": 1e-6}, {"low": 0.0, "high": 1e6},
                             {"low": 0.999, "high": 1.001}, {"low": 0, "high": 2}]


def valid_edge_bounds(g: torch.Generator) -> list[Call]:
    """Under TIS, low = high = 1 sets every weight to 1 and a tiny high sets every weight within tolerance of 0,
    whatever the inputs: each of those calls counts together with a call two bounds further, whose answer
    depends on them."""
    calls = []
    rows = _randint(g, *EDGE_ROWS)
    for mode in MODES:
        for dtype in DTYPES:
            for index, bounds in enumerate(EDGE_BOUNDS):
                train, rollout, mask = _ratio_grid(EDGE_GRID, dtype, g, rows)
                label = f"{_name(dtype)}, {_bounds_text(bounds)} (valid), ratios {EDGE_GRID}"
                group = f"{mode} {_name(dtype)} pair {index % 2}" if index < 4 else None
                made = call(train, rollout, mask, mode, bounds, label, group=group)
                # the partners of the constant answers are judged on answering, not on their values
                calls.append(made.as_partner() if index in (2, 3) else made)
    return calls


def bfloat16_inputs(g: torch.Generator) -> list[Call]:
    calls = []
    for mode in MODES:
        plan: list[tuple[tuple[int, int], Bounds]] = [((4, 16), {"low": 0.8, "high": 1.2}), ((8, 32), neutral(mode)),
                                                      ((3, 64), {"low": 0.5, "high": 1.5})]
        for shape, bounds in plan:
            # no padding: under TIS a bound low > 0 would show a weight left on the padding
            train, rollout, mask = random_batch(g, shape, BF16, mode, bounds, spread=0.3, full=True)
            # two valid tokens whose ratio is exactly the rounded low and the rounded high
            low, high = resolved(mode, bounds)
            for column, bound in ((1, low), (2, high)):
                if bound > 0:
                    train[0, column] = exact_log(torch.tensor(bound, dtype=BF16))
                    rollout[0, column], mask[0, column] = 0.0, True
            label = f"bfloat16 {list(shape)}, {_bounds_text(bounds)}, ratios exactly on the bounds"
            calls.append(call(train, rollout, mask, mode, bounds, label))
    return calls


def float64_precision(g: torch.Generator) -> list[Call]:
    """Ordinary float64 batches in each mode: weights computed in float64 agree with the reference to 1e-9,
    weights computed in float32 and cast back do not. 27 valid tokens: a share k/27 is not a float32 number, so a
    share divided in float32 shows too."""
    calls = []
    for mode in MODES:
        train, rollout, mask = random_batch(g, (3, 9), F64, mode, neutral(mode), full=True)
        calls.append(call(train, rollout, mask, mode, neutral(mode), "float64 arithmetic, 27 valid tokens"))
    return calls
