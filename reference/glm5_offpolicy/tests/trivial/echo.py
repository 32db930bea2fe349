"""Trivial answer: the input echoed back (weights = logp, loss = minus the mean of logp)."""


def masked_is_weights(logp, rollout_logp, mask, clip_low=0.2, clip_high=0.2):
    return logp.detach().clone()


def offpolicy_loss(logp, rollout_logp, advantages, mask, clip_low=0.2, clip_high=0.2):
    return -logp.mean()
