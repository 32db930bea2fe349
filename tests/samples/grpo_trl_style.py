"""grpo_advantages written the way TRL normalizes group rewards:
huggingface/trl@f2cd57710ae345ea6428ae95363267fcf38a3dc8, `trl/trainer/grpo_trainer.py` lines 2680-2707
(`_generate_and_score_completions`): the group spread is `torch.std`, always with Bessel's correction, and the
advantage divides by `std + 1e-4`, a constant that no argument changes. Everything else follows the statement:
validation, constant groups, float64 kept.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def grpo_advantages(
    rewards: Tensor, group_size: int, std_normalize: bool = True, eps: float = 1e-6, unbiased: bool = False
) -> Tensor:
    if not isinstance(rewards, Tensor) or rewards.dim() != 1 or not rewards.is_floating_point():
        raise ValueError("rewards must be a 1-D floating Tensor")
    if not bool(torch.isfinite(rewards).all()):
        raise ValueError("rewards must be finite")
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
        raise ValueError("group_size must be an int >= 1")
    if rewards.shape[0] % group_size != 0:
        raise ValueError("rewards do not split into groups of group_size")
    if not (math.isfinite(eps) and eps >= 0.0):
        raise ValueError("eps must be finite and >= 0")
    groups = rewards.detach().view(-1, group_size)  # [N / G, G]
    same = (groups == groups[:, :1]).all(dim=1, keepdim=True)  # [N / G, 1]
    advantages = groups - groups.mean(dim=1, keepdim=True)  # [N / G, G]
    if std_normalize:
        spread = groups.std(dim=1, keepdim=True)  # [N / G, 1]; ddof 1 whatever `unbiased` says
        advantages = advantages / (spread + 1e-4)  # TRL's constant; `eps` is never read
    return torch.where(same, torch.zeros((), dtype=rewards.dtype), advantages).reshape(-1)  # [N]
