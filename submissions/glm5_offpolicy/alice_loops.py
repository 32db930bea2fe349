# alice: I followed the formula one token at a time, exactly as the report writes it, so that no
# broadcasting or masking trick can go wrong. Slow, but every step is a plain scalar operation.
from __future__ import annotations

import math

import torch
from torch import Tensor


def _check_inputs(logp: Tensor, rollout_logp: Tensor, mask: Tensor, clip_low: float, clip_high: float) -> None:
    if logp.dim() != 2:
        raise ValueError("logp must have shape [B, L]")
    if tuple(rollout_logp.shape) != tuple(logp.shape):
        raise ValueError("rollout_logp must have the same shape as logp")
    if tuple(mask.shape) != tuple(logp.shape):
        raise ValueError("mask must have the same shape as logp")
    if math.isnan(clip_low) or clip_low <= 0.0 or clip_low >= 1.0:
        raise ValueError("clip_low must be in (0, 1)")
    if math.isnan(clip_high) or math.isinf(clip_high) or clip_high <= 0.0:
        raise ValueError("clip_high must be finite and positive")


def masked_is_weights(logp, rollout_logp, mask, clip_low=0.2, clip_high=0.2):
    _check_inputs(logp, rollout_logp, mask, clip_low, clip_high)
    rows, cols = logp.shape
    # the bounds live in the same dtype as the ratio, so 1 - 0.2 becomes float32(0.8) for float32 inputs
    low = torch.tensor(1.0 - clip_low, dtype=logp.dtype)
    high = torch.tensor(1.0 + clip_high, dtype=logp.dtype)
    current = logp.detach()
    rollout = rollout_logp.detach()
    weights = torch.zeros((rows, cols), dtype=logp.dtype, device=logp.device)
    for i in range(rows):
        for t in range(cols):
            if mask[i, t] == 0:
                continue  # padding: never look at its values, they may be NaN
            ratio = torch.exp(current[i, t] - rollout[i, t])  # 0-dim, may be inf
            if low < ratio and ratio < high:  # strict on both sides
                weights[i, t] = ratio
    return weights


def offpolicy_loss(logp, rollout_logp, advantages, mask, clip_low=0.2, clip_high=0.2):
    _check_inputs(logp, rollout_logp, mask, clip_low, clip_high)
    if tuple(advantages.shape) != (logp.shape[0],):
        raise ValueError("advantages must have shape [B]")
    weights = masked_is_weights(logp, rollout_logp, mask, clip_low, clip_high)
    adv = advantages.detach()
    rows, cols = logp.shape
    # an empty slice of logp sums to 0 but stays in logp's graph, so even an empty mask can backward()
    total = logp[:0].sum()
    n_valid = 0
    for i in range(rows):
        for t in range(cols):
            if mask[i, t] == 0:
                continue
            n_valid += 1  # rejected tokens still count in the denominator
            total = total + (weights[i, t] * adv[i]) * logp[i, t]  # only logp[i, t] carries a gradient
    return -total / max(1, n_valid)
