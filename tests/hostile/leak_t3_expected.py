"""Fails the toy on purpose (every weight a thousandth short), so that its T3 messages and plots at the grading
seed describe the reference's series: a learner who read their values could return them in the next submission.
No learner-facing output of its grade may quote one."""
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
    valid = mask != 0
    zero = torch.zeros((), dtype=logp.dtype)
    ratio = torch.exp(torch.where(valid, logp.detach() - rollout_logp.detach(), zero))
    return torch.where(valid & (ratio > 1 - clip_low) & (ratio < 1 + clip_high), ratio * 0.999, zero)


def offpolicy_loss(logp, rollout_logp, advantages, mask, clip_low=0.2, clip_high=0.2):
    weights = masked_is_weights(logp, rollout_logp, mask, clip_low, clip_high)
    if advantages.shape != (logp.shape[0],):
        raise ValueError("advantages must be [B]")
    valid = mask != 0
    zero = torch.zeros((), dtype=logp.dtype)
    coeff = torch.where(valid, weights * advantages.detach()[:, None], zero)
    return -(coeff * torch.where(valid, logp, zero)).sum() / valid.sum().clamp(min=1)
