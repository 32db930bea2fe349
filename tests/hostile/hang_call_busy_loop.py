"""Both functions spin for up to 60 s: each call times out and the submission's budget caps the total."""
# expect_status: graded, budget_exceeded
# expect_score: signatures_only

import time


def _spin():
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        pass


def masked_is_weights(logp, rollout_logp, mask, clip_low=0.2, clip_high=0.2):
    return _spin()


def offpolicy_loss(logp, rollout_logp, advantages, mask, clip_low=0.2, clip_high=0.2):
    return _spin()
