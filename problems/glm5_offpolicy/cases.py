"""Case generators for glm5_offpolicy: each takes a seeded torch.Generator and returns the calls to make.

Every T1-T3 case mixes kept, rejected and padded tokens, so no trivial answer (zeros, a constant, the raw
ratio, the input echoed back) matches a case by accident.
"""

from __future__ import annotations

import math
from decimal import Decimal, getcontext

import torch
from torch import Tensor

from grader.cases import Call

F32, F64 = torch.float32, torch.float64
DTYPES = (F32, F64)
WEIGHTS, LOSS = "masked_is_weights", "offpolicy_loss"
MASK_KINDS = ("bool", "float32", "int64", "float64", "uint8", "int32")


def _mask_as(mask: Tensor, kind: str) -> Tensor:
    return mask if kind == "bool" else mask.to(getattr(torch, kind))


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _widths(clip: tuple[float, float] | None) -> dict[str, float]:
    return {} if clip is None else {"clip_low": clip[0], "clip_high": clip[1]}


def _describe(dtype: torch.dtype, shape: tuple[int, ...], kind: str, clip: tuple[float, float] | None) -> str:
    widths = "default widths" if clip is None else f"widths {clip[0]:g}/{clip[1]:g}"
    return f"{_name(dtype)} {list(shape)} {kind} mask, {widths}"


def weights_call(logp: Tensor, rollout: Tensor, mask: Tensor, clip: tuple[float, float] | None, label: str,
                 requires_grad: tuple[str, ...] = (), hidden: bool = False) -> Call:
    kwargs = {"logp": logp, "rollout_logp": rollout, "mask": mask, **_widths(clip)}
    return Call(WEIGHTS, kwargs, f"{WEIGHTS}: {label}", requires_grad=requires_grad, hidden=hidden)


def loss_call(logp: Tensor, rollout: Tensor, adv: Tensor, mask: Tensor, clip: tuple[float, float] | None,
              label: str, requires_grad: tuple[str, ...] = ("logp",), hidden: bool = False) -> Call:
    kwargs = {"logp": logp, "rollout_logp": rollout, "advantages": adv, "mask": mask, **_widths(clip)}
    return Call(LOSS, kwargs, f"{LOSS}: {label}", requires_grad=requires_grad, backward=bool(requires_grad),
                hidden=hidden)


def random_batch(g: torch.Generator, shape: tuple[int, int], dtype: torch.dtype, spread: float = 0.25,
                 pad_value: float | None = None) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """logp, rollout_logp, bool mask, advantages, with at least one kept and one rejected valid token."""
    rows, cols = shape
    logp = -(torch.rand(shape, generator=g, dtype=F64) * 4 + 0.05)  # [B, L]
    diff = torch.randn(shape, generator=g, dtype=F64) * spread
    lengths = torch.randint(0, cols + 1, (rows,), generator=g)
    lengths[0] = max(int(lengths[0]), min(cols, 2))
    mask = torch.arange(cols)[None, :] < lengths[:, None]  # [B, L], ragged right padding
    valid = mask.nonzero().tolist()
    if len(valid) < 2:  # L = 1: make a second row valid
        mask[-1, 0] = True
        valid = mask.nonzero().tolist()
    (i0, t0), (i1, t1) = valid[0], valid[-1]
    # one certainly kept (ratio 1.02 lies inside every interval of RANDOM_WIDTHS), one certainly rejected
    diff[i0, t0], diff[i1, t1] = 0.02, 0.9
    rollout = logp - diff
    if pad_value is not None:
        logp = torch.where(mask, logp, torch.full_like(logp, pad_value))
    adv = torch.randn(rows, generator=g, dtype=F64)
    adv[i0] = adv[i0] + (1.0 if adv[i0] >= 0 else -1.0)  # the kept token's advantage is far from zero
    return logp.to(dtype), rollout.to(dtype), mask, adv.to(dtype)


RANDOM_SHAPES = [(3, 7), (5, 5), (1, 9), (6, 1), (2, 2), (8, 33), (16, 64), (64, 256)]
RANDOM_WIDTHS: list[tuple[float, float] | None] = [None, (0.2, 0.2), (0.1, 0.3), (0.35, 0.05), (0.05, 0.5)]


