# nora: one response at a time. For A >= 0 the surrogate is -A * min(r, 1 + eps_high); for A < 0 it is
# -A * max(r, 1 - eps_low), then capped by the dual clip. Python loops over responses, tensors inside.
from __future__ import annotations

import math

import torch


def _check(logp, old_logp, advantages, mask, eps_low, eps_high, dual_clip, reduction):
    if not isinstance(logp, torch.Tensor) or logp.ndim != 2 or not torch.is_floating_point(logp):
        raise ValueError("logp must be a 2-D floating tensor")
    if tuple(old_logp.shape) != tuple(logp.shape) or tuple(mask.shape) != tuple(logp.shape):
        raise ValueError("old_logp and mask must have exactly logp's shape")
    if tuple(advantages.shape) != (logp.shape[0],):
        raise ValueError("advantages must have shape (B,)")
    if math.isnan(eps_low) or eps_low < 0 or eps_low >= 1:
        raise ValueError("need 0 <= eps_low < 1")
    if not math.isfinite(eps_high) or eps_high <= 0:
        raise ValueError("need a finite eps_high > 0")
    if dual_clip is not None and (not math.isfinite(dual_clip) or dual_clip <= 1):
        raise ValueError("dual_clip must be None or a finite number > 1")
    if reduction not in {"token_mean", "seq_mean"}:
        raise ValueError(f"unknown reduction {reduction!r}")


def ppo_clip_loss(logp, old_logp, advantages, mask, eps_low=0.2, eps_high=0.2, dual_clip=None,
                  reduction="token_mean"):
    _check(logp, old_logp, advantages, mask, eps_low, eps_high, dual_clip, reduction)
    valid = mask != 0
    # a zero that carries logp's graph, NaN padding excluded: the loss of an empty batch
    zero = torch.where(valid, logp, torch.zeros_like(logp)).sum() * 0
    sums, counts, clipped = [], [], 0
    for i in range(logp.shape[0]):
        row = valid[i]
        r = torch.exp(logp[i][row] - old_logp[i][row].detach())
        a = float(advantages[i])
        if a >= 0:
            tokens = -a * torch.clamp(r, max=1 + eps_high)
            clipped += int((r > 1 + eps_high).sum()) if a > 0 else 0
        else:
            tokens = -a * torch.clamp(r, min=1 - eps_low)
            clipped += int((r < 1 - eps_low).sum())
            if dual_clip is not None:
                tokens = torch.clamp(tokens, max=-dual_clip * a)
        sums.append(tokens.sum())
        counts.append(int(row.sum()))
    total = sum(counts)
    if reduction == "token_mean":
        loss = zero + sum(sums) / max(1, total)
    else:
        loss = zero + sum(s / max(1, n) for s, n in zip(sums, counts, strict=True)) / len(sums)
    clipfrac = torch.tensor(clipped / max(1, total), dtype=logp.dtype, device=logp.device)
    return loss, clipfrac
