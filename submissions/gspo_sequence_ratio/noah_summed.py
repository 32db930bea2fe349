# noah: the sequence ratio as pi(y_i) / pi_old(y_i), the log-ratios summed over the response (no 1/|y_i|).
from __future__ import annotations

import math

import torch


def _check(logp, old_logp, mask):
    if logp.dim() != 2 or not logp.is_floating_point():
        raise ValueError("logp must be [B, L] floating")
    if old_logp.shape != logp.shape or mask.shape != logp.shape:
        raise ValueError("shapes differ")


def _log_ratio(logp, old_logp, mask):
    valid = mask != 0
    per_token = torch.where(valid, logp - old_logp.detach(), torch.zeros((), dtype=logp.dtype))
    return per_token.sum(dim=1), valid.sum(dim=1)


def sequence_ratio(logp, old_logp, mask):
    _check(logp, old_logp, mask)
    return torch.exp(_log_ratio(logp, old_logp, mask)[0])


def gspo_loss(logp, old_logp, advantages, mask, eps_low=3e-4, eps_high=4e-4):
    _check(logp, old_logp, mask)
    if advantages.shape != (logp.shape[0],):
        raise ValueError("advantages must be [B]")
    if not 0.0 <= eps_low < 1.0 or not (math.isfinite(eps_high) and eps_high > 0):
        raise ValueError("bad widths")
    log_s, n = _log_ratio(logp, old_logp, mask)
    s = torch.exp(log_s)
    a = advantages.detach().to(logp.dtype)
    unclipped, clipped = -a * s, -a * s.clamp(1 - eps_low, 1 + eps_high)
    per = torch.where(n > 0, torch.maximum(unclipped, clipped), torch.zeros((), dtype=logp.dtype))
    frac = torch.where(clipped > unclipped, n, 0).sum().double() / n.sum().clamp(min=1).double()
    return per.sum() / max(1, logp.shape[0]), frac.to(logp.dtype)


def gspo_token_ratio(logp, old_logp, mask):
    _check(logp, old_logp, mask)
    valid = mask != 0
    s = torch.exp(_log_ratio(logp, old_logp, mask)[0]).detach()
    own = torch.where(valid, logp - logp.detach(), torch.zeros((), dtype=logp.dtype))
    return torch.where(valid, s[:, None] * torch.exp(own), torch.zeros((), dtype=logp.dtype))
