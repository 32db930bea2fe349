# erin: the rollout scores and the advantages are fixed data, but the ratio r = pi / pi_rollout depends
# on the current policy, so I keep it in the graph and let autograd differentiate w * A * logp fully.
from __future__ import annotations

import math

import torch


def _validate(logp, rollout_logp, mask, clip_low, clip_high):
    if logp.dim() != 2:
        raise ValueError("logp must be 2-D")
    if rollout_logp.shape != logp.shape or mask.shape != logp.shape:
        raise ValueError("shape mismatch")
    if not (0.0 < clip_low < 1.0):
        raise ValueError("clip_low out of range")
    if not (math.isfinite(clip_high) and clip_high > 0.0):
        raise ValueError("clip_high out of range")


def masked_is_weights(logp, rollout_logp, mask, clip_low=0.2, clip_high=0.2):
    _validate(logp, rollout_logp, mask, clip_low, clip_high)
    valid = mask != 0
    zero = torch.zeros((), dtype=logp.dtype)
    ratio = torch.exp(torch.where(valid, logp - rollout_logp.detach(), zero))
    keep = valid & (ratio > 1.0 - clip_low) & (ratio < 1.0 + clip_high)
    return torch.where(keep, ratio, zero)


def offpolicy_loss(logp, rollout_logp, advantages, mask, clip_low=0.2, clip_high=0.2):
    weights = masked_is_weights(logp, rollout_logp, mask, clip_low, clip_high)
    if advantages.shape != (logp.shape[0],):
        raise ValueError("advantages must have shape [B]")
    valid = mask != 0
    zero = torch.zeros((), dtype=logp.dtype)
    adv = torch.where(valid, advantages.detach()[:, None], zero)
    per_token = weights * adv * torch.where(valid, logp, zero)
    return -per_token.sum() / valid.sum().clamp(min=1).to(logp.dtype)
