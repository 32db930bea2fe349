# ada: I give every reward its group id and accumulate per-group sums with index_add, so the groups
# never have to be reshaped. A group is constant when its largest and smallest rewards coincide.
from __future__ import annotations

import math

import torch
from torch import Tensor


def _check(rewards: Tensor, group_size: int, eps: float) -> None:
    if not isinstance(rewards, Tensor) or rewards.ndim != 1 or not torch.is_floating_point(rewards):
        raise ValueError("rewards must be a 1-D floating point tensor")
    if rewards.isnan().any() or rewards.isinf().any():
        raise ValueError("rewards contains NaN or inf")
    if type(group_size) is not int or group_size <= 0:
        raise ValueError(f"group_size must be a positive int, not {group_size!r}")
    if len(rewards) % group_size:
        raise ValueError(f"len(rewards) = {len(rewards)} is not a multiple of group_size = {group_size}")
    if eps != eps or eps < 0 or math.isinf(eps):
        raise ValueError(f"eps must be a finite non-negative number, not {eps!r}")


def grpo_advantages(rewards, group_size, std_normalize=True, eps=1e-6, unbiased=False):
    _check(rewards, group_size, eps)
    r = rewards.detach().clone()
    n_groups = len(r) // group_size
    group = torch.arange(len(r)) // group_size  # group id of each reward
    sums = torch.zeros(n_groups, dtype=r.dtype).index_add_(0, group, r)
    mean = (sums / group_size)[group]
    adv = r - mean
    if std_normalize:
        squares = torch.zeros(n_groups, dtype=r.dtype).index_add_(0, group, adv * adv)
        divisor = group_size - 1 if unbiased else group_size
        if divisor > 0:
            sigma = torch.sqrt(squares / divisor)[group]
            adv = adv / (sigma + eps)
        # divisor == 0 only when group_size == 1: every group is constant and zeroed below
    highest = torch.full((n_groups,), -math.inf, dtype=r.dtype).scatter_reduce(0, group, r, "amax")
    lowest = torch.full((n_groups,), math.inf, dtype=r.dtype).scatter_reduce(0, group, r, "amin")
    constant = (highest == lowest)[group]
    return adv.masked_fill(constant, 0.0)
