"""Trivial answer: the plain -A r token mean: no clipping, no dual clip, one reduction, clipfrac 0."""

import torch


def ppo_clip_loss(logp, old_logp, advantages, mask, eps_low=0.2, eps_high=0.2, dual_clip=None, reduction="token_mean"):
    valid = mask != 0
    ratio = torch.exp(torch.where(valid, logp - old_logp.detach(), torch.zeros_like(logp)))
    per_token = torch.where(valid, -advantages.detach()[:, None] * ratio, torch.zeros_like(logp))
    return per_token.sum() / valid.sum().clamp(min=1), torch.zeros((), dtype=logp.dtype)
