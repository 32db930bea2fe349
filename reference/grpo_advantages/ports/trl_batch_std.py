"""grpo_advantages as TRL computes it with `scale_rewards="batch"`:
huggingface/trl@f2cd57710ae345ea6428ae95363267fcf38a3dc8, `trl/trainer/grpo_trainer.py` lines 2680-2707 and
2728-2730 (`_generate_and_score_completions`, `sum_then_normalize`, the "batch" branch at lines 2694-2699) and
`trl/trainer/utils.py` lines 857-884 (`nanstd`).

Reproduced: as the `trl` port (float32 rewards, a `nanmean` baseline per group, NaN advantages set to 0), except that
the spread is one `nanstd` of the whole batch, shared by every group (zeros when the batch holds one reward): the
centring stays per group, the scale is batch-wide, as Liu et al. (Dr. GRPO) and TRL's documentation recommend against
the difficulty bias. `eps` replaces TRL's constant 1e-4 and `unbiased=False` leaves out `nanstd`'s
`count / (count - 1)` factor (TRL always applies it).
"""

from __future__ import annotations

import torch
from torch import Tensor


def _nanstd(values: Tensor, unbiased: bool) -> Tensor:
    mean = torch.nanmean(values)
    variance = torch.nanmean((values - mean) ** 2)
    if unbiased:
        count = (~torch.isnan(values)).sum()
        correction = count / (count - 1) if bool(count > 1) else torch.tensor(float("nan"))
        variance = variance * correction  # Bessel's correction applied after the fact, as TRL does
    return variance.sqrt()


def grpo_advantages(
    rewards: Tensor, group_size: int, std_normalize: bool = True, eps: float = 1e-6, unbiased: bool = False
) -> Tensor:
    values = rewards.detach().to(torch.float32)  # TRL's reward table is float32
    mean = torch.nanmean(values.view(-1, group_size), dim=1).repeat_interleave(group_size, dim=0)  # [N]
    std = _nanstd(values, unbiased).expand_as(values) if values.numel() > 1 else torch.zeros_like(values)
    advantages = values - mean
    if std_normalize:
        advantages = advantages / (std + eps)
    return torch.nan_to_num(advantages, nan=0.0)
