"""grpo_advantages as verl computes it: volcengine/verl@b178a3cd56f58b2d502255daba591e92833930a7,
`verl/trainer/ppo/core_algos.py` lines 267-330 (`compute_grpo_outcome_advantage`).

Reproduced: under `no_grad`, rewards are collected per prompt id one response at a time; a group of one gets mean
0 and std 1 (so its advantage is its raw reward, divided by 1 + eps when normalising); a larger group gets
`torch.mean` and `torch.std` of its stacked rewards, in their own dtype; each reward is written back into a copy as
`(R - mean) / (std + eps)`, or `R - mean` for Dr. GRPO (`norm_adv_by_std_in_grpo=False`). No constant-group case,
no validation. The exercise's contiguous layout stands for verl's `index` array (prompt g owns responses
g*G..(g+1)*G-1); `eps` is verl's `epsilon` and `unbiased` picks the `torch.std` correction (verl's own is True).
"""

from __future__ import annotations

import torch
from torch import Tensor


def grpo_advantages(
    rewards: Tensor, group_size: int, std_normalize: bool = True, eps: float = 1e-6, unbiased: bool = False
) -> Tensor:
    with torch.no_grad():
        scores = rewards.detach().clone()  # verl writes the advantages into the summed scores, a new tensor
        index = [i // group_size for i in range(scores.shape[0])]
        members: dict[int, list[Tensor]] = {}
        for i, prompt in enumerate(index):
            members.setdefault(prompt, []).append(scores[i])
        mean: dict[int, Tensor] = {}
        std: dict[int, Tensor] = {}
        for prompt, group in members.items():
            if len(group) == 1:
                mean[prompt], std[prompt] = torch.tensor(0.0), torch.tensor(1.0)
            else:
                stacked = torch.stack(group)
                mean[prompt], std[prompt] = torch.mean(stacked), torch.std(stacked, unbiased=unbiased)
        for i, prompt in enumerate(index):
            if std_normalize:
                scores[i] = (scores[i] - mean[prompt]) / (std[prompt] + eps)
            else:
                scores[i] = scores[i] - mean[prompt]
    return scores
