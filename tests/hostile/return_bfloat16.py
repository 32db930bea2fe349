"""The right values, returned as bfloat16 (an allowed dtype, but not the contract's): the dtype checks fail, the
toy's series are bfloat16 until the judge converts them, and nothing may become a judge error."""
# expect_status: graded, budget_exceeded

import torch


def _weights(logp, rollout_logp, mask, clip_low, clip_high):
    valid = mask != 0
    zero = torch.zeros((), dtype=logp.dtype)
    ratio = torch.exp(torch.where(valid, logp.detach() - rollout_logp.detach(), zero))
    return torch.where(valid & (ratio > 1 - clip_low) & (ratio < 1 + clip_high), ratio, zero)


def masked_is_weights(logp, rollout_logp, mask, clip_low=0.2, clip_high=0.2):
    return _weights(logp, rollout_logp, mask, clip_low, clip_high).to(torch.bfloat16)


def offpolicy_loss(logp, rollout_logp, advantages, mask, clip_low=0.2, clip_high=0.2):
    valid = mask != 0
    zero = torch.zeros((), dtype=logp.dtype)
    weights = _weights(logp, rollout_logp, mask, clip_low, clip_high)
    coeff = torch.where(valid, weights * advantages.detach()[:, None], zero)
    return (-(coeff * torch.where(valid, logp, zero)).sum() / valid.sum().clamp(min=1)).to(torch.bfloat16)
