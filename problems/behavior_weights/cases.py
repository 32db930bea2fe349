"""Case generators for behavior_weights: each takes a seeded torch.Generator and returns the calls to make.

Every T1-T2 case that returns a result mixes padding, tokens whose weight equals their ratio and tokens whose
weight differs from it, so no trivial answer (zeros, ones, the raw ratio echoed back, a clipfrac of 0 or 1)
matches a case by accident. Cases compared bitwise have 8 or 129 valid tokens: k/8 is exact and k/129 repeats
with period 14 in binary, so every faithful way of dividing the changed count by the valid count, in the
input dtype or in float64 then rounded, gives the same clipfrac.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from decimal import Decimal, getcontext

import torch
from torch import Tensor

from grader.cases import Call

F32, F64, BF16 = torch.float32, torch.float64, torch.bfloat16
DTYPES = (F32, F64)
FUNCTION = "behavior_weights"
TIS, ICEPOP = "tis", "icepop"
MODES = (TIS, ICEPOP)
MASK_KINDS = ("bool", "float32", "int64", "float64", "uint8", "int32")

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
         requires_grad: tuple[str, ...] = (), hidden: bool = False) -> Call:
    kwargs = {"train_logp": train, "rollout_logp": rollout, "mask": mask, "mode": mode, **bounds}
    return Call(FUNCTION, kwargs, f"{mode}: {label}", requires_grad=requires_grad, hidden=hidden)


def resolved(mode: str, bounds: Bounds) -> tuple[float, float]:
    low, high = bounds.get("low"), bounds.get("high")
    default_low, default_high = (0.0, 2.0) if mode == TIS else (0.5, 2.0)
    return (default_low if low is None else low), (default_high if high is None else high)


def random_batch(g: torch.Generator, shape: tuple[int, int], dtype: torch.dtype, mode: str, bounds: Bounds,
                 pad_value: float | None = None, spread: float = 0.7) -> tuple[Tensor, Tensor, Tensor]:
    """train_logp, rollout_logp and a bool mask; some valid token keeps its ratio and some does not."""
    rows, cols = shape
    rollout = -(torch.rand(shape, generator=g, dtype=F64) * 4 + 0.05)  # [B, L]
    log_ratio = torch.randn(shape, generator=g, dtype=F64) * spread  # [B, L]
    lengths = torch.randint(0, cols + 1, (rows,), generator=g)
    mask = torch.arange(cols)[None, :] < lengths[:, None]  # [B, L], ragged right padding
    flat = mask.reshape(-1)
    if int(flat.sum()) < 3:  # tiny shapes: make the first three positions valid
        flat[:3] = True
        mask = flat.reshape(shape)
    valid = mask.nonzero().tolist()
    low, high = resolved(mode, bounds)
    (i0, t0), (i1, t1), (i2, t2) = valid[0], valid[-1], valid[len(valid) // 2]
    log_ratio[i0, t0] = 0.0  # ratio exactly 1, inside every interval used here: weight = ratio
    log_ratio[i1, t1] = math.log(high) + 0.7  # above the interval: weight != ratio
    if low > 0:
        log_ratio[i2, t2] = math.log(low) - 0.7  # below the interval
    train = rollout + log_ratio
    if pad_value is not None:
        train = torch.where(mask, train, torch.full_like(train, pad_value))
    return train.to(dtype), rollout.to(dtype), mask


RANDOM_SHAPES = [(3, 7), (5, 5), (1, 9), (6, 1), (2, 2), (8, 33), (16, 64), (64, 256)]
RANDOM_BOUNDS: dict[str, list[Bounds]] = {
    TIS: [{}, {"low": 0.0, "high": 1.5}, {"low": 0.5, "high": 2.0}, {"low": 0.8, "high": 1.25},
          {"high": 3.0}, {"low": 0.25}, {"low": None, "high": 1.2}],
    ICEPOP: [{}, {"low": 0.8, "high": 1.2}, {"low": 0.2, "high": 5.0}, {"low": 0.0, "high": 1.5},
             {"high": 3.0}, {"low": 0.7}, {"low": 0.9, "high": None}],
}
PAD_VALUES = (None, math.nan, math.inf, -math.inf)


def _random_configs(g: torch.Generator, mode: str) -> Iterator[Call]:
    options = RANDOM_BOUNDS[mode]
    for index, shape in enumerate(RANDOM_SHAPES):
        for dtype in DTYPES:
            step = 2 * index + (dtype == F64)
            kind, bounds = MASK_KINDS[step % len(MASK_KINDS)], options[step % len(options)]
            pad = PAD_VALUES[step % len(PAD_VALUES)]
            pad_value = float(torch.randn(1, generator=g)) if pad is None else pad
            train, rollout, mask = random_batch(g, shape, dtype, mode, bounds, pad_value)
            label = f"{_name(dtype)} {list(shape)} {kind} mask, {_bounds_text(bounds)}, padding {pad_value:.3g}"
            yield call(train, rollout, _mask_as(mask, kind), mode, bounds, label, hidden=True)


def random_tis(g: torch.Generator) -> list[Call]:
    return list(_random_configs(g, TIS))


def random_icepop(g: torch.Generator) -> list[Call]:
    return list(_random_configs(g, ICEPOP))


# ---------------------------------------------------------------- T0 contracts


def contract(g: torch.Generator) -> list[Call]:
    calls = []
    plan = [(F32, "bool", (3, 5)), (F64, "float32", (4, 4)), (F32, "int64", (1, 6)), (F64, "bool", (7, 2)),
            (BF16, "uint8", (2, 8))]
    for mode in MODES:
        for dtype, kind, shape in plan:
            train, rollout, mask = random_batch(g, shape, dtype, mode, {})
            calls.append(call(train, rollout, _mask_as(mask, kind), mode, {}, f"{_name(dtype)} {list(shape)} "
                              f"{kind} mask"))
    return calls


def contract_grad(g: torch.Generator) -> list[Call]:
    calls = []
    for mode in MODES:
        for dtype in DTYPES:
            train, rollout, mask = random_batch(g, (3, 5), dtype, mode, {})
            calls.append(call(train, rollout, mask, mode, {}, f"{_name(dtype)}, train_logp and rollout_logp "
                              "require grad", requires_grad=("train_logp", "rollout_logp")))
    return calls


def empty_mask(g: torch.Generator) -> list[Call]:
    calls = []
    for mode in MODES:
        for dtype, kind in [(F32, "bool"), (F64, "float64"), (F32, "int32")]:
            nan = torch.full((3, 4), math.nan, dtype=dtype)
            mask = _mask_as(torch.zeros(3, 4, dtype=torch.bool), kind)
            calls.append(call(nan, nan.clone(), mask, mode, {}, f"{_name(dtype)} [3, 4], every token masked "
                              f"({kind} mask), padding NaN"))
    return calls


def mutation(g: torch.Generator) -> list[Call]:
    calls = []
    for mode in MODES:
        for dtype in DTYPES:
            train, rollout, mask = random_batch(g, (4, 6), dtype, mode, {}, pad_value=math.nan)
            label = f"{_name(dtype)} [4, 6] with NaN padding"
            calls.append(call(train, rollout, mask, mode, {}, label))
            calls.append(call(train.t().contiguous().t(), rollout, mask.to(dtype), mode, {},
                              label + ", column-major train_logp, float mask"))
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


def _with_rollout(log_ratio: Tensor, rollout: Tensor) -> tuple[Tensor, Tensor]:
    """train, rollout with train - rollout == log_ratio exactly in their dtype (rollout 0 where it would not be)."""
    train = log_ratio + rollout
    exact = (train - rollout) == log_ratio
    rollout = torch.where(exact, rollout, torch.zeros((), dtype=rollout.dtype))
    train = torch.where(exact, train, log_ratio)
    assert bool(((train - rollout == log_ratio) | log_ratio.isnan()).all())
    return train, rollout


ENDPOINT_BOUNDS: dict[str, list[tuple[float, float]]] = {
    TIS: [(0.8, 1.2), (0.5, 1.5), (0.7, 1.3)],
    ICEPOP: [(0.8, 1.2), (0.5, 1.5), (0.7, 1.3)],
}
ENDPOINT_DTYPES = (F32, F64, BF16)


def _endpoint_batch(dtype: torch.dtype, low: float, high: float) -> tuple[Tensor, Tensor, Tensor]:
    """[2, 5]: on a bound, the next ratio inside it, ratio 1, a ratio outside it, NaN padding; 8 valid tokens."""
    low_t, high_t = torch.tensor(low, dtype=dtype), torch.tensor(high, dtype=dtype)
    one, nan = torch.tensor(0.0, dtype=dtype), torch.tensor(math.nan, dtype=dtype)
    row0 = torch.stack([exact_log(low_t), exact_log(_step(low_t, math.inf)), one,
                        torch.tensor(math.log(low) - 0.5, dtype=dtype), nan])
    row1 = torch.stack([exact_log(high_t), exact_log(_step(high_t, -math.inf)), one,
                        torch.tensor(math.log(high) + 0.5, dtype=dtype), nan])
    log_ratio = torch.stack([row0, row1])  # [2, 5]
    rollout = torch.tensor([[-0.5, -0.5, -1.0, -2.0, -1.0], [-0.25, -0.25, -1.0, -2.0, -1.0]], dtype=dtype)
    train, rollout = _with_rollout(log_ratio, rollout)
    mask = torch.tensor([[True, True, True, True, False], [True, True, True, True, False]])
    return train, rollout, mask


def exact_endpoints(g: torch.Generator) -> list[Call]:
    calls = []
    for mode in MODES:
        for dtype in ENDPOINT_DTYPES:
            for low, high in ENDPOINT_BOUNDS[mode]:
                train, rollout, mask = _endpoint_batch(dtype, low, high)
                label = f"{_name(dtype)}, low={low:g}, high={high:g}: ratios exactly on low and on high"
                calls.append(call(train, rollout, mask, mode, {"low": low, "high": high}, label))
    return calls


SWEEP_PLAN: dict[str, list[tuple[Bounds, str]]] = {
    TIS: [({"low": 0.8, "high": 1.25}, "low"), ({"low": 0.8, "high": 1.25}, "high"), ({}, "high")],
    ICEPOP: [({"low": 0.8, "high": 1.2}, "low"), ({"low": 0.8, "high": 1.2}, "high"), ({}, "low"), ({}, "high")],
}


def endpoint_sweep(g: torch.Generator) -> list[Call]:
    calls = []
    for mode in MODES:
        for dtype in ENDPOINT_DTYPES:
            for bounds, side in SWEEP_PLAN[mode]:
                low, high = resolved(mode, bounds)
                bound = torch.tensor(low if side == "low" else high, dtype=dtype)
                log_ratio = _neighbours(torch.log(bound.to(F64)).to(dtype), 64, 64)  # [129]
                train = torch.cat([log_ratio, torch.tensor([math.nan], dtype=dtype)])[None, :]  # [1, 130]
                rollout = torch.zeros_like(train)
                mask = torch.ones(1, 130, dtype=torch.bool)
                mask[0, -1] = False  # 129 valid tokens
                label = f"{_name(dtype)}, {_bounds_text(bounds)}: every log-ratio within 64 floats of log({side})"
                calls.append(call(train, rollout, mask, mode, bounds, label))
    return calls


def _ratio_grid(ratios: list[float], dtype: torch.dtype, g: torch.Generator) -> tuple[Tensor, Tensor, Tensor]:
    """[2, n + 1]: each row holds the given ratios and one NaN-padded position; row 1 also pads its last ratio."""
    n = len(ratios)
    rollout = -(torch.rand(2, n + 1, generator=g, dtype=F64) + 0.5)  # [2, n + 1]
    log_ratio = torch.log(torch.tensor([*ratios, 1.0], dtype=F64))[None, :].expand(2, -1)
    mask = torch.ones(2, n + 1, dtype=torch.bool)
    mask[:, -1] = False
    mask[1, -2] = False
    train = torch.where(mask, rollout + log_ratio, torch.tensor(math.nan, dtype=F64))
    return train.to(dtype), rollout.to(dtype), mask


DEFAULT_GRID = [0.3, 0.45, 0.55, 0.9, 1.0, 1.5, 1.9, 2.1, 3.0, 6.0]


def mode_defaults(g: torch.Generator) -> list[Call]:
    calls = []
    for mode in MODES:
        for dtype in DTYPES:
            for bounds in ({}, {"low": None, "high": None}, {"low": None}, {"high": None}):
                train, rollout, mask = _ratio_grid(DEFAULT_GRID, dtype, g)
                label = f"{_name(dtype)}, {_bounds_text(bounds)}, ratios {DEFAULT_GRID}"
                calls.append(call(train, rollout, mask, mode, bounds, label))
    return calls


BOUNDS_GRID = [0.15, 0.3, 0.55, 0.75, 0.95, 1.0, 1.1, 1.35, 1.7, 2.6, 4.5]
EXPLICIT_BOUNDS: list[Bounds] = [{"low": 0.5, "high": 1.5}, {"low": 0.25, "high": 4.0}, {"low": 0.9, "high": 1.15},
                                 {"low": 0.0, "high": 1.2}, {"low": 0.7}, {"high": 1.6}]


def bounds_honoured(g: torch.Generator) -> list[Call]:
    calls = []
    for mode in MODES:
        for dtype in DTYPES:
            for bounds in EXPLICIT_BOUNDS:
                train, rollout, mask = _ratio_grid(BOUNDS_GRID, dtype, g)
                label = f"{_name(dtype)}, {_bounds_text(bounds)}, ratios {BOUNDS_GRID}"
                calls.append(call(train, rollout, mask, mode, bounds, label))
    return calls


def padding_nan_inf(g: torch.Generator) -> list[Call]:
    calls = []
    for mode in MODES:
        for dtype in DTYPES:
            for pad_train, pad_rollout in [(math.nan, math.nan), (math.inf, -math.inf), (-math.inf, math.nan),
                                           (math.nan, math.inf)]:
                bounds: Bounds = {"low": 0.5, "high": 1.5}
                train, rollout, mask = random_batch(g, (4, 6), dtype, mode, bounds)
                train = torch.where(mask, train, torch.tensor(pad_train, dtype=dtype))
                rollout = torch.where(mask, rollout, torch.tensor(pad_rollout, dtype=dtype))
                label = f"{_name(dtype)} [4, 6], padding train_logp={pad_train}, rollout_logp={pad_rollout}"
                calls.append(call(train, rollout, mask, mode, bounds, label))
    return calls


def extreme_ratios(g: torch.Generator) -> list[Call]:
    calls = []
    for mode in MODES:
        for dtype in DTYPES:
            big = 200.0 if dtype == F32 else 1000.0  # exp overflows to inf in this dtype
            train = torch.tensor([[0.0, -1000.0, -1.0, -big, 0.0], [-3.0, -0.5, -1000.0, -2.0, 5.0]], dtype=dtype)
            rollout = torch.tensor([[-big, -1000.0, -1.1, 0.0, 0.0], [-3.05, -0.5 - big, -1000.0, -2.5, 0.0]],
                                   dtype=dtype)
            mask = torch.ones(2, 5, dtype=torch.bool)
            for bounds in ({}, {"low": 0.5, "high": 1.5}):
                label = (f"{_name(dtype)}, {_bounds_text(bounds)}: log-ratios +{big:g} (exp overflows), -{big:g} "
                         "(underflows to 0), 5, 0.5 and 0.1, train_logp = rollout_logp = -1000 (ratio 1)")
                calls.append(call(train, rollout, mask, mode, bounds, label))
    return calls


def clipfrac_counts(g: torch.Generator) -> list[Call]:
    """Heavy padding and one-sided changes: clipfrac counts both sides, over valid tokens only."""
    calls = []
    for mode in MODES:
        for dtype in DTYPES:
            for side, ratios in [("below", [0.2, 0.3, 0.9, 1.0, 1.1]), ("above", [0.9, 1.0, 1.1, 3.0, 5.0]),
                                 ("both", [0.2, 0.9, 1.0, 1.1, 4.0])]:
                bounds: Bounds = {"low": 0.5, "high": 2.0}
                r = torch.tensor(ratios, dtype=F64)
                train = torch.full((4, 8), math.nan, dtype=F64)  # [4, 8]: 5 valid tokens, 27 padded
                rollout = torch.full((4, 8), -1.0, dtype=F64)
                mask = torch.zeros(4, 8, dtype=torch.bool)
                positions = [(0, 0), (0, 1), (1, 0), (2, 0), (2, 1)]
                for (i, t), value in zip(positions, r.tolist(), strict=True):
                    train[i, t] = -1.0 + math.log(value)
                    mask[i, t] = True
                label = f"{_name(dtype)} [4, 8], 5 valid tokens of 32, ratios {ratios} (changes {side} the interval)"
                calls.append(call(train.to(dtype), rollout.to(dtype), mask, mode, bounds, label))
    return calls


def mask_dtypes(g: torch.Generator) -> list[Call]:
    calls = []
    for mode in MODES:
        for dtype, kind in [(F32, "float64"), (F32, "int32"), (F32, "uint8"), (F64, "float32"), (F64, "int64"),
                            (F32, "bool")]:
            train, rollout, mask = random_batch(g, (3, 6), dtype, mode, {}, pad_value=math.nan)
            label = f"{_name(dtype)} inputs with a {kind} mask, NaN padding"
            calls.append(call(train, rollout, _mask_as(mask, kind), mode, {}, label))
    return calls


def non_contiguous(g: torch.Generator) -> list[Call]:
    calls = []
    for mode in MODES:
        for dtype in DTYPES:
            train, rollout, mask = random_batch(g, (6, 8), dtype, mode, {"low": 0.5, "high": 1.5})
            views = [t.t().contiguous().t() for t in (train, rollout, mask)]
            assert not views[0].is_contiguous()
            calls.append(call(*views, mode, {"low": 0.5, "high": 1.5}, f"{_name(dtype)}: transposed [6, 8] views"))
            narrow = random_batch(g, (5, 8), dtype, mode, {}, pad_value=math.nan)
            # interleave with columns of other values, then take every second column: the batch again, strided
            train2, rollout2, mask2 = (torch.stack([t, t.flip(1)], dim=-1).reshape(5, 16)[:, ::2] for t in narrow)
            assert not train2.is_contiguous()
            calls.append(call(train2, rollout2, mask2, mode, {}, f"{_name(dtype)}: every second column of [5, 16]"))
    return calls


def value_errors(g: torch.Generator) -> list[Call]:
    train, rollout, mask = random_batch(g, (3, 4), F32, ICEPOP, {})
    base = {"train_logp": train, "rollout_logp": rollout, "mask": mask}
    shape_cases: list[tuple[str, dict]] = [
        ("rollout_logp [3, 5] vs train_logp [3, 4]", {"rollout_logp": torch.zeros(3, 5)}),
        ("rollout_logp [1, 4] (broadcastable)", {"rollout_logp": rollout[:1]}),
        ("mask [3, 3] vs train_logp [3, 4]", {"mask": mask[:, :3]}),
        ("mask [3, 1] (broadcastable)", {"mask": mask[:, :1]}),
        ("mask [4] (broadcastable)", {"mask": mask[0]}),
    ]
    bound_cases: list[tuple[str, Bounds]] = [
        ("low = -0.1", {"low": -0.1}), ("low = NaN", {"low": math.nan}), ("low = -inf", {"low": -math.inf}),
        ("low = inf", {"low": math.inf, "high": 2.0}), ("high = inf", {"high": math.inf}),
        ("high = NaN", {"high": math.nan}), ("high = -inf", {"low": 0.0, "high": -math.inf}),
        ("low = 0, high = 0", {"low": 0.0, "high": 0.0}), ("high = -1", {"low": 0.0, "high": -1.0}),
        ("low = 1.5 > high = 1.2", {"low": 1.5, "high": 1.2}), ("low = 2.5 > default high", {"low": 2.5}),
    ]
    calls = []
    for mode in MODES:
        for label, change in shape_cases:
            calls.append(Call(FUNCTION, {**base, "mode": mode, **change}, f"{mode}: {label}"))
        for label, bounds in bound_cases:
            calls.append(Call(FUNCTION, {**base, "mode": mode, **bounds}, f"{mode}: {label}"))
    calls.append(Call(FUNCTION, {**base, "mode": ICEPOP, "high": 0.3}, "icepop: high = 0.3 < default low 0.5"))
    for mode in ("mis", "TIS", "IcePop", "", "tis "):
        calls.append(Call(FUNCTION, {**base, "mode": mode}, f"unknown mode {mode!r}"))
    return calls


EDGE_GRID = [1e-7, 0.5, 0.9995, 1.0, 1.0005, 2.0, 9e6]
EDGE_BOUNDS: list[Bounds] = [{"low": 1.0, "high": 1.0}, {"low": 0.0, "high": 1e-6}, {"low": 0.0, "high": 1e6},
                             {"low": 0.999, "high": 1.001}, {"low": 0, "high": 2}]


def valid_edge_bounds(g: torch.Generator) -> list[Call]:
    calls = []
    for mode in MODES:
        for dtype in DTYPES:
            for bounds in EDGE_BOUNDS:
                train, rollout, mask = _ratio_grid(EDGE_GRID, dtype, g)
                label = f"{_name(dtype)}, {_bounds_text(bounds)} (valid), ratios {EDGE_GRID}"
                calls.append(call(train, rollout, mask, mode, bounds, label))
    return calls


def bfloat16_inputs(g: torch.Generator) -> list[Call]:
    calls = []
    for mode in MODES:
        plan: list[tuple[tuple[int, int], Bounds]] = [((4, 16), {"low": 0.8, "high": 1.2}), ((8, 32), {}),
                                                      ((3, 64), {"low": 0.5, "high": 1.5})]
        for shape, bounds in plan:
            train, rollout, mask = random_batch(g, shape, BF16, mode, bounds, pad_value=math.nan, spread=0.3)
            # two valid tokens whose ratio is exactly the rounded low and the rounded high
            low, high = resolved(mode, bounds)
            for column, bound in ((1, low), (2, high)):
                if bound > 0:
                    train[0, column] = exact_log(torch.tensor(bound, dtype=BF16))
                    rollout[0, column], mask[0, column] = 0.0, True
            label = f"bfloat16 {list(shape)}, {_bounds_text(bounds)}, ratios exactly on the bounds, NaN padding"
            calls.append(call(train, rollout, mask, mode, bounds, label))
    return calls
