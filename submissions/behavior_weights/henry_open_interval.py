# henry: I reused my GLM-5 masking code for ICE-POP: keep a token when low < rho < high, zero otherwise.
# TIS is a plain clamp.
from __future__ import annotations

import math

import torch


def behavior_weights(train_logp, rollout_logp, mask, mode, low=None, high=None):
    if rollout_logp.shape != train_logp.shape or mask.shape != train_logp.shape:
        raise ValueError("shape mismatch")
    if mode == "tis":
        low = 0.0 if low is None else low
        high = 2.0 if high is None else high
    elif mode == "icepop":
        low = 0.5 if low is None else low
        high = 2.0 if high is None else high
    else:
        raise ValueError(f"unknown mode {mode!r}")
    if not (math.isfinite(low) and math.isfinite(high) and 0 <= low <= high and high > 0):
        raise ValueError("bad bounds")
    valid = mask != 0
    zero = torch.zeros((), dtype=train_logp.dtype)
    ratio = torch.exp(torch.where(valid, train_logp.detach() - rollout_logp.detach(), zero))
    if mode == "tis":
        weights = ratio.clamp(low, high)
    else:
        weights = torch.where((ratio > low) & (ratio < high), ratio, zero)
    weights = torch.where(valid, weights, zero)
    changed = (valid & (weights != ratio)).sum().double()
    clipfrac = changed / valid.sum().clamp(min=1).double()
    return weights, clipfrac.to(train_logp.dtype)
