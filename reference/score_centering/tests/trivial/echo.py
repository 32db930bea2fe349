"""Trivial answer: the advantages echoed back."""


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
    return advantages.detach().to(logits.dtype).clone()
