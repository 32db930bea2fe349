"""Trivial answer: a zero loss and clipfrac."""

import torch


def ppo_clip_loss(logp, old_logp, advantages, mask, eps_low=0.2, eps_high=0.2, dual_clip=None, reduction="token_mean"):
    return torch.zeros((), dtype=logp.dtype), torch.zeros((), dtype=logp.dtype)
