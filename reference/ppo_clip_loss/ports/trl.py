"""PPO's clipped surrogate as TRL's `GRPOTrainer` computes it for `loss_type="grpo"` and `"bnpo"`, adapted to this
exercise's signature.

Reproduces huggingface/trl at commit f2cd57710ae345ea6428ae95363267fcf38a3dc8, trl/trainer/grpo_trainer.py:
- lines 3054-3091: the ratio `coef_1 = exp(logp - old)`, `coef_2` its clamp, two-sided clipping by `delta`
  (`coef_1` clamped above at delta, for every sign of the advantage), and -min(coef_1 A, coef_2 A);
- lines 3124-3133: `"grpo"` as `((x * mask).sum(-1) / mask.sum(-1).clamp(min=1)).mean()` and `"bnpo"` as
  `(x * mask).sum() / mask.sum().clamp(min=1)`; any other loss type raises ValueError;
- lines 3224-3249: the clip ratio as the share of valid tokens with (coef_1 < 1 - eps_low and A < 0) or
  (coef_1 > 1 + eps_high and A > 0), a float32 indicator over `mask.sum().float().clamp(min=1)`.
`token_mean` is `"bnpo"`, `seq_mean` is `"grpo"` and `dual_clip` is `delta`. TRL's old log-probabilities and
advantages come as data, so nothing is detached.
"""

from __future__ import annotations

import torch
from torch import Tensor


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
    adv = advantages.unsqueeze(1)  # [B, 1]
    coef_1 = torch.exp(logp - old_logp)  # [B, L]
    coef_2 = torch.clamp(coef_1, 1 - eps_low, 1 + eps_high)
    if dual_clip is not None:
        coef_1 = torch.clamp(coef_1, max=dual_clip)  # two-sided clipping: a cap on the ratio itself
    per_token = -torch.min(coef_1 * adv, coef_2 * adv)

    if reduction == "seq_mean":
        loss = ((per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
    elif reduction == "token_mean":
        loss = (per_token * mask).sum() / mask.sum().clamp(min=1.0)
    else:
        raise ValueError(f"Unknown loss type: {reduction}")

    low = (coef_1 < 1 - eps_low) & (adv < 0)
    high = (coef_1 > 1 + eps_high) & (adv > 0)
    region = (low | high).float()
    share = (region * mask).sum() / mask.sum().float().clamp(min=1.0)
    return loss, share.detach().to(logp.dtype)
