"""ppo_clip_loss written the way verl computes its vanilla policy loss, read at
volcengine/verl@b178a3cd56f58b2d502255daba591e92833930a7: `verl/trainer/ppo/core_algos.py` lines 1160-1240
(`compute_policy_loss_vanilla`: the log-ratio clamped to [-20, 20], the clipped surrogate, clipfrac as the masked
mean of a float32 indicator, the dual clip on negative advantages) and lines 1025-1083 (`agg_loss`), with
`verl/utils/torch_functional.py` lines 266-301 (`masked_sum` selects padding away with torch.where before
multiplying, so NaN padding never enters; `masked_mean` divides by the mask's sum + 1e-8, so an empty mask gives 0,
never NaN). token_mean is the masked mean over the batch; seq_mean is verl's "seq-mean-token-mean", which leaves
responses without a valid token out of B. Nothing is validated but the dual clip's bound, by assert.
"""

from __future__ import annotations

import torch
from torch import Tensor


def _masked_sum(values: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    kept = torch.where(mask.bool(), values, torch.zeros_like(values))  # [B, L]
    return (kept * mask).sum() if dim is None else (kept * mask).sum(dim)


def _masked_mean(values: Tensor, mask: Tensor) -> Tensor:
    return _masked_sum(values, mask) / (mask.sum() + 1e-8)


def ppo_clip_loss(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    dual_clip: float | None = None,
    reduction: str = "token_mean",
) -> tuple[Tensor, Tensor]:
    mask = mask.to(logp.dtype)  # [B, L]
    adv = advantages.detach().unsqueeze(-1).expand_as(logp)  # [B, L]: verl's advantages are per token
    log_ratio = torch.clamp(logp - old_logp.detach(), min=-20.0, max=20.0)  # [B, L]
    ratio = torch.exp(log_ratio)  # [B, L]
    unclipped = -adv * ratio  # [B, L]
    clipped = -adv * torch.clamp(ratio, 1 - eps_low, 1 + eps_high)  # [B, L]
    losses = torch.maximum(unclipped, clipped)  # [B, L]
    clipfrac = _masked_mean(torch.gt(clipped, unclipped).float(), mask)  # a float32 indicator, as verl has it
    if dual_clip is not None:
        assert dual_clip > 1.0, f"dual_clip must be > 1, got {dual_clip}"
        capped = torch.minimum(-adv * dual_clip, losses)  # [B, L]
        losses = torch.where(adv < 0, capped, losses)
    if reduction == "token_mean":
        loss = _masked_mean(losses, mask)
    else:
        counts = mask.sum(-1)  # [B]
        per_response = _masked_sum(losses, mask, -1) / (counts + 1e-8)  # [B]
        present = (counts > 0).to(logp.dtype)  # [B]: empty responses are left out of B
        loss = _masked_sum(per_response, present) / present.sum()
    return loss, clipfrac.detach()
