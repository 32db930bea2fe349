"""T3 toy experiment for behavior_weights: bias and spread of capped weights, and endpoints in bfloat16.

The judge runs each part of `PARTS` as `part(rng, behavior_weights=...)`, with either the learner's function
(each call answered by the sandboxed learner process) or the reference's, and compares the float64 series the
parts return. `rng` is seeded by the grading seed: the categorical's action order and payoffs f and the bfloat16
log-ratios change from seed to seed, so no bias, spread or bfloat16 series can be replayed from another seed's run.

Series labelled ``is_*`` (raw importance sampling) and ``bf16_*_unrounded`` / ``bf16_*_strict`` come from
private helpers below, never from the given function, so they are fixed baselines for every submission.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

DTYPE = torch.float64

# ---------------------------------------------------------------- an 8-way categorical at one prefix
# q samples the tokens (the rollout engine), p0 is the trainer's distribution the update should follow,
# f is any per-action quantity whose p0-expectation the weighted q-samples estimate. q and p0 are the statement's
# table, so its ratios (0.0625 ... 3.889, one exactly 1) are what the function sees; the seed permutes the
# actions and draws f, so the bias and spread series change from seed to seed.
ACTIONS = 8
TABLE_Q = (0.16, 0.14, 0.13, 0.13, 0.12, 0.12, 0.11, 0.09)
TABLE_P0 = (0.01, 0.02, 0.04, 0.08, 0.12, 0.17, 0.21, 0.35)
CAPS = tuple(1.0 + 0.1 * k for k in range(51))  # U in [1, 6]; random ratios sit on a grid point with probability 0

# ---------------------------------------------------------------- bfloat16 endpoints
BF16_STEPS = 20
BF16_SHAPE = (50, 100)  # 5000 tokens per step, 10^5 in all
BF16_SPREAD = 0.4  # log-ratios uniform in [-0.4, 0.4]
BF16_LOW, BF16_HIGH = 0.8, 1.2


# ---------------------------------------------------------------- output hygiene


def _as_series(name: str, values: list[float] | Tensor) -> Tensor:
    """A plain, detached, contiguous 1-D float64 series."""
    series = torch.as_tensor(values, dtype=DTYPE).detach().clone().reshape(-1)
    return series.as_subclass(Tensor).contiguous()  # a learner's Tensor subclass must not cross the boundary


def _checked(result: object, shape: tuple[int, ...]) -> tuple[Tensor, Tensor]:
    """The learner's (weights, clipfrac), or a TypeError/ValueError saying what is wrong with them."""
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        raise TypeError(f"behavior_weights must return a tuple (weights, clipfrac), got {type(result).__name__}")
    weights, clipfrac = result
    if isinstance(clipfrac, (int, float)) and not isinstance(clipfrac, bool):
        # a clipfrac returned as a number is the contract check's business; the toy reads its value
        clipfrac = torch.tensor(float(clipfrac), dtype=DTYPE)
    if not isinstance(weights, Tensor) or not isinstance(clipfrac, Tensor):
        raise TypeError("behavior_weights must return two torch.Tensors")
    if weights.is_complex() or clipfrac.is_complex():
        raise TypeError("behavior_weights must return real tensors")
    if tuple(weights.shape) != shape:
        raise ValueError(f"weights must have shape {list(shape)}, got {list(weights.shape)}")
    if clipfrac.numel() != 1:
        raise ValueError(f"clipfrac must be a 0-dim tensor, got shape {list(clipfrac.shape)}")
    return weights.detach(), clipfrac.detach().reshape(())


# ---------------------------------------------------------------- bias and spread over caps


def _categorical(rng: torch.Generator) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """q, p0, f as [8] and the function's inputs: [8, 2] log-probabilities whose column 1 is NaN padding."""
    order = torch.randperm(ACTIONS, generator=rng)  # [8]
    q = torch.tensor(TABLE_Q, dtype=DTYPE)[order]  # [8]
    p0 = torch.tensor(TABLE_P0, dtype=DTYPE)[order]  # [8]
    f = torch.randn(ACTIONS, generator=rng, dtype=DTYPE)  # [8]
    padding = torch.full((8, 1), math.nan, dtype=DTYPE)
    train_logp = torch.cat([torch.log(p0)[:, None], padding], dim=1)  # [8, 2]
    rollout_logp = torch.cat([torch.log(q)[:, None], padding], dim=1)  # [8, 2]
    return q, p0, f, train_logp, rollout_logp


