"""Trivial answer: the masked mean of logp itself, connected to the graph, clipfrac 0."""

import torch


def ppo_clip_loss(logp, old_logp, advantages, mask, eps_low=0.2, eps_high=0.2, dual_clip=None, reduction="token_mean"):
    valid = mask != 0
    echo = torch.where(valid, logp, torch.zeros_like(logp)).sum() / valid.sum().clamp(min=1)
    return echo, torch.zeros((), dtype=logp.dtype)
