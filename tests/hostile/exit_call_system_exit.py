"""Both functions raise SystemExit: an error of the learner's code, never the worker's end."""
# expect_status: graded
# expect_score: signatures_only

import sys


def masked_is_weights(logp, rollout_logp, mask, clip_low=0.2, clip_high=0.2):
    return sys.exit(0)


def offpolicy_loss(logp, rollout_logp, advantages, mask, clip_low=0.2, clip_high=0.2):
    return sys.exit(0)
