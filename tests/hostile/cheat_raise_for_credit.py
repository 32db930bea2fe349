"""Writes the loss in PPO's ratio form (a real bug, owned by oracle_loss) and raises RuntimeError on every
non-bool mask, as the declared misreading that uses the mask as a bool condition does: once that misreading is
charged, its raising cases would be credited by follow-through in every other check, the cases oracle_loss
charges to the ratio form included. It must score exactly what honest_ratio_loss_nan_masks.py scores, which
answers NaN where this file raises."""
# expect_status: graded
# expect_score: honest_ratio_loss_nan_masks

import math

import torch


def _check(logp, rollout_logp, mask, clip_low, clip_high):
    if logp.dim() != 2 or rollout_logp.shape != logp.shape or mask.shape != logp.shape:
        raise ValueError("logp, rollout_logp and mask must share one [B, L] shape")
    if not 0 < clip_low < 1 or not (math.isfinite(clip_high) and clip_high > 0):
        raise ValueError("need 0 < clip_low < 1 and a finite clip_high > 0")
    if mask.dtype != torch.bool:
        raise RuntimeError("where expected condition to be a boolean tensor")


def masked_is_weights(logp, rollout_logp, mask, clip_low=0.2, clip_high=0.2):
    _check(logp, rollout_logp, mask, clip_low, clip_high)
    zero = torch.zeros((), dtype=logp.dtype)
    ratio = torch.exp(torch.where(mask, logp.detach() - rollout_logp.detach(), zero))
    return torch.where(mask & (ratio > 1 - clip_low) & (ratio < 1 + clip_high), ratio, zero)


def offpolicy_loss(logp, rollout_logp, advantages, mask, clip_low=0.2, clip_high=0.2):
    weights = masked_is_weights(logp, rollout_logp, mask, clip_low, clip_high)
    if advantages.shape != (logp.shape[0],):
        raise ValueError("advantages must be [B]")
    zero = torch.zeros((), dtype=logp.dtype)
    coeff = torch.where(mask, weights * advantages.detach()[:, None], zero)
    safe = torch.where(mask, logp, zero)
    return -(coeff * torch.exp(safe - safe.detach())).sum() / mask.sum().clamp(min=1).to(logp.dtype)
