"""Kills its own process while being imported."""

import os

os._exit(3)


def masked_is_weights(logp, rollout_logp, mask, clip_low=0.2, clip_high=0.2):
    return logp


def offpolicy_loss(logp, rollout_logp, advantages, mask, clip_low=0.2, clip_high=0.2):
    return logp.sum()
