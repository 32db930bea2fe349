"""Both functions exist, but with parameter names of their own."""

import torch


def masked_is_weights(log_probs, old_log_probs, mask, eps_low=0.2, eps_high=0.2):
    return torch.zeros_like(log_probs)


def offpolicy_loss(logp, rollout_logp, adv, mask, clip_low=0.2, clip_high=0.2):
    return (logp * 0).sum()
