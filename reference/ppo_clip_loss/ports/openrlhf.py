"""PPO's clipped surrogate as OpenRLHF's `PolicyLoss` computes and aggregates it, adapted to this exercise's
signature.

Reproduces OpenRLHF/OpenRLHF at commit 3c3be6234e0cb353e76bb8019947db9dfe99fca7:
- openrlhf/models/loss.py lines 116-230 (`PolicyLoss`): the log-ratio clamped to [-20, 20] before `exp`, the loss
  as -min(r A, clip(r) A), the dual clip as max(min(...), c A) on A < 0 (asserted > 1 in the constructor), and
  clip_ratio as `masked_mean(lt(surr2, surr1).float(), mask)`;
- openrlhf/models/loss.py lines 11-39 (`aggregate_loss`): the token-level loss `masked_mean` over the batch; the
  sample-level loss divides each response's `(x * mask)` sum by n_i + 1e-8 and averages over the responses that
  have a valid token;
- openrlhf/models/utils.py lines 166-169 (`masked_mean`): `(x * mask).sum() / mask.sum()`, with no floor.
`token_mean` is `token_level_loss=True`; every other reduction is the sample-level loss, since OpenRLHF's switch is
a boolean. Its inputs carry no gradient of their own, so nothing is detached.
"""

from __future__ import annotations

import torch
from torch import Tensor


def _masked_mean(values: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    if dim is None:
        return (values * mask).sum() / mask.sum()
    return (values * mask).sum(dim=dim) / mask.sum(dim=dim)


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
    if dual_clip is not None:
        assert dual_clip > 1.0, f"dual_clip must be > 1.0, got {dual_clip}"
    adv = advantages[:, None]  # [B, 1]
    ratio = (logp - old_logp).clamp(min=-20.0, max=20.0).exp()  # [B, L]
    surr1 = ratio * adv
    surr2 = ratio.clamp(1 - eps_low, 1 + eps_high) * adv
    if dual_clip is None:
        per_token = -torch.min(surr1, surr2)
    else:
        pessimistic = torch.min(surr1, surr2)
        floored = torch.max(pessimistic, dual_clip * adv)
        per_token = -torch.where(adv < 0, floored, pessimistic)

    if reduction == "token_mean":
        loss = _masked_mean(per_token, mask)
    else:
        counts = mask.sum(dim=-1)  # [B]
        per_response = (per_token * mask).sum(dim=-1) / (counts + 1e-8)
        has_tokens = (counts > 0).float()  # fully masked responses leave the average
        loss = _masked_mean(per_response, has_tokens)
    share = _masked_mean(torch.lt(surr2, surr1).float(), mask)
    return loss, share.detach().to(logp.dtype)
