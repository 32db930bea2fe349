"""Answers tensors the judge's arithmetic cannot take: sparse weights and a loss on the meta device; they must
count as the learner's failure, never as a judge error."""
# expect_status: graded, budget_exceeded
# expect_score: signatures_only

import torch


def masked_is_weights(logp, rollout_logp, mask, clip_low=0.2, clip_high=0.2):
    return torch.zeros_like(logp).detach().to_sparse()


def offpolicy_loss(logp, rollout_logp, advantages, mask, clip_low=0.2, clip_high=0.2):
    return torch.zeros((), dtype=logp.dtype, device="meta")
