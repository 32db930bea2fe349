"""Trivial answer: a loss of 1 per sequence."""

import torch


def score_centering_loss(
    logits,
    tokens,
    rollout_logp,
    head_ids,
    rollout_head_logp,
    advantages,
    mask,
    mode="none",
    low=None,
    high=None,
    eps=1e-6,
):
    return torch.ones(logits.shape[0], dtype=logits.dtype)
