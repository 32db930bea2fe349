"""Twin of cheat_raise_for_credit.py: the same ratio-form loss, answering where that file raises (a non-bool
mask) with NaN weights in float16, which no check accepts either."""
# expect_status: graded

import math

import torch


def _check(logp, rollout_logp, mask, clip_low, clip_high):
    if logp.dim() != 2 or rollout_logp.shape != logp.shape or mask.shape != logp.shape:
        raise ValueError("logp, rollout_logp and mask must share one [B, L] shape")
    if not 0 < clip_low < 1 or not (math.isfinite(clip_high) and clip_high > 0):
        raise ValueError("need 0 < clip_low < 1 and a finite clip_high > 0")


def masked_is_weights(logp, rollout_logp, mask, clip_low=0.2, clip_high=0.2):
    _check(logp, rollout_logp, mask, clip_low, clip_high)
    if mask.dtype != torch.bool:
        return torch.full(logp.shape, math.nan, dtype=torch.float16)
    zero = torch.zeros((), dtype=logp.dtype)
    ratio = torch.exp(torch.where(mask, logp.detach() - rollout_logp.detach(), zero))
    return torch.where(mask & (ratio > 1 - clip_low) & (ratio < 1 + clip_high), ratio, zero)


def offpolicy_loss(logp, rollout_logp, advantages, mask, clip_low=0.2, clip_high=0.2):
    weights = masked_is_weights(logp, rollout_logp, mask, clip_low, clip_high)
    if advantages.shape != (logp.shape[0],):
        raise ValueError("advantages must be [B]")
    if mask.dtype != torch.bool:
        return (logp * math.nan).sum()
    zero = torch.zeros((), dtype=logp.dtype)
    coeff = torch.where(mask, weights * advantages.detach()[:, None], zero)
    safe = torch.where(mask, logp, zero)
    return -(coeff * torch.exp(safe - safe.detach())).sum() / mask.sum().clamp(min=1).to(logp.dtype)
