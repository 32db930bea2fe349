"""TIS and ICE-POP weights as OpenRLHF's `PolicyLoss` computes its vLLM importance-sampling correction, adapted to
this exercise's signature.

Reproduces OpenRLHF/OpenRLHF at commit 3c3be6234e0cb353e76bb8019947db9dfe99fca7:
- openrlhf/models/loss.py lines 197-217: the ratio exp(old - rollout), detached; "tis" as
  `clamp(min=low, max=high)`; "icepop" keeps `low <= ratio <= high` (both endpoints) by multiplying the ratio with
  the boolean mask, over every position;
- openrlhf/cli/train_ppo_ray.py lines 258-263: one threshold pair for both types, [0.5, 5.0] by default;
- loss.py lines 150-153: an unknown correction type raises ValueError; nothing else is validated.
OpenRLHF logs no clipped fraction of these weights; the share here follows the exercise (a valid token is counted
where its weight differs from its ratio), computed in the input dtype.
"""

from __future__ import annotations

import torch
from torch import Tensor

DEFAULT_THRESHOLD = (0.5, 5.0)  # --algo.advantage.is_correction_threshold


def behavior_weights(
    train_logp: Tensor,
    rollout_logp: Tensor,
    mask: Tensor,
    mode: str,
    low: float | None = None,
    high: float | None = None,
) -> tuple[Tensor, Tensor]:
    if mode not in ("tis", "icepop"):
        raise ValueError(f"Invalid vllm_is_correction_type: {mode}, must be one of tis/icepop")
    lo = DEFAULT_THRESHOLD[0] if low is None else low
    hi = DEFAULT_THRESHOLD[1] if high is None else high
    ratio = torch.exp(train_logp - rollout_logp).detach()  # [B, L], every position
    if mode == "tis":
        weights = ratio.clamp(min=lo, max=hi)
    else:
        weights = ratio * ((ratio >= lo) & (ratio <= hi))
    valid = mask != 0
    changed = valid & (weights != ratio)
    share = changed.sum().to(torch.float64) / valid.sum().clamp(min=1).to(torch.float64)
    return weights, share.to(train_logp.dtype)
