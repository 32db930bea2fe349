"""GLM-5's off-policy correction as slime's IcePop path computes it, adapted to this exercise's signature.

Reproduces THUDM/slime at commit 624b824a898ab0ec1fcb4d373004c7f3852bf515:
- slime/backends/megatron_utils/loss.py lines 908-931 (`icepop_function`): the ratio exp(train - rollout), kept
  where `ratio >= low and ratio <= high` (both endpoints) and 0 elsewhere, over every position (the loss mask acts
  only in the reducer), and `pg_loss * ice_weight`;
- loss.py lines 985-989 and 1031-1044: with no recomputed old log-probs, the old log-probs and the correction's
  train log-probs are the detached current ones, so the policy loss is the PPO surrogate at ratio exp(0) = 1,
  -A * ratio, whose value is -A and whose gradient is -A d(logp);
- slime/backends/megatron_utils/cp_utils.py lines 83-89 and loss.py lines 1317 and 1360-1365: with
  `--calculate-per-token-loss` (this exercise's token mean) the masked sums `(x * mask).sum()` over
  sum_i clamp_min(n_i, 1) of the original masks, so rejected tokens still count.
The widths become slime's absolute bounds 1 - clip_low and 1 + clip_high. slime validates no argument.
"""

from __future__ import annotations

import torch
from torch import Tensor


def masked_is_weights(
    logp: Tensor, rollout_logp: Tensor, mask: Tensor, clip_low: float = 0.2, clip_high: float = 0.2
) -> Tensor:
    ratio = torch.exp(logp.detach() - rollout_logp)  # [B, L], every position
    inside = (ratio >= 1.0 - clip_low) & (ratio <= 1.0 + clip_high)
    return torch.where(inside, ratio, torch.zeros_like(ratio))


def offpolicy_loss(
    logp: Tensor,
    rollout_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
) -> Tensor:
    adv = advantages[:, None]  # [B, 1]
    old_logp = logp.detach()  # no recomputed old log-probs: the current ones, detached
    ratio = torch.exp(-(old_logp - logp))  # 1 in value, d ratio / d logp = 1
    unclipped = -ratio * adv
    clipped = -ratio.clamp(1 - clip_low, 1 + clip_high) * adv
    per_token = torch.maximum(unclipped, clipped) * masked_is_weights(logp, rollout_logp, mask, clip_low, clip_high)
    tokens = torch.clamp_min(mask.sum(dim=1), 1).sum()  # sum_i max(1, n_i)
    return (per_token * mask).sum(dim=1).sum() / tokens
