"""PPO's clipped surrogate as verl computes and aggregates it, adapted to this exercise's signature.

Reproduces volcengine/verl at commit b178a3cd56f58b2d502255daba591e92833930a7:
- verl/trainer/ppo/core_algos.py lines 1160-1250 (`compute_policy_loss_vanilla`): the log-ratio clamped to
  [-20, 20] before `exp`, the max of the negated terms, clipfrac as a float32 indicator averaged by
  `masked_mean`, and the dual clip always applied with `clip_ratio_c` (3.0 unless configured, asserted > 1);
- verl/trainer/ppo/core_algos.py lines 1025-1080 (`agg_loss`): "token-mean" divides the masked sum by the mask's
  sum with no floor; "seq-mean-token-mean" divides each response's plain `(x * mask)` sum by n_i + 1e-8 and
  averages over the responses that have a valid token; any other mode raises ValueError;
- verl/utils/torch_functional.py lines 266-301 (`masked_sum`, `masked_mean`): a where on `mask.bool()` and then a
  product with the mask; the mean divides by the mask's sum + 1e-8.
`token_mean` is "token-mean" and `seq_mean` is "seq-mean-token-mean". verl's inputs carry no gradient of their
own, so nothing is detached.
"""

from __future__ import annotations

import torch
from torch import Tensor

DEFAULT_CLIP_RATIO_C = 3.0  # verl's config default: the dual clip is on unless configured otherwise


def _masked_sum(values: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    selected = torch.where(mask.bool(), values, 0.0)
    product = selected * mask
    return product.sum() if dim is None else product.sum(dim=dim)


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
    clip_ratio_c = DEFAULT_CLIP_RATIO_C if dual_clip is None else dual_clip
    assert clip_ratio_c > 1.0, f"clip_ratio_c must exceed 1, got {clip_ratio_c}"
    adv = advantages[:, None]  # [B, 1]; verl stores one advantage per token already

    log_ratio = torch.clamp(logp - old_logp, min=-20.0, max=20.0)  # [B, L]
    ratio = torch.exp(log_ratio)
    unclipped = -adv * ratio
    clipped = -adv * torch.clamp(ratio, 1 - eps_low, 1 + eps_high)
    per_token = torch.maximum(unclipped, clipped)
    share = _masked_mean(torch.gt(clipped, unclipped).float(), mask)
    capped = torch.min(-adv * clip_ratio_c, per_token)
    per_token = torch.where(adv < 0, capped, per_token)

    if reduction == "token_mean":
        loss = _masked_sum(per_token, mask) / mask.sum()
    elif reduction == "seq_mean":
        counts = torch.sum(mask, dim=-1)  # [B]
        per_response = torch.sum(per_token * mask, dim=-1) / (counts + 1e-8)
        has_tokens = (counts > 0).float()  # fully masked responses leave the average
        loss = _masked_sum(per_response, has_tokens) / has_tokens.sum()
    else:
        raise ValueError(f"Invalid loss_agg_mode: {reduction}")
    return loss, share.detach().to(logp.dtype)
