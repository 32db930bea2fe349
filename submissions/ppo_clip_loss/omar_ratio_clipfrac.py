# omar: vectorized, with the loss as in the statement; clipfrac is logged the way my old PPO trainer did
# it, as the share of valid tokens whose ratio left the interval.
from __future__ import annotations

import math

import torch


def ppo_clip_loss(logp, old_logp, advantages, mask, eps_low=0.2, eps_high=0.2, dual_clip=None,
                  reduction="token_mean"):
    if logp.dim() != 2 or not logp.is_floating_point():
        raise ValueError("logp must be [B, L] floating")
    if old_logp.shape != logp.shape or mask.shape != logp.shape or advantages.shape != logp.shape[:1]:
        raise ValueError("shape mismatch")
    if not 0 <= eps_low < 1 or not (math.isfinite(eps_high) and eps_high > 0):
        raise ValueError("bad widths")
    if dual_clip is not None and not (math.isfinite(dual_clip) and dual_clip > 1):
        raise ValueError("bad dual_clip")
    if reduction not in ("token_mean", "seq_mean"):
        raise ValueError("bad reduction")
    m = mask.bool()
    zero = torch.zeros((), dtype=logp.dtype)
    ratio = torch.exp(torch.where(m, logp - old_logp.detach(), zero))
    adv = advantages.detach()[:, None]
    surrogate = torch.max(-adv * ratio, -adv * ratio.clamp(1 - eps_low, 1 + eps_high))
    if dual_clip is not None:
        surrogate = torch.where(adv < 0, torch.min(surrogate, -dual_clip * adv), surrogate)
    surrogate = torch.where(m, surrogate, zero)
    n = m.sum(dim=1)
    if reduction == "token_mean":
        loss = surrogate.sum() / n.sum().clamp(min=1)
    else:
        loss = (surrogate.sum(dim=1) / n.clamp(min=1)).mean()
    outside = m & ((ratio < 1 - eps_low) | (ratio > 1 + eps_high))
    clipfrac = outside.sum().to(logp.dtype) / n.sum().clamp(min=1).to(logp.dtype)
    return loss, clipfrac