def _random_configs(g: torch.Generator):
    for index, shape in enumerate(RANDOM_SHAPES):
        for dtype in DTYPES:
            kind = MASK_KINDS[(index + (dtype == F64)) % len(MASK_KINDS)]
            clip = RANDOM_WIDTHS[(2 * index + (dtype == F64)) % len(RANDOM_WIDTHS)]
            logp, rollout, mask, adv = random_batch(g, shape, dtype, pad_value=float(torch.randn(1, generator=g)))
            yield logp, rollout, _mask_as(mask, kind), adv, clip, _describe(dtype, shape, kind, clip)


def random_weights(g: torch.Generator) -> list[Call]:
    return [weights_call(lp, rl, m, clip, label, hidden=True) for lp, rl, m, _, clip, label in _random_configs(g)]


def random_loss(g: torch.Generator) -> list[Call]:
    return [loss_call(lp, rl, a, m, clip, label, hidden=True) for lp, rl, m, a, clip, label in _random_configs(g)]


# ---------------------------------------------------------------- T0 contracts


def _small(g: torch.Generator, dtype: torch.dtype, shape: tuple[int, int] = (3, 5)):
    return random_batch(g, shape, dtype)


def contract_weights(g: torch.Generator) -> list[Call]:
    calls = []
    for dtype, kind, shape in [(F32, "bool", (3, 5)), (F64, "float32", (4, 4)), (F32, "int64", (1, 6)),
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
    for dtype, kind in [(F32, "bool"), (F64, "float64"), (F32, "int32")]:
        logp, rollout, mask, adv = _small(g, dtype)
        calls.append(loss_call(logp, rollout, adv, _mask_as(mask, kind), None, _describe(dtype, (3, 5), kind, None)))
    return calls


def empty_mask(g: torch.Generator) -> list[Call]:
    calls = []
    for dtype in DTYPES:
        shape = (3, 4)
        nan = torch.full(shape, math.nan, dtype=dtype)
        mask = torch.zeros(shape, dtype=torch.bool)
        adv = torch.randn(3, generator=g, dtype=F64).to(dtype)
        label = f"{_name(dtype)} [3, 4], every token masked, padding NaN"
        calls.append(weights_call(nan, nan.clone(), mask, None, label))
        calls.append(loss_call(nan, nan.clone(), adv, mask, None, label))
        calls.append(loss_call(nan, nan.clone(), adv, mask.to(F32), None, label + ", float mask"))
    return calls


def mutation(g: torch.Generator) -> list[Call]:
    calls = []
    for dtype in DTYPES:
        logp, rollout, mask, adv = random_batch(g, (4, 6), dtype, pad_value=math.nan)
        label = f"{_name(dtype)} [4, 6] with NaN padding"
        calls.append(weights_call(logp, rollout, mask, None, label))
        calls.append(loss_call(logp, rollout, adv, mask.to(dtype), None, label, requires_grad=()))
        calls.append(loss_call(logp.t().contiguous().t(), rollout, adv, mask, (0.1, 0.3),
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


ENDPOINT_WIDTHS = [(0.2, 0.2), (0.1, 0.3), (0.25, 0.5)]


def _endpoint_batch(dtype: torch.dtype, clip: tuple[float, float]) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    low = torch.tensor(1 - clip[0], dtype=dtype)
    high = torch.tensor(1 + clip[1], dtype=dtype)
    d_low, d_high = exact_log(low), exact_log(high)
    inf = torch.tensor(math.inf, dtype=dtype)
    inside_low, inside_high = torch.nextafter(d_low, inf), torch.nextafter(d_high, -inf)
    row0 = torch.stack([d_low, inside_low, torch.tensor(0.0, dtype=dtype), torch.tensor(math.nan, dtype=dtype)])
    row1 = torch.stack([d_high, inside_high, torch.tensor(0.05, dtype=dtype), torch.tensor(0.7, dtype=dtype)])
    diff = torch.stack([row0, row1])  # [2, 4]: on a bound, one float inside it, comfortably inside, padding/out
    rollout = torch.tensor([[-0.5, -0.5, -1.0, -2.0], [-0.25, -0.25, -1.0, -2.0]], dtype=dtype)
    logp = diff + rollout
    exact = (logp - rollout) == diff
    rollout, logp = torch.where(exact, rollout, 0.0).to(dtype), torch.where(exact, logp, diff).to(dtype)
    assert bool(((logp - rollout == diff) | diff.isnan()).all())
    mask = torch.tensor([[True, True, True, False], [True, True, True, True]])
    adv = torch.tensor([1.5, -0.75], dtype=dtype)
    return logp, rollout, mask, adv


def exact_endpoints(g: torch.Generator) -> list[Call]:
    calls = []
    for dtype in DTYPES:
        for clip in ENDPOINT_WIDTHS:
            logp, rollout, mask, adv = _endpoint_batch(dtype, clip)
            label = f"{_name(dtype)}, widths {clip[0]:g}/{clip[1]:g}: ratios exactly on 1 - clip_low and 1 + clip_high"
            calls.append(weights_call(logp, rollout, mask, clip, label))
            calls.append(loss_call(logp, rollout, adv, mask, clip, label))
    return calls


def endpoint_sweep(g: torch.Generator) -> list[Call]:
    calls = []
    for dtype in DTYPES:
        for clip in ENDPOINT_WIDTHS[:2]:
            low = torch.tensor(1 - clip[0], dtype=dtype)
            high = torch.tensor(1 + clip[1], dtype=dtype)
            logp = torch.stack([_ulp_neighbours(torch.log(low), 64), _ulp_neighbours(torch.log(high), 64)])  # [2, 129]
            rollout = torch.zeros_like(logp)
            mask = torch.ones(logp.shape, dtype=torch.bool)
            label = f"{_name(dtype)}, widths {clip[0]:g}/{clip[1]:g}: every float within 64 ulps of log(bound)"
            calls.append(weights_call(logp, rollout, mask, clip, label))
    return calls


def _ratio_grid(ratios: list[float], dtype: torch.dtype, g: torch.Generator):
    r = torch.tensor(ratios, dtype=F64)
    rollout = -(torch.rand(2, len(ratios), generator=g, dtype=F64) + 0.5)  # [2, n]
    logp = rollout + torch.log(r)[None, :]
    mask = torch.ones(2, len(ratios), dtype=torch.bool)
    mask[1, -1] = False
    adv = torch.tensor([1.25, -0.5], dtype=F64)
    return logp.to(dtype), rollout.to(dtype), mask, adv.to(dtype)


GRID = [0.55, 0.65, 0.75, 0.85, 0.95, 1.05, 1.15, 1.25, 1.4, 1.6]


def asymmetric_widths(g: torch.Generator) -> list[Call]:
    calls = []
    for dtype in DTYPES:
        for clip in [(0.1, 0.5), (0.4, 0.05), (0.3, 0.1)]:
            logp, rollout, mask, adv = _ratio_grid(GRID, dtype, g)
            label = f"{_name(dtype)}, widths {clip[0]:g}/{clip[1]:g}, ratios {GRID}"
            calls += [weights_call(logp, rollout, mask, clip, label), loss_call(logp, rollout, adv, mask, clip, label)]
    return calls


def default_widths(g: torch.Generator) -> list[Call]:
    ratios = [0.7, 0.79, 0.81, 0.9, 1.1, 1.19, 1.21, 1.3]
    calls = []
    for dtype in DTYPES:
        logp, rollout, mask, adv = _ratio_grid(ratios, dtype, g)
        label = f"{_name(dtype)}, clip_low and clip_high omitted, ratios {ratios}"
        calls += [weights_call(logp, rollout, mask, None, label), loss_call(logp, rollout, adv, mask, None, label)]
    return calls


def padding_nan_inf(g: torch.Generator) -> list[Call]:
    calls = []
    for dtype in DTYPES:
        for pad_logp, pad_rollout in [(math.nan, math.nan), (math.inf, -math.inf), (-math.inf, math.nan),
                                      (math.nan, math.inf)]:
            logp, rollout, mask, adv = random_batch(g, (4, 6), dtype)
            logp = torch.where(mask, logp, torch.tensor(pad_logp, dtype=dtype))
            rollout = torch.where(mask, rollout, torch.tensor(pad_rollout, dtype=dtype))
            label = f"{_name(dtype)} [4, 6], padding logp={pad_logp}, rollout_logp={pad_rollout}"
            calls += [weights_call(logp, rollout, mask, None, label), loss_call(logp, rollout, adv, mask, None, label)]
    return calls


def empty_row_nan_advantage(g: torch.Generator) -> list[Call]:
    calls = []
    for dtype in DTYPES:
        logp, rollout, mask, adv = random_batch(g, (4, 5), dtype)
        mask[2] = False
        logp[2], rollout[2] = math.nan, math.nan
        adv[2] = math.nan
        label = f"{_name(dtype)} [4, 5], row 2 has no valid token and advantage NaN"
        calls += [weights_call(logp, rollout, mask, None, label), loss_call(logp, rollout, adv, mask, None, label)]
    return calls


def extreme_ratios(g: torch.Generator) -> list[Call]:
    calls = []
    for dtype in DTYPES:
        big = 200.0 if dtype == F32 else 1000.0  # exp overflows to inf in this dtype
        logp = torch.tensor([[0.0, -1000.0, -1.0, -big], [-3.0, -0.5, -1000.0, -2.0]], dtype=dtype)
        rollout = torch.tensor([[-big, -1000.0, -1.1, 0.0], [-3.05, -0.5 - big, -1000.0, -2.0]], dtype=dtype)
        mask = torch.ones(2, 4, dtype=torch.bool)
        adv = torch.tensor([0.8, -1.3], dtype=dtype)
        label = (f"{_name(dtype)}: log-ratios +{big:g} (exp overflows), -{big:g} (underflows) and "
                 "logp = rollout_logp = -1000 (ratio 1)")
        calls += [weights_call(logp, rollout, mask, None, label), loss_call(logp, rollout, adv, mask, None, label)]
    return calls


def gradient_detached(g: torch.Generator) -> list[Call]:
    calls = []
    for dtype in DTYPES:
        logp, rollout, mask, adv = random_batch(g, (5, 6), dtype)
        label = f"{_name(dtype)} [5, 6], logp, rollout_logp and advantages all require grad"
        calls.append(loss_call(logp, rollout, adv, mask, None, label,
                               requires_grad=("logp", "rollout_logp", "advantages")))
    return calls


def denominator_counts_rejected(g: torch.Generator) -> list[Call]:
    calls = []
    for dtype in DTYPES:
        for share in (0.5, 0.8):
            logp, rollout, mask, adv = random_batch(g, (4, 10), dtype, spread=0.05)
            far = torch.rand(4, 10, generator=g) < share
            far[0, 0] = False  # keep one token kept
            rollout = torch.where(far, logp - 1.0, rollout)
            label = f"{_name(dtype)} [4, 10], about {share:.0%} of valid tokens rejected by the ratio test"
            calls.append(loss_call(logp, rollout, adv, mask, None, label))
    return calls


def token_mean(g: torch.Generator) -> list[Call]:
    calls = []
    for dtype in DTYPES:
        logp, rollout, mask, adv = random_batch(g, (3, 20), dtype, spread=0.05)
        mask = torch.zeros(3, 20, dtype=torch.bool)
        mask[0, :1], mask[1, :20], mask[2, :6] = True, True, True
        adv = torch.tensor([3.0, -0.5, 1.0], dtype=dtype)
        label = f"{_name(dtype)} [3, 20], responses of 1, 20 and 6 valid tokens"
        calls.append(loss_call(logp, rollout, adv, mask, None, label))
    return calls


def mixed_mask_dtype(g: torch.Generator) -> list[Call]:
    calls = []
    for kind in ("float64", "int32", "uint8"):
        logp, rollout, mask, adv = random_batch(g, (3, 6), F32)
        label = f"float32 logp with a {kind} mask"
        m = _mask_as(mask, kind)
        calls += [weights_call(logp, rollout, m, None, label), loss_call(logp, rollout, adv, m, None, label)]
    return calls


def non_contiguous(g: torch.Generator) -> list[Call]:
    calls = []
    for dtype in DTYPES:
        logp, rollout, mask, adv = random_batch(g, (6, 8), dtype)
        label = f"{_name(dtype)}: transposed [6, 8] views and a strided advantages vector"
        lp, rl, m = logp.t().contiguous().t(), rollout.t().contiguous().t(), mask.t().contiguous().t()
        a = torch.stack([adv, adv], dim=1)[:, 0]
        assert not lp.is_contiguous() and not a.is_contiguous()
        calls += [weights_call(lp, rl, m, None, label), loss_call(lp, rl, a, m, None, label)]
        sliced = random_batch(g, (5, 16), dtype)
        lp2, rl2, m2 = (t[:, ::2] for t in sliced[:3])
        calls.append(weights_call(lp2, rl2, m2, (0.1, 0.3), f"{_name(dtype)}: every second column of [5, 16]"))
    return calls


def value_errors(g: torch.Generator) -> list[Call]:
    logp, rollout, mask, adv = random_batch(g, (3, 4), F32)
    cases: list[tuple[str, dict]] = [
        ("logp 1-D", {"logp": logp[0], "rollout_logp": rollout[0], "mask": mask[0]}),
        ("logp 3-D", {"logp": logp[None], "rollout_logp": rollout[None], "mask": mask[None]}),
        ("rollout_logp [3, 5] vs logp [3, 4]", {"rollout_logp": torch.zeros(3, 5)}),
        ("rollout_logp [1, 4] (broadcastable)", {"rollout_logp": rollout[:1]}),
        ("mask [3, 3] vs logp [3, 4]", {"mask": mask[:, :3]}),
        ("mask [1, 4] (broadcastable)", {"mask": mask[:1]}),
        ("mask [3, 1] (broadcastable)", {"mask": mask[:, :1]}),
        ("clip_low = 0", {"clip_low": 0.0}),
        ("clip_low = 1", {"clip_low": 1.0}),
        ("clip_low = -0.1", {"clip_low": -0.1}),
        ("clip_low = 1.5", {"clip_low": 1.5}),
        ("clip_low = NaN", {"clip_low": math.nan}),
        ("clip_high = 0", {"clip_high": 0.0}),
        ("clip_high = -0.2", {"clip_high": -0.2}),
        ("clip_high = inf", {"clip_high": math.inf}),
        ("clip_high = NaN", {"clip_high": math.nan}),
    ]
    base = {"logp": logp, "rollout_logp": rollout, "mask": mask}
    calls = []
    for label, change in cases:
        kwargs = {**base, **change}
        calls.append(Call(WEIGHTS, kwargs, f"{WEIGHTS}: {label}"))
        calls.append(Call(LOSS, {**kwargs, "advantages": adv}, f"{LOSS}: {label}"))
    for label, bad in [("advantages [4] for B = 3", torch.zeros(4)), ("advantages [3, 1]", adv[:, None]),
                       ("advantages 0-dim", adv[0]), ("advantages [3, 4]", torch.zeros(3, 4))]:
        calls.append(Call(LOSS, {**base, "advantages": bad}, f"{LOSS}: {label}"))
    return calls


def valid_edge_widths(g: torch.Generator) -> list[Call]:
    ratios = [0.0005, 0.01, 0.5, 0.9999995, 1.0, 1.5, 5.5, 7.0]
    calls = []
    for dtype in DTYPES:
        for clip in [(1e-6, 0.2), (0.999, 0.2), (0.2, 5.0), (0.5, 1e-6)]:
            logp, rollout, mask, adv = _ratio_grid(ratios, dtype, g)
            label = f"{_name(dtype)}, widths {clip[0]:g}/{clip[1]:g} (valid), ratios {ratios}"
            calls += [weights_call(logp, rollout, mask, clip, label), loss_call(logp, rollout, adv, mask, clip, label)]
    return calls
