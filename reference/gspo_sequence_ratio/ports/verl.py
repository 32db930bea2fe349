"""GSPO as verl computes it (loss_mode "gspo"), adapted to this exercise's three functions.

Reproduces volcengine/verl at commit b178a3cd56f58b2d502255daba591e92833930a7:
- verl/trainer/ppo/core_algos.py lines 1253-1323 (`compute_policy_loss_gspo`): the mean log-ratio as
  `sum(negative_approx_kl * response_mask, -1) / sum(response_mask, -1).clamp(min=1)`; always the GSPO-token form,
  `log_prob - sg(log_prob) + sg(mean log-ratio)`, clamped at max 10 before `exp`, broadcast over every position;
  the PPO rule per token on that ratio; clipfrac as `masked_mean(gt(pg_losses2, pg_losses1).float(), mask)`;
- verl/trainer/ppo/core_algos.py lines 1025-1081 (`agg_loss`, "seq-mean-token-mean", called without global batch
  information): each response's `sum(loss * mask, -1)` over its count + 1e-8, averaged over the responses that
  have a valid token;
- verl/utils/torch_functional.py lines 266-301 (`masked_sum`, `masked_mean`): a where on the mask, then a product
  with it, over the mask's sum + 1e-8;
- verl/workers/config/actor.py lines 138-140: clip_ratio, clip_ratio_low and clip_ratio_high default to 0.2.
verl's inputs carry no gradient of their own, so nothing is detached, and nothing is validated.
"""

from __future__ import annotations

import torch
from torch import Tensor

CLIP_RATIO = 0.2  # verl's actor config default for both widths
LOG_RATIO_MAX = 10.0  # "clamp for numerical stability" on the GSPO-token log-ratio


def _masked_mean(values: Tensor, mask: Tensor) -> Tensor:
    return (torch.where(mask.bool(), values, 0.0) * mask).sum() / (mask.sum() + 1e-8)


def _mean_log_ratio(logp: Tensor, old_logp: Tensor, mask: Tensor) -> Tensor:
    return torch.sum((logp - old_logp) * mask, dim=-1) / torch.sum(mask, dim=-1).clamp(min=1)  # [B]


def sequence_ratio(logp: Tensor, old_logp: Tensor, mask: Tensor) -> Tensor:
    return torch.exp(_mean_log_ratio(logp, old_logp, mask))


def gspo_token_ratio(logp: Tensor, old_logp: Tensor, mask: Tensor) -> Tensor:
    log_ratio = logp - logp.detach() + _mean_log_ratio(logp, old_logp, mask).detach().unsqueeze(-1)  # [B, L]
    return torch.exp(torch.clamp(log_ratio, max=LOG_RATIO_MAX))


def gspo_loss(logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, eps_low: float = CLIP_RATIO,
              eps_high: float = CLIP_RATIO) -> tuple[Tensor, Tensor]:
    ratio = gspo_token_ratio(logp, old_logp, mask)  # [B, L]
    adv = advantages.unsqueeze(-1)  # verl's advantages are [B, L], the same value on every token
    losses1 = -adv * ratio
    losses2 = -adv * torch.clamp(ratio, 1 - eps_low, 1 + eps_high)
    losses = torch.maximum(losses1, losses2)
    counts = torch.sum(mask, dim=-1)  # [B]
    per_response = torch.sum(losses * mask, dim=-1) / (counts + 1e-8)
    nonempty = (counts > 0).float()
    loss = (torch.where(nonempty.bool(), per_response, 0.0) * nonempty).sum() / nonempty.sum()
    clipfrac = _masked_mean(torch.gt(losses2, losses1).float(), mask)
    return loss, clipfrac.detach().to(logp.dtype)  # verl logs it with .item(): computed in float32
