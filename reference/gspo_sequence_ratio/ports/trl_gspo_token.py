"""GSPO-token's loss as TRL's experimental trainer computes it (importance_sampling_level="sequence_token",
loss_type="grpo"): the PPO rule on each token's ratio, reduced per response and then over the batch.

Reproduces huggingface/trl at commit f2cd57710ae345ea6428ae95363267fcf38a3dc8,
trl/experimental/gspo_token/grpo_trainer.py lines 72-116 and 126-156: the GSPO-token log-weight at every position,
`coef_2 = clamp(coef_1, 1 - epsilon_low, 1 + epsilon_high)`, `-min(coef_1 A, coef_2 A)`, the "grpo" reduction
`((per_token_loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()`, and `clip_ratio/region_mean` averaged
over the valid tokens (`(x * mask).sum() / mask.sum().clamp(min=1.0)`). sequence_ratio and gspo_token_ratio are those of
the main trainer (`trl.py`); `epsilon` defaults to 0.2 (trl/trainer/grpo_config.py lines 683-705).
"""

from __future__ import annotations

import torch
from torch import Tensor

EPSILON = 0.2


def _log_weight(logp: Tensor, old_logp: Tensor, mask: Tensor) -> Tensor:
    return ((logp - old_logp) * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)  # [B]


def sequence_ratio(logp: Tensor, old_logp: Tensor, mask: Tensor) -> Tensor:
    return torch.exp(_log_weight(logp, old_logp, mask))


def gspo_token_ratio(logp: Tensor, old_logp: Tensor, mask: Tensor) -> Tensor:
    return torch.exp(logp - logp.detach() + _log_weight(logp, old_logp, mask).detach().unsqueeze(-1))


def gspo_loss(logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, eps_low: float = EPSILON,
              eps_high: float = EPSILON) -> tuple[Tensor, Tensor]:
    coef_1 = gspo_token_ratio(logp, old_logp, mask)  # [B, L]
    coef_2 = torch.clamp(coef_1, 1 - eps_low, 1 + eps_high)
    adv = advantages.unsqueeze(1)
    per_token_loss = -torch.min(coef_1 * adv, coef_2 * adv)
    loss = ((per_token_loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
    clipped = (((coef_1 < 1 - eps_low) & (adv < 0)) | ((coef_1 > 1 + eps_high) & (adv > 0))).float()
    return loss, ((clipped * mask).sum() / mask.sum().clamp(min=1.0)).detach().to(logp.dtype)  # logged with .item()
