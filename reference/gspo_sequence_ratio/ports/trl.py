"""GSPO as TRL's GRPOTrainer computes it with importance_sampling_level="sequence" and loss_type="grpo", and
GSPO-token as its experimental trainer computes it with importance_sampling_level="sequence_token".

Reproduces huggingface/trl at commit f2cd57710ae345ea6428ae95363267fcf38a3dc8:
- trl/trainer/grpo_trainer.py lines 3054-3066: the sequence log-weight `(log_ratio * mask).sum(-1) /
  mask.sum(-1).clamp(min=1.0)`, kept [B, 1] and differentiable (GSPO proper), `coef_1 = exp(...)`;
- lines 3082-3091: `coef_2 = clamp(coef_1, 1 - epsilon_low, 1 + epsilon_high)`, `-min(coef_1 A, coef_2 A)`;
- lines 3119-3123: "grpo" reduction, `((per_token_loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()`;
- lines 3223-3249: `clip_ratio/region_mean`, `(coef_1 < 1 - eps_low) & (A < 0) | (coef_1 > 1 + eps_high) & (A > 0)`,
  which for a [B, 1] weight `global_masked_mean` averages over the B responses (floored at 1), not over tokens;
- trl/experimental/gspo_token/grpo_trainer.py lines 78-82: GSPO-token, `per_token_logps - per_token_logps.detach()
  + seq_level_log_weight.detach()`, at every position;
- trl/trainer/grpo_config.py lines 683-705: `epsilon` 0.2, `epsilon_high` equal to it when unset.
TRL's inputs carry no gradient of their own, so nothing is detached, and nothing is validated.
"""

from __future__ import annotations

import torch
from torch import Tensor

EPSILON = 0.2  # GRPOConfig's default; the GSPO paper's 3e-4 / 4e-4 are set by the user


def _log_weight(logp: Tensor, old_logp: Tensor, mask: Tensor) -> Tensor:
    return ((logp - old_logp) * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)  # [B]


def sequence_ratio(logp: Tensor, old_logp: Tensor, mask: Tensor) -> Tensor:
    return torch.exp(_log_weight(logp, old_logp, mask))


def gspo_token_ratio(logp: Tensor, old_logp: Tensor, mask: Tensor) -> Tensor:
    return torch.exp(logp - logp.detach() + _log_weight(logp, old_logp, mask).detach().unsqueeze(-1))


def gspo_loss(logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, eps_low: float = EPSILON,
              eps_high: float = EPSILON) -> tuple[Tensor, Tensor]:
    coef_1 = sequence_ratio(logp, old_logp, mask).unsqueeze(-1)  # [B, 1]
    coef_2 = torch.clamp(coef_1, 1 - eps_low, 1 + eps_high)
    adv = advantages.unsqueeze(1)
    per_token_loss = -torch.min(coef_1 * adv, coef_2 * adv)  # [B, 1]
    loss = ((per_token_loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
    clipped = ((coef_1 < 1 - eps_low) & (adv < 0)) | ((coef_1 > 1 + eps_high) & (adv > 0))  # [B, 1]
    return loss, (clipped.float().sum() / max(clipped.shape[0], 1)).to(logp.dtype)  # logged with .item()
