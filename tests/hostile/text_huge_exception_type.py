"""Every call raises an exception whose class name is 8 MiB long (the worker caps messages, not type names):
an answer that large is the learner's malformed answer, and no report, page or terminal may carry it."""
# expect_status: graded, budget_exceeded
# expect_score: signatures_only

Huge = type("E" * (8 << 20), (ValueError,), {})


def masked_is_weights(logp, rollout_logp, mask, clip_low=0.2, clip_high=0.2):
    raise Huge("a huge type")


def offpolicy_loss(logp, rollout_logp, advantages, mask, clip_low=0.2, clip_high=0.2):
    raise Huge("a huge type")
