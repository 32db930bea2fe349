"""Both functions call os._exit(0): the worker ends in every call."""
# expect_status: graded, budget_exceeded
# expect_score: signatures_only

import os


def masked_is_weights(logp, rollout_logp, mask, clip_low=0.2, clip_high=0.2):
    return os._exit(0)


def offpolicy_loss(logp, rollout_logp, advantages, mask, clip_low=0.2, clip_high=0.2):
    return os._exit(0)
