"""GLM-5's off-policy correction as verl's rollout correction builds it: token-level rejection sampling
(`rollout_rs="token_k1"`) with token-level importance weights (`rollout_is="token"`), adapted to this exercise's
signature.

Reproduces volcengine/verl at commit b178a3cd56f58b2d502255daba591e92833930a7:
- verl/trainer/ppo/rollout_corr_helper.py lines 529-566 (`compute_rollout_correction_weights`): the log-ratio
  old - rollout clamped to [-20, 20], `exp`, multiplied by the response mask, truncated above at the threshold
  (here 1 + clip_high, so that it never bites a kept token) and detached;
- lines 93-153 and 221-275 (`compute_rollout_rejection_mask`): k1 = -log-ratio kept where
  `log(lower) <= k1 <= log(upper)`, both endpoints, compared in log space; thresholds must be positive
  (ValueError); lines 338 and 371: the rejection folded into the response mask;
- lines 943-997: the response mask replaced by the rejected one for training, so the loss
  (verl/trainer/ppo/core_algos.py lines 1055-1058, "token-mean") divides by the surviving tokens only;
- core_algos.py lines 1210-1239 (`compute_policy_loss_vanilla`): the PPO loss, at r = 1 in value on the first
  update (old == current), dual clip 3, times the weights; verl/utils/torch_functional.py lines 266-284
  (`masked_sum`): a where on the mask, then a product with it.
The ratio bounds 1 - clip_low and 1 + clip_high become verl's k1 thresholds 1 / (1 + clip_high) and
1 / (1 - clip_low).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def _k1_keep(log_ratio_safe: Tensor, clip_low: float, clip_high: float) -> Tensor:
    lower, upper = 1.0 / (1.0 + clip_high), 1.0 / (1.0 - clip_low)
    if lower <= 0 or upper <= 0:
        raise ValueError(f"thresholds must be positive, got {lower}_{upper}")
    k1 = -log_ratio_safe
    return (k1 >= math.log(lower)) & (k1 <= math.log(upper))


def _kept_mask(logp: Tensor, rollout_logp: Tensor, mask: Tensor, clip_low: float, clip_high: float) -> Tensor:
    log_ratio_safe = torch.clamp(logp.detach() - rollout_logp, min=-20.0, max=20.0)
    keep = _k1_keep(log_ratio_safe, clip_low, clip_high).to(log_ratio_safe.dtype)
    return (mask * keep).to(mask.dtype)


def _weights(logp: Tensor, rollout_logp: Tensor, mask: Tensor, clip_high: float) -> Tensor:
    log_ratio_safe = torch.clamp(logp.detach() - rollout_logp, min=-20.0, max=20.0)
    weights = torch.exp(log_ratio_safe) * mask
    return weights.clamp(max=1.0 + clip_high).detach()


def masked_is_weights(
    logp: Tensor, rollout_logp: Tensor, mask: Tensor, clip_low: float = 0.2, clip_high: float = 0.2
) -> Tensor:
    kept = _kept_mask(logp, rollout_logp, mask, clip_low, clip_high)
    return _weights(logp, rollout_logp, mask, clip_high) * kept


def offpolicy_loss(
    logp: Tensor,
    rollout_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
) -> Tensor:
    kept = _kept_mask(logp, rollout_logp, mask, clip_low, clip_high)
    adv = advantages[:, None]  # [B, 1]
    ratio = torch.exp(torch.clamp(logp - logp.detach(), min=-20.0, max=20.0))  # the first update: old == current
    unclipped = -adv * ratio
    clipped = -adv * torch.clamp(ratio, 1 - clip_low, 1 + clip_high)
    per_token = torch.maximum(unclipped, clipped)
    per_token = torch.where(adv < 0, torch.min(-adv * 3.0, per_token), per_token)
    per_token = per_token * _weights(logp, rollout_logp, mask, clip_high)
    selected = torch.where(kept.bool(), per_token, 0.0) * kept
    return selected.sum() / kept.sum()
