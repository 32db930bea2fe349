"""Trivial answer: the raw ratio everywhere, with neither the mask nor the interval applied."""

import torch


def masked_is_weights(logp, rollout_logp, mask, clip_low=0.2, clip_high=0.2):
    return torch.exp(logp.detach() - rollout_logp.detach())


def offpolicy_loss(logp, rollout_logp, advantages, mask, clip_low=0.2, clip_high=0.2):
    ratio = torch.exp(logp.detach() - rollout_logp.detach())  # [B, L]
    return -(ratio * advantages.detach()[:, None] * logp).mean()
