"""Both functions read address 0 through ctypes: the worker dies of SIGSEGV in every call."""
# expect_status: graded, budget_exceeded
# expect_score: signatures_only

import ctypes


def masked_is_weights(logp, rollout_logp, mask, clip_low=0.2, clip_high=0.2):
    return ctypes.string_at(0)


def offpolicy_loss(logp, rollout_logp, advantages, mask, clip_low=0.2, clip_high=0.2):
    return ctypes.string_at(0)
