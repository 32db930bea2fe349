# maya: padding zeroed with masked_fill on fresh tensors, the mean log-ratio per response, one exp; GSPO-token
# written in log space as exp(sg(log s_i) + logp - sg(logp)), then zeroed on padding.
from __future__ import annotations

import math

import torch


def _check(logp, old_logp, mask):
    if not isinstance(logp, torch.Tensor) or logp.ndim != 2 or not torch.is_floating_point(logp):
        raise ValueError("logp must be a 2-D floating tensor")
    if tuple(old_logp.shape) != tuple(logp.shape) or tuple(mask.shape) != tuple(logp.shape):
        raise ValueError("old_logp and mask must have exactly logp's shape")


def _mean_log_ratio(logp, old_logp, mask):
    pad = mask == 0
    diff = (logp - old_logp.detach()).masked_fill(pad, 0.0)
    count = (~pad).sum(dim=1).clamp(min=1)
    return diff.sum(dim=1) / count.to(logp.dtype), (~pad).sum(dim=1)


def sequence_ratio(logp, old_logp, mask):
    _check(logp, old_logp, mask)
    return _mean_log_ratio(logp, old_logp, mask)[0].exp()


def gspo_loss(logp, old_logp, advantages, mask, eps_low=3e-4, eps_high=4e-4):
    _check(logp, old_logp, mask)
    if tuple(advantages.shape) != (logp.shape[0],):
        raise ValueError("advantages must have shape (B,)")
    if math.isnan(eps_low) or not 0 <= eps_low < 1:
        raise ValueError("need 0 <= eps_low < 1")
    if not math.isfinite(eps_high) or eps_high <= 0:
        raise ValueError("need a finite eps_high > 0")
    mean, count = _mean_log_ratio(logp, old_logp, mask)
    s = mean.exp()
    a = advantages.detach().to(logp.dtype)
    plain, capped = -a * s, -a * s.clamp(1 - eps_low, 1 + eps_high)
    per_response = torch.maximum(plain, capped).masked_fill(count == 0, 0.0)
    loss = per_response.sum() / max(logp.shape[0], 1)
    clipped = ((capped > plain) & (count > 0)).to(torch.float64)
    share = (clipped * count.to(torch.float64)).sum() / count.sum().clamp(min=1).to(torch.float64)
    return loss, share.to(logp.dtype)


def gspo_token_ratio(logp, old_logp, mask):
    _check(logp, old_logp, mask)
    pad = mask == 0
    log_s = _mean_log_ratio(logp, old_logp, mask)[0].detach()[:, None]
    own = (logp - logp.detach()).masked_fill(pad, 0.0)
    return (log_s + own).exp().masked_fill(pad, 0.0)
