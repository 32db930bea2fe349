"""Answers giant tensors: weights as a 2**40-element broadcast view of one zero (a terabyte once copied), the
loss as 2**25 real float32 zeros (128 MiB, over the result limit); never a judge error."""
# expect_status: graded, budget_exceeded
# expect_score: signatures_only

import torch


def masked_is_weights(logp, rollout_logp, mask, clip_low=0.2, clip_high=0.2):
    return torch.zeros(1, dtype=logp.dtype).expand(1 << 40)


def offpolicy_loss(logp, rollout_logp, advantages, mask, clip_low=0.2, clip_high=0.2):
    return torch.zeros(1 << 25, dtype=logp.dtype)