def _moments(q: Tensor, p0: Tensor, f: Tensor, w: Tensor) -> tuple[float, float]:
    """Exact bias E_q[w f] - E_p0[f] and standard deviation of w f under q."""
    mean = (q * w * f).sum()
    bias = mean - (p0 * f).sum()
    variance = (q * (w * f) ** 2).sum() - mean**2
    return float(bias), math.sqrt(max(float(variance), 0.0))


def cap_sweep(rng: torch.Generator, behavior_weights: Callable[..., Any]) -> dict[str, Tensor]:
    """Bias and spread of TIS- and ICE-POP-weighted estimates of E_p0[f] from q-samples, as the cap U grows."""
    q, p0, f, train_logp, rollout_logp = _categorical(rng)
    mask = torch.tensor([[True, False]] * 8)  # [8, 2]
    raw = torch.exp(train_logp[:, 0] - rollout_logp[:, 0])  # [8], plain importance ratios
    is_bias, is_std = _moments(q, p0, f, raw)
    out: dict[str, list[float]] = {key: [] for key in ("tis_bias", "tis_std", "tis_clipfrac", "icepop_bias",
                                                        "icepop_std", "icepop_clipfrac")}
    for cap in CAPS:
        for mode, low in (("tis", 0.0), ("icepop", 1.0 / cap)):
            result = behavior_weights(train_logp=train_logp, rollout_logp=rollout_logp, mask=mask, mode=mode,
                                      low=low, high=cap)
            weights, clipfrac = _checked(result, (8, 2))
            bias, std = _moments(q, p0, f, weights[:, 0].to(DTYPE))
            out[f"{mode}_bias"].append(bias)
            out[f"{mode}_std"].append(std)
            out[f"{mode}_clipfrac"].append(float(clipfrac.to(DTYPE)))
    n = len(CAPS)
    return {"cap": _as_series("cap", list(CAPS)), "is_bias": _as_series("is_bias", [is_bias] * n),
            "is_std": _as_series("is_std", [is_std] * n), **{k: _as_series(k, v) for k, v in out.items()}}


# ---------------------------------------------------------------- bfloat16: ratios that land on a bound


def _bf16_log_ratios(rng: torch.Generator) -> Tensor:
    count = BF16_STEPS * BF16_SHAPE[0] * BF16_SHAPE[1]
    uniform = torch.rand(count, generator=rng, dtype=DTYPE) * (2 * BF16_SPREAD) - BF16_SPREAD
    return uniform.to(torch.bfloat16).reshape(BF16_STEPS, *BF16_SHAPE)  # [S, B, L]


def _on_bound_share(kept: Tensor, weights: Tensor, rho: Tensor) -> float:
    """Among kept tokens, the share whose weight is its ratio and that ratio sits exactly on a rounded bound."""
    low = torch.tensor(BF16_LOW, dtype=torch.bfloat16)
    high = torch.tensor(BF16_HIGH, dtype=torch.bfloat16)
    on_bound = kept & (weights == rho) & ((rho == low) | (rho == high))
    return int(on_bound.sum()) / max(1, int(kept.sum()))


def bf16_endpoints(rng: torch.Generator, behavior_weights: Callable[..., Any]) -> dict[str, Tensor]:
    """How many kept bfloat16 ratios sit exactly on a rounded bound, step by step."""
    learner, unrounded = [], []
    for log_ratio in _bf16_log_ratios(rng):
        rollout_logp = torch.zeros_like(log_ratio)  # [B, L]
        mask = torch.ones(log_ratio.shape, dtype=torch.bool)
        rho = torch.exp(log_ratio)  # [B, L] bfloat16, what the function sees
        result = behavior_weights(train_logp=log_ratio, rollout_logp=rollout_logp, mask=mask, mode="icepop",
                                  low=BF16_LOW, high=BF16_HIGH)
        weights, _ = _checked(result, tuple(log_ratio.shape))
        learner.append(_on_bound_share(weights != 0, weights, rho))
        # Baseline: the interval tested in float32 against the unrounded 0.8 and 1.2.
        wide = rho.to(torch.float32)
        kept = (wide >= BF16_LOW) & (wide <= BF16_HIGH)
        unrounded.append(_on_bound_share(kept, rho, rho))
    return {
        "bf16_step": _as_series("bf16_step", [float(s + 1) for s in range(BF16_STEPS)]),
        "bf16_on_bound": _as_series("bf16_on_bound", learner),
        "bf16_on_bound_unrounded": _as_series("bf16_on_bound_unrounded", unrounded),
        "bf16_on_bound_strict": _as_series("bf16_on_bound_strict", [0.0] * BF16_STEPS),
    }


# ---------------------------------------------------------------- entry point


PARTS = (cap_sweep, bf16_endpoints)
