"""PPO's clipped surrogate as slime computes and reduces it, adapted to this exercise's signature.

Reproduces THUDM/slime at commit 624b824a898ab0ec1fcb4d373004c7f3852bf515:
- slime/utils/ppo_utils.py lines 124-148 (`compute_policy_loss`): the ratio as exp(-ppo_kl) with
  ppo_kl = old - new (slime/backends/megatron_utils/loss.py line 1033), the max of the negated terms, the
  clipped-branch indicator turned into float32 with `.float()`, the dual clip as a where on A < 0, and an
  `assert` (not a ValueError) on a dual clip at or below 1;
- slime/backends/megatron_utils/cp_utils.py lines 67-89 and 124 (`get_sum_of_sample_mean`): every response
  masked by multiplication, `(x * mask).sum() / clamp_min(n_i, 1)` summed over responses by default, or the plain
  masked sums with `--calculate-per-token-loss`;
- slime/backends/megatron_utils/loss.py lines 1317 and 1353-1365: the per-token loss divided by
  sum_i clamp_min(n_i, 1), the per-response one by the number of samples; and lines 1105-1106: clipfrac reduced
  with the same reducer as the loss.
`token_mean` is the per-token mode, `seq_mean` the default per-response mode. slime validates no argument, and
its inputs carry no gradient of their own, so it detaches nothing but what it recomputes.
"""

from __future__ import annotations

import torch
from torch import Tensor


def ppo_clip_loss(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    dual_clip: float | None = None,
    reduction: str = "token_mean",
) -> tuple[Tensor, Tensor]:
    adv = advantages[:, None]  # [B, 1]; slime stores one advantage per token already
    ppo_kl = old_logp - logp  # [B, L]
    ratio = torch.exp(-ppo_kl)
    unclipped = -ratio * adv
    clipped = -ratio.clamp(1 - eps_low, 1 + eps_high) * adv
    per_token = torch.maximum(unclipped, clipped)
    clipped_share = torch.gt(clipped, unclipped).float()  # float32 whatever the input dtype
    if dual_clip is not None:
        assert dual_clip > 1.0, f"dual clip must exceed 1, got {dual_clip}"
        per_token = torch.where(adv < 0, torch.min(-dual_clip * adv, per_token), per_token)

    counts = mask.sum(dim=1)  # [B]
    if reduction == "token_mean":
        # the per-token mode sums, and the step divides by sum_i max(1, n_i)
        denominator = torch.clamp_min(counts, 1).sum()
        loss = (per_token * mask).sum(dim=1).sum() / denominator
        share = (clipped_share * mask).sum(dim=1).sum() / denominator
    else:
        # the default mode: each response's own mean, summed, then divided by the number of samples
        per_response = (per_token * mask).sum(dim=1) / torch.clamp_min(counts, 1)
        loss = per_response.sum() / logp.shape[0]
        share = ((clipped_share * mask).sum(dim=1) / torch.clamp_min(counts, 1)).sum() / logp.shape[0]
    return loss, share.detach().to(logp.dtype)
