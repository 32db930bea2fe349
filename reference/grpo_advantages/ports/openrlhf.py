"""grpo_advantages as OpenRLHF computes it: OpenRLHF/OpenRLHF@3c3be6234e0cb353e76bb8019947db9dfe99fca7,
`openrlhf/trainer/ppo_utils/experience_maker.py` lines 252 and 267-270 (the `group_norm` and `dr_grpo` advantage
estimators).

Reproduced: the rewards, in their own dtype, are reshaped to `[N / G, G]`; `group_norm` divides the centred rewards by
`rewards.std(-1) + 1e-9`, `dr_grpo` only centres them. The std is the spread of the raw rewards (not of the centred
ones), a group of one with the Bessel correction gives NaN, no constant group is special-cased and nothing is
validated. `eps` replaces the constant 1e-9 and `unbiased` picks the `torch.std` correction (OpenRLHF's own is True).
"""

from __future__ import annotations

from torch import Tensor


def grpo_advantages(
    rewards: Tensor, group_size: int, std_normalize: bool = True, eps: float = 1e-6, unbiased: bool = False
) -> Tensor:
    grouped = rewards.detach().reshape(-1, group_size)  # [N / G, G]
    centred = grouped - grouped.mean(-1, keepdim=True)
    if std_normalize:
        centred = centred / (grouped.std(-1, keepdim=True, unbiased=unbiased) + eps)
    return centred.reshape(-1)  # [N]
