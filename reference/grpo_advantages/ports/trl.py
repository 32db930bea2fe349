"""grpo_advantages as TRL computes it: huggingface/trl@f2cd57710ae345ea6428ae95363267fcf38a3dc8,
`trl/trainer/grpo_trainer.py` lines 2680-2707 and 2728-2730 (`_generate_and_score_completions`, the default
`sum_then_normalize` with `scale_rewards="group"`), and `trl/trainer/utils.py` lines 857-884 (`nanstd`).

Reproduced: rewards live in a float32 tensor (`_calculate_rewards` allocates it with `torch.zeros`); the group mean
is a `nanmean` of the `[N / G, G]` view; the spread is `nanstd`, the mean of squared deviations multiplied by
`count / (count - 1)` (NaN for a single value, but a group of one takes zeros instead); the advantage is
`(R - mean) / (std + eps)`, and NaN advantages are finally turned into 0 (an unscorable completion carries no
signal). No constant-group case, no validation. `eps` replaces TRL's constant 1e-4, `std_normalize=False` is
`scale_rewards="none"`, and `unbiased=False` leaves out the `count / (count - 1)` factor (TRL always applies it).
"""

from __future__ import annotations

import torch
from torch import Tensor


def _nanstd(grouped: Tensor, unbiased: bool) -> Tensor:
    mean = torch.nanmean(grouped, dim=1, keepdim=True)
    variance = torch.nanmean((grouped - mean) ** 2, dim=1, keepdim=True)
    if unbiased:
        count = (~torch.isnan(grouped)).sum(dim=1, keepdim=True)
        correction = torch.where(count > 1, count / (count - 1), torch.full_like(variance, float("nan")))
        variance = variance * correction  # Bessel's correction applied after the fact, as TRL does
    return variance.sqrt().squeeze(1)


def grpo_advantages(
    rewards: Tensor, group_size: int, std_normalize: bool = True, eps: float = 1e-6, unbiased: bool = False
) -> Tensor:
    values = rewards.detach().to(torch.float32)  # TRL's reward table is float32
    grouped = values.view(-1, group_size)  # [N / G, G]
    mean = torch.nanmean(grouped, dim=1).repeat_interleave(group_size, dim=0)  # [N]
    if group_size > 1:
        std = _nanstd(grouped, unbiased).repeat_interleave(group_size, dim=0)  # [N]
    else:
        std = torch.zeros_like(values)
    advantages = values - mean
    if std_normalize:
        advantages = advantages / (std + eps)
    return torch.nan_to_num(advantages, nan=0.0)
