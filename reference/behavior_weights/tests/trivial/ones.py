"""Trivial answer: every weight 1, clipfrac 1."""

import torch


def behavior_weights(train_logp, rollout_logp, mask, mode, low=None, high=None):
    return torch.ones_like(train_logp), torch.ones((), dtype=train_logp.dtype)
