# carol: same idea as Slime's importance_weights(mode="mis"): keep a token when its ratio lies in
# [1 - clip_low, 1 + clip_high], reject everything else, then a REINFORCE-style token-mean loss.
from __future__ import annotations

import math

import torch


def _validate(logp, rollout_logp, mask, clip_low, clip_high):
    if logp.dim() != 2:
        raise ValueError("logp must be [B, L]")
    if rollout_logp.shape != logp.shape or mask.shape != logp.shape:
        raise ValueError("rollout_logp and mask must match logp's shape")
    if not (0.0 < clip_low < 1.0):
        raise ValueError("need 0 < clip_low < 1")
    if not (math.isfinite(clip_high) and clip_high > 0.0):
        raise ValueError("need a finite clip_high > 0")


def masked_is_weights(logp, rollout_logp, mask, clip_low=0.2, clip_high=0.2):
    _validate(logp, rollout_logp, mask, clip_low, clip_high)
    valid = mask != 0
    zero = torch.zeros((), dtype=logp.dtype)
    log_ratio = torch.where(valid, logp.detach() - rollout_logp.detach(), zero)
    ratio = torch.exp(log_ratio)
    in_range = valid & (ratio >= 1.0 - clip_low) & (ratio <= 1.0 + clip_high)
    return torch.where(in_range, ratio, zero)


def offpolicy_loss(logp, rollout_logp, advantages, mask, clip_low=0.2, clip_high=0.2):
    weights = masked_is_weights(logp, rollout_logp, mask, clip_low, clip_high)
    if advantages.shape != (logp.shape[0],):
        raise ValueError("advantages must be [B]")
    valid = mask != 0
    zero = torch.zeros((), dtype=logp.dtype)
    adv = torch.where(valid, advantages.detach().unsqueeze(1), zero)
    per_token = torch.where(valid, weights * adv * logp, zero)
    n_tokens = valid.sum().clamp(min=1).to(logp.dtype)
    return -per_token.sum() / n_tokens
