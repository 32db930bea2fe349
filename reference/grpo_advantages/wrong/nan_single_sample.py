# defect: Constant groups are zeroed by multiplying with a 0/1 mask, so a NaN survives as 0 * NaN.
# must_fail: single_sample_groups
# may_fail: oracle_std, oracle_std_unbiased, constant_groups
"""Known-wrong grpo_advantages solution (nan_single_sample).

Constant groups are zeroed by multiplying with a 0/1 mask, so a NaN survives as 0 * NaN.

With group_size = 1 and unbiased=True (or eps = 0) the division is 0 / 0 and the mask cannot remove it.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def _validate(rewards: Tensor, group_size: int, eps: float) -> None:
    if rewards.dim() != 1 or not rewards.is_floating_point():
        raise ValueError(f"rewards must be a 1-D floating Tensor, got {tuple(rewards.shape)} {rewards.dtype}")
    if not bool(torch.isfinite(rewards).all()):
        raise ValueError("rewards must be finite")
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
        raise ValueError(f"group_size must be an int >= 1, got {group_size!r}")
    if rewards.shape[0] % group_size != 0:
        raise ValueError(f"{rewards.shape[0]} rewards do not split into groups of {group_size}")
    if not (math.isfinite(eps) and eps >= 0.0):
        raise ValueError(f"eps must be finite and >= 0, got {eps}")


def grpo_advantages(
    rewards: Tensor, group_size: int, std_normalize: bool = True, eps: float = 1e-6, unbiased: bool = False
) -> Tensor:
    _validate(rewards, group_size, eps)
    grouped = rewards.detach().reshape(-1, group_size)  # [N / G, G]
    constant = (grouped == grouped[:, :1]).all(dim=1, keepdim=True)  # [N / G, 1]
    centred = grouped - grouped.mean(dim=1, keepdim=True)  # [N / G, G]
    if std_normalize:
        ddof = 1 if unbiased else 0
        sigma = ((centred * centred).sum(dim=1, keepdim=True) / (group_size - ddof)).sqrt()  # [N / G, 1]
        centred = centred / (sigma + eps)
    return (centred * ~constant).reshape(-1)  # [N]
