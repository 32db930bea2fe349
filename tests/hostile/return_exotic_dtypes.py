"""Answers dtypes outside the judge's allow-list: float8 weights and a torch.bits8 loss, both dense CPU tensors
that cross the wire; they must count as the learner's malformed answer, never as a judge error."""
# expect_status: graded, budget_exceeded
# expect_score: signatures_only

import torch


def masked_is_weights(logp, rollout_logp, mask, clip_low=0.2, clip_high=0.2):
    return torch.zeros_like(logp).detach().to(torch.float8_e4m3fn)


def offpolicy_loss(logp, rollout_logp, advantages, mask, clip_low=0.2, clip_high=0.2):
    return torch.zeros((), dtype=torch.uint8).view(torch.bits8)
