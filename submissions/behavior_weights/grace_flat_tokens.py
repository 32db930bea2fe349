# grace: gather the valid tokens into a flat list with boolean indexing, compute the ratio and the weight
# only there, and scatter the weights back into a zero [B, L] tensor. Padding is never read.
from __future__ import annotations

import math

import torch
from torch import Tensor

DEFAULTS = {"tis": (0.0, 2.0), "icepop": (0.5, 2.0)}


def _interval(mode, low, high) -> tuple[float, float]:
    if mode not in ("tis", "icepop"):
        raise ValueError(f"unknown mode {mode!r}; use 'tis' or 'icepop'")
    low = DEFAULTS[mode][0] if low is None else low
    high = DEFAULTS[mode][1] if high is None else high
    if not (math.isfinite(low) and math.isfinite(high)):
        raise ValueError("low and high must be finite")
    if low < 0 or low > high or high <= 0:
        raise ValueError(f"need 0 <= low <= high and high > 0, got [{low}, {high}]")
    return low, high


def behavior_weights(train_logp: Tensor, rollout_logp: Tensor, mask: Tensor, mode: str, low=None, high=None):
    if rollout_logp.shape != train_logp.shape or mask.shape != train_logp.shape:
        raise ValueError("train_logp, rollout_logp and mask must share one shape")
    low, high = _interval(mode, low, high)
    valid = mask.bool()  # [B, L]
    rho = torch.exp(train_logp.detach()[valid] - rollout_logp.detach()[valid])  # [N]
    if mode == "tis":
        w = rho.clamp(min=low, max=high)  # [N]
    else:
        w = rho.masked_fill((rho < low) | (rho > high), 0.0)  # masked_fill, not rho * keep: inf * 0 is NaN
    weights = torch.zeros(train_logp.shape, dtype=train_logp.dtype, device=train_logp.device)  # [B, L]
    weights[valid] = w
    if rho.numel() == 0:
        clipfrac = torch.zeros((), dtype=train_logp.dtype, device=train_logp.device)
    else:
        clipfrac = (w != rho).to(torch.float64).mean().to(train_logp.dtype)
    return weights, clipfrac
