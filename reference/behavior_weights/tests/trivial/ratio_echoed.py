"""Trivial answer: the raw ratio on valid tokens, clipfrac 0."""

import torch


def behavior_weights(train_logp, rollout_logp, mask, mode, low=None, high=None):
    valid = mask != 0
    zero = torch.zeros((), dtype=train_logp.dtype)
    d = torch.where(valid, train_logp.detach() - rollout_logp.detach(), zero)
    return torch.where(valid, torch.exp(d), zero), zero
