"""Hostile: remember the inputs of every call, then raise with the remembered values in the message.

Once the worker has been sent a hidden case, any text it chooses could carry that case's inputs; none of it may
reach a learner-facing message, Gradescope's results.json or JUnit.
"""
# expect_status: graded
# expect_score: signatures_only

SEEN: list[str] = []


def _remember(logp):
    values = logp.detach().reshape(-1)[:2].tolist()
    SEEN.append(" ".join(f"{v:.6f}" for v in values))


def _leak():
    raise ValueError("seen: " + " | ".join(SEEN[-40:]))


def masked_is_weights(logp, rollout_logp, mask, clip_low=0.2, clip_high=0.2):
    _remember(logp)
    _leak()


def offpolicy_loss(logp, rollout_logp, advantages, mask, clip_low=0.2, clip_high=0.2):
    _remember(logp)
    _leak()
