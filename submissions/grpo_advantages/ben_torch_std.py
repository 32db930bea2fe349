# ben: mean and std per prompt straight from torch, with the ddof chosen by `unbiased`, and eps added
# to the std as in the DeepSeekMath formula. Short and vectorized.
from __future__ import annotations

import math

import torch


def grpo_advantages(rewards, group_size, std_normalize=True, eps=1e-6, unbiased=False):
    if rewards.dim() != 1 or not rewards.is_floating_point():
        raise ValueError("rewards must be a 1-D float tensor")
    if not torch.isfinite(rewards).all():
        raise ValueError("rewards must be finite")
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
        raise ValueError("group_size must be a positive int")
    if rewards.numel() % group_size != 0:
        raise ValueError("rewards must split into whole groups")
    if not math.isfinite(eps) or eps < 0:
        raise ValueError("eps must be finite and >= 0")
    grouped = rewards.detach().view(-1, group_size)
    adv = grouped - grouped.mean(dim=1, keepdim=True)
    if std_normalize:
        std = grouped.std(dim=1, keepdim=True, correction=1 if unbiased else 0)
        adv = adv / (std + eps)
    return adv.reshape(-1)
