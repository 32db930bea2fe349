"""Scalar-loop oracle for ppo_clip_loss, written apart from the reference: one token at a time in Python floats."""

from __future__ import annotations

import math
import struct

import torch
from torch import Tensor


def _rounded(x: float, dtype: torch.dtype) -> float:
    """x rounded to the nearest value of dtype, as a torch op in that dtype would store it."""
    if dtype == torch.float64 or not math.isfinite(x):
        return x
    if dtype != torch.float32:
        raise TypeError(f"the oracle handles float32 and float64, not {dtype}")
    try:
        return struct.unpack("<f", struct.pack("<f", x))[0]
    except OverflowError:
        return math.copysign(math.inf, x)


def _check_arguments(logp, old_logp, advantages, mask, eps_low, eps_high, dual_clip, reduction) -> None:
    shape = tuple(logp.shape)
    if len(shape) != 2 or logp.dtype not in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        raise ValueError("logp must be [B, L] floating")
    if tuple(old_logp.shape) != shape or tuple(mask.shape) != shape:
        raise ValueError("old_logp and mask must have logp's shape")
    if tuple(advantages.shape) != (shape[0],):
        raise ValueError("advantages must be [B]")
    if math.isnan(eps_low) or eps_low < 0 or eps_low >= 1:
        raise ValueError("eps_low outside [0, 1)")
    if math.isnan(eps_high) or math.isinf(eps_high) or eps_high <= 0:
        raise ValueError("eps_high must be finite and positive")
    if dual_clip is not None and (math.isnan(dual_clip) or math.isinf(dual_clip) or dual_clip <= 1):
        raise ValueError("dual_clip must be None or finite and > 1")
    if reduction != "token_mean" and reduction != "seq_mean":
        raise ValueError("unknown reduction")


def _token(lp: float, old: float, a: float, low: float, high: float, dual: float | None,
           dtype: torch.dtype) -> tuple[float, float, bool]:
    """One valid token: (its loss, d loss / d logp, whether the clipped branch is strictly larger)."""
    r = _rounded(math.exp(_rounded(lp - old, dtype)), dtype)
    if r < low:
        c = low
    elif r > high:
        c = high
    else:
        c = r
    plain = _rounded(-a * r, dtype)
    capped_ratio = _rounded(-a * c, dtype)
    clipped_wins = capped_ratio > plain
    if clipped_wins:
        value, slope = capped_ratio, 0.0  # the clipped branch is a constant in logp
    else:
        value, slope = plain, -a * r  # d(-a * exp(lp - old)) / d lp
    if dual is not None and a < 0:
        ceiling = _rounded(-_rounded(dual, dtype) * a, dtype)
        if ceiling < value:
            value, slope = ceiling, 0.0
    return value, slope, clipped_wins


def ppo_clip_loss(logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, eps_low=0.2, eps_high=0.2,
                  dual_clip=None, reduction="token_mean"):
    _check_arguments(logp, old_logp, advantages, mask, eps_low, eps_high, dual_clip, reduction)
    dtype = logp.dtype
    low, high = _rounded(1.0 - eps_low, dtype), _rounded(1.0 + eps_high, dtype)
    lp, old, adv, mk = logp.detach().tolist(), old_logp.detach().tolist(), advantages.detach().tolist(), mask.tolist()
    rows, cols = len(lp), (len(lp[0]) if lp else 0)

    values = [[0.0] * cols for _ in range(rows)]
    slopes = [[0.0] * cols for _ in range(rows)]
    counts = [0] * rows
    clipped = 0
    for i in range(rows):
        a = _rounded(float(adv[i]), dtype)
        for t in range(cols):
            if not mk[i][t]:
                continue
            values[i][t], slopes[i][t], wins = _token(lp[i][t], old[i][t], a, low, high, dual_clip, dtype)
            counts[i] += 1
            clipped += wins

    total_tokens = sum(counts)
    weights = [[0.0] * cols for _ in range(rows)]  # d loss / d (token loss)
    for i in range(rows):
        for t in range(cols):
            if mk[i][t]:
                if reduction == "token_mean":
                    weights[i][t] = 1.0 / max(1, total_tokens)
                else:
                    weights[i][t] = 1.0 / (max(1, counts[i]) * max(1, rows))
    loss = math.fsum(weights[i][t] * values[i][t] for i in range(rows) for t in range(cols))
    gradient = [[weights[i][t] * slopes[i][t] for t in range(cols)] for i in range(rows)]

    # The loop's value, given the loop's gradient: a term that is zero in the forward pass and whose
    # derivative in logp is `gradient`; padding is selected away so NaN there never reaches it.
    valid = torch.tensor(mk, dtype=torch.bool).reshape(logp.shape)
    grad = torch.tensor(gradient, dtype=dtype).reshape(logp.shape)
    offset = torch.where(valid, logp - logp.detach(), torch.zeros((), dtype=dtype))
    loss_tensor = torch.tensor(loss, dtype=dtype) + (grad * offset).sum()
    clipfrac = torch.tensor(clipped / max(1, total_tokens), dtype=dtype)
    return loss_tensor, clipfrac
