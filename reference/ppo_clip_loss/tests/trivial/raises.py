"""Trivial answer: every call refused."""


def ppo_clip_loss(logp, old_logp, advantages, mask, eps_low=0.2, eps_high=0.2, dual_clip=None, reduction="token_mean"):
    raise ValueError("every call is invalid")
