"""Both functions raise KeyboardInterrupt: an error of the learner's code, never the worker's end."""
# expect_status: graded
# expect_score: signatures_only


def _interrupt():
    raise KeyboardInterrupt


def masked_is_weights(logp, rollout_logp, mask, clip_low=0.2, clip_high=0.2):
    return _interrupt()


def offpolicy_loss(logp, rollout_logp, advantages, mask, clip_low=0.2, clip_high=0.2):
    return _interrupt()
