"""GLM-5's off-policy correction as OpenRLHF's `PolicyLoss` applies its ICEPOP correction, adapted to this
exercise's signature.

Reproduces OpenRLHF/OpenRLHF at commit 3c3be6234e0cb353e76bb8019947db9dfe99fca7:
- openrlhf/models/loss.py lines 197-205: `vllm_is = exp(old - rollout).detach()`, kept where
  `vllm_is >= low and vllm_is <= high` (both endpoints), and the rejection applied by multiplying with the boolean
  mask (`vllm_is * mask`), over every position; then `loss = vllm_is * loss`;
- loss.py lines 166-186: the PPO loss -min(r A, clip(r) A) with the log-ratio clamped to [-20, 20]; at the first
  update on a batch the old log-probs equal the current ones, so r = 1 in value and its gradient is d(logp);
- loss.py lines 11-31 with openrlhf/models/utils.py lines 166-169: the token-level loss
  `(x * mask).sum() / mask.sum()`, counting rejected tokens, with no floor.
The widths become OpenRLHF's absolute thresholds 1 - clip_low and 1 + clip_high. It validates no argument.
"""

from __future__ import annotations

import torch
from torch import Tensor


def masked_is_weights(
    logp: Tensor, rollout_logp: Tensor, mask: Tensor, clip_low: float = 0.2, clip_high: float = 0.2
) -> Tensor:
    vllm_is = torch.exp(logp.detach() - rollout_logp).detach()  # [B, L], every position
    keep = (vllm_is >= 1.0 - clip_low) & (vllm_is <= 1.0 + clip_high)
    return vllm_is * keep


def offpolicy_loss(
    logp: Tensor,
    rollout_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
) -> Tensor:
    adv = advantages[:, None]  # [B, 1]
    ratio = (logp - logp.detach()).clamp(min=-20.0, max=20.0).exp()  # the first update: old == current
    surr1 = ratio * adv
    surr2 = ratio.clamp(1 - clip_low, 1 + clip_high) * adv
    per_token = -torch.min(surr1, surr2)
    per_token = masked_is_weights(logp, rollout_logp, mask, clip_low, clip_high) * per_token
    return (per_token * mask).sum() / mask.sum()
