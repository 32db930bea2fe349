"""Both functions recurse through C frames with no recursion limit: the worker dies of a stack overflow."""
# expect_status: graded, budget_exceeded
# expect_score: signatures_only

import sys


class Deep:
    def __repr__(self):
        return repr(Deep())


def _overflow():
    sys.setrecursionlimit(10**7)
    return repr(Deep())


def masked_is_weights(logp, rollout_logp, mask, clip_low=0.2, clip_high=0.2):
    return _overflow()


def offpolicy_loss(logp, rollout_logp, advantages, mask, clip_low=0.2, clip_high=0.2):
    return _overflow()
