"""Scalar-loop oracle for grpo_advantages, written apart from the reference: one group at a time, in Python floats."""

from __future__ import annotations

import math

import torch
from torch import Tensor


def _check(rewards: Tensor, group_size: int, eps: float) -> None:
    if not isinstance(rewards, Tensor) or len(rewards.shape) != 1:
        raise ValueError("rewards must be a 1-D tensor")
    if rewards.dtype not in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        raise ValueError("rewards must be floating")
    if any(math.isnan(v) or math.isinf(v) for v in rewards.tolist()):
        raise ValueError("rewards must be finite")
    if type(group_size) is not int or group_size < 1:
        raise ValueError("group_size must be a positive int")
    if len(rewards) % group_size:
        raise ValueError("len(rewards) must be a multiple of group_size")
    if math.isnan(eps) or math.isinf(eps) or eps < 0:
        raise ValueError("eps must be finite and non-negative")


def _group_advantages(values: list[float], std_normalize: bool, eps: float, unbiased: bool) -> list[float]:
    size = len(values)
    first = values[0]
    if all(v == first for v in values):
        return [0.0] * size
    mean = math.fsum(values) / size  # fsum: the exactly rounded sum, independent of order
    deviations = [v - mean for v in values]
    if not std_normalize:
        return deviations
    divisor = size - 1 if unbiased else size
    sigma = math.sqrt(math.fsum(d * d for d in deviations) / divisor)
    return [d / (sigma + eps) for d in deviations]


def grpo_advantages(rewards, group_size, std_normalize=True, eps=1e-6, unbiased=False):
    _check(rewards, group_size, eps)
    values = rewards.detach().tolist()
    result: list[float] = []
    for start in range(0, len(values), group_size):
        result += _group_advantages(values[start:start + group_size], std_normalize, eps, unbiased)
    # Computed in float64 and rounded once to the input dtype.
    return torch.tensor(result, dtype=torch.float64).to(rewards.dtype)
