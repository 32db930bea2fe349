# defect: sigma always uses Bessel's correction (divides by G - 1), whatever unbiased says.
# must_fail: unbiased_ddof
# may_fail: 
"""Known-wrong grpo_advantages solution (always_bessel).

Every major RL library normalizes with torch.std, whose default divides by G - 1; here the flag is ignored.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def _validate(rewards: Tensor, group_size: int, eps: float) -> None:
    if not isinstance(rewards, Tensor) or rewards.dim() != 1 or not rewards.is_floating_point():
        kind = f"shape {tuple(rewards.shape)}, dtype {rewards.dtype}" if isinstance(rewards, Tensor) else "no Tensor"
        raise ValueError(f"rewards must be a 1-D floating Tensor, got {kind}")
    if not bool(torch.isfinite(rewards).all()):
        raise ValueError("rewards must be finite (no NaN or inf)")
    # bool is a subclass of int, but group_size=True is a bug in the caller, not a group of one.
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
        raise ValueError(f"group_size must be an int >= 1, got {group_size!r}")
    if rewards.shape[0] % group_size != 0:
        raise ValueError(f"{rewards.shape[0]} rewards do not split into groups of {group_size}")
    if not (math.isfinite(eps) and eps >= 0.0):  # also false for NaN
        raise ValueError(f"eps must be finite and >= 0, got {eps}")


def grpo_advantages(
    rewards: Tensor, group_size: int, std_normalize: bool = True, eps: float = 1e-6, unbiased: bool = False
) -> Tensor:
    _validate(rewards, group_size, eps)
    grouped = rewards.detach().reshape(-1, group_size)  # [N / G, G]; group g is rewards[g*G:(g+1)*G]
    # The rounded mean of equal values can differ from them by an ulp; detect constancy on the inputs.
    constant = (grouped == grouped[:, :1]).all(dim=1, keepdim=True)  # [N / G, 1]
    centred = grouped - grouped.mean(dim=1, keepdim=True)  # [N / G, G]
    if std_normalize:
        ddof = 1  # torch.std's default, whatever unbiased says
        # G - ddof is 0 only for G = 1, a constant group whose NaN torch.where discards below.
        sigma = ((centred * centred).sum(dim=1, keepdim=True) / (group_size - ddof)).sqrt()  # [N / G, 1]
        centred = centred / (sigma + eps)
    return torch.where(constant, torch.zeros((), dtype=rewards.dtype), centred).reshape(-1)  # [N]
