"""TIS and ICE-POP weights as NeMo-RL's `ClippedPGLossFn` computes its truncated importance sampling, adapted to this
exercise's signature.

Reproduces NVIDIA-NeMo/RL at commit 7ea279abfbeb698b092856d0dab61e7cf39bc909:
- nemo_rl/algorithms/loss/loss_functions.py lines 292-318: when a truncation type is set, the upper bound
  `truncated_importance_sampling_ratio` must be given and positive, ICE-POP needs its lower bound, and the lower
  bound may not exceed the upper one, all by `assert`;
- lines 577-584: the token weight exp(prev - generation) with `nan_to_num(nan=0, posinf=0, neginf=0)`;
- lines 596-636: "tis" clamps to [min, max] with min 0 when unset and counts `w > max or w < min` as out of bounds;
  "icepop" keeps `min <= w <= max` (both endpoints), zeroes the rest and counts every token not kept;
- nemo_rl/algorithms/utils.py lines 212-224 (`masked_mean`): the out-of-bounds share as a float32 indicator,
  `sum(x * mask) / (sum(mask) + 1e-8)`.
The weights are computed from the log-probabilities as given: NeMo-RL's token path detaches nothing.
"""

from __future__ import annotations

import torch
from torch import Tensor


def behavior_weights(
    train_logp: Tensor,
    rollout_logp: Tensor,
    mask: Tensor,
    mode: str,
    low: float | None = None,
    high: float | None = None,
) -> tuple[Tensor, Tensor]:
    assert mode in ("tis", "icepop"), f"truncated importance sampling type must be 'tis' or 'icepop', got {mode}"
    assert high is not None and high > 0, "the truncation ratio should be positive"
    if low is not None:
        assert low <= high, "the lower truncation ratio must be <= the upper one"
    if mode == "icepop":
        assert low is not None, "ICE-POP needs its lower truncation ratio"
    weights = torch.exp(train_logp - rollout_logp)  # [B, L]
    weights = torch.nan_to_num(weights, nan=0.0, posinf=0.0, neginf=0.0)
    if mode == "tis":
        floor = 0.0 if low is None else low
        out_of_bounds = (weights > high) | (weights < floor)
        weights = torch.clamp(weights, min=floor, max=high)
    else:
        assert low is not None
        kept = (weights >= low) & (weights <= high)
        out_of_bounds = ~kept
        weights = torch.where(kept, weights, torch.zeros_like(weights))
    share = torch.sum(out_of_bounds.float() * mask) / (torch.sum(mask) + 1e-8)
    return weights, share.to(train_logp.dtype)
