# dan: rejected tokens contribute nothing to the gradient, so I average the loss over the tokens
# that survive the ratio test -- that way the loss scale does not shrink when many get rejected.
from __future__ import annotations

import math

import torch


def _validate(logp, rollout_logp, mask, clip_low, clip_high):
    if logp.dim() != 2:
        raise ValueError("logp must be [B, L]")
    if rollout_logp.shape != logp.shape:
        raise ValueError("rollout_logp shape mismatch")
    if mask.shape != logp.shape:
        raise ValueError("mask shape mismatch")
    if not (0.0 < clip_low < 1.0):
        raise ValueError("clip_low must be in (0, 1)")
    if not (math.isfinite(clip_high) and clip_high > 0.0):
        raise ValueError("clip_high must be finite and > 0")


def masked_is_weights(logp, rollout_logp, mask, clip_low=0.2, clip_high=0.2):
    _validate(logp, rollout_logp, mask, clip_low, clip_high)
    valid = mask != 0
    zero = torch.zeros((), dtype=logp.dtype)
    ratio = torch.exp(torch.where(valid, logp.detach() - rollout_logp.detach(), zero))
    kept = valid & (ratio > 1.0 - clip_low) & (ratio < 1.0 + clip_high)
    return torch.where(kept, ratio, zero)


def offpolicy_loss(logp, rollout_logp, advantages, mask, clip_low=0.2, clip_high=0.2):
    weights = masked_is_weights(logp, rollout_logp, mask, clip_low, clip_high)
    if advantages.shape != (logp.shape[0],):
        raise ValueError("advantages must be [B]")
    valid = mask != 0
    zero = torch.zeros((), dtype=logp.dtype)
    kept = valid & (weights != 0)
    coeff = torch.where(kept, weights * advantages.detach()[:, None], zero)
    safe_logp = torch.where(valid, logp, zero)
    n_kept = kept.sum().clamp(min=1).to(logp.dtype)
    return -(coeff * safe_logp).sum() / n_kept
