"""Trivial answer: the rollout log-probabilities echoed back."""


def score_centering_loss(
    logits,
    tokens,
    rollout_logp,
    head_ids,
    rollout_head_logp,
    advantages,
    mask,
    mode="none",
    low=None,
    high=None,
    eps=1e-6,
):
    return rollout_logp.detach().to(logits.dtype).clone()
