"""Trivial answer: every weight is 1 and the loss is a constant."""

import torch


def masked_is_weights(logp, rollout_logp, mask, clip_low=0.2, clip_high=0.2):
    return torch.ones_like(logp).detach()


def offpolicy_loss(logp, rollout_logp, advantages, mask, clip_low=0.2, clip_high=0.2):
    return torch.full((), 0.5, dtype=logp.dtype)
