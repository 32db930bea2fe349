"""Trivial answer: zero weights and a zero loss that is still connected to logp's graph."""

import torch


def masked_is_weights(logp, rollout_logp, mask, clip_low=0.2, clip_high=0.2):
    return torch.zeros_like(logp).detach()


def offpolicy_loss(logp, rollout_logp, advantages, mask, clip_low=0.2, clip_high=0.2):
    return (logp * 0).sum()
