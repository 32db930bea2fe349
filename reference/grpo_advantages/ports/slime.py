"""grpo_advantages as slime computes it: THUDM/slime@624b824a898ab0ec1fcb4d373004c7f3852bf515,
`slime/ray/rollout.py` lines 608-631 (`_post_process_rewards`).

Reproduced: the rewards are gathered into a new float32 tensor (`dtype=torch.float`) whatever they came in, viewed
as `[N / G, G]` (or as one group when N is not a multiple of G), centred by the group mean, and the centred values
divided by their `torch.std` plus the epsilon; nothing is validated, a constant group is left to `R - mean`, and the
result leaves as float32. The exercise's arguments are honoured where slime has a switch: `std_normalize` is
`--disable-grpo-std-normalization` negated, `eps` replaces the constant 1e-6 (its default), and `unbiased` picks the
`torch.std` correction (slime's own is `unbiased=True`).
"""

from __future__ import annotations

import torch
from torch import Tensor


def grpo_advantages(
    rewards: Tensor, group_size: int, std_normalize: bool = True, eps: float = 1e-6, unbiased: bool = False
) -> Tensor:
    # slime builds the tensor from a list of Python floats: float32, no graph, no link to the caller's storage
    values = rewards.detach().to(torch.float32).clone()
    n = values.shape[-1]
    # a batch that is not G per prompt is taken as one group, not refused
    grouped = values.reshape(-1, group_size) if n % group_size == 0 else values.view(-1, n)  # [groups, G]
    centred = grouped - grouped.mean(dim=-1, keepdim=True)
    if std_normalize:
        # the spread of the centred values, as slime takes it; a group of one gives NaN with the Bessel correction
        centred = centred / (centred.std(dim=-1, keepdim=True, unbiased=unbiased) + eps)
    return centred.flatten()  # [N], float32
