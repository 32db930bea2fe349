"""score_centering_loss as slime's trainer runs it: THUDM/slime@2e5cd7cd5a90311c65d19ba44965bc8053c52aba,
`slime/utils/score_centering.py` lines 17-38 (`get_score_centering_is_config`: the TIS switch selects the mode and
both modes read the shared `--tis-clip-low` and `--tis-clip` bounds, defaults 0 and 2, validated finite with
0 <= low <= high and high > 0) and lines 41-55 (`score_centering_correction`), with `importance_weights`, the
REINFORCE loss and the reducer read at the fork imvladikon/slime@2890b29318b96b47aff5be901f13fbf9adbdc30a
(`slime/utils/ppo_utils.py` lines 25-35, `slime/backends/megatron_utils/loss.py`, `cp_utils.py`).

As the `slime` port, except for the bounds: a bound left to None takes the shared flag's default (0 for low, 2 for
high) in both modes, so a MIS call left to its defaults masks every ratio above 2 (and none below), and the bounds are
validated as the trainer validates its flags.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

TIS_CLIP_LOW, TIS_CLIP = 0.0, 2.0  # slime's flag defaults, shared by TIS and MIS


def _shared_bounds(mode: str, low: float | None, high: float | None) -> tuple[float, float]:
    if mode not in ("none", "tis", "mis"):
        raise ValueError(f"Unknown importance sampling mode: {mode}")
    lo = TIS_CLIP_LOW if low is None else low
    hi = TIS_CLIP if high is None else high
    if not math.isfinite(lo) or not math.isfinite(hi) or lo < 0 or hi <= 0 or lo > hi:
        raise ValueError("Score centering IS bounds require finite 0 <= tis_clip_low <= tis_clip and tis_clip > 0.")
    return lo, hi


def _importance_weights(ratio: Tensor, mode: str, low: float, high: float) -> Tensor:
    if mode == "none":
        return torch.ones_like(ratio)
    if mode == "tis":
        return ratio.clamp(min=low, max=high)
    return torch.where((ratio >= low) & (ratio <= high), ratio, 0.0)


def _validate_heads(head_ids: Tensor, rollout_head_logp: Tensor) -> None:
    ids = head_ids.detach()
    distinct = ids.shape[1] < 2 or not bool((ids.sort(dim=-1).values.diff(dim=-1) == 0).any())
    if bool((ids < 0).any()) or not distinct:
        raise ValueError("Sampler top-k token ids must be distinct and nonnegative integers.")
    logp = rollout_head_logp.detach().double()
    if not bool(torch.isfinite(logp).all()) or bool((logp > 0).any()) or bool((logp.exp().sum(-1) > 1.0001).any()):
        raise ValueError("Sampler top-k logprobs must describe a finite, normalized probability subdistribution.")


def score_centering_loss(
    logits: Tensor, tokens: Tensor, rollout_logp: Tensor, head_ids: Tensor, rollout_head_logp: Tensor,
    advantages: Tensor, mask: Tensor, mode: str = "none", low: float | None = None, high: float | None = None,
    eps: float = 1e-6,
) -> Tensor:
    lo, hi = _shared_bounds(mode, low, high)
    active = mask != 0
    _validate_heads(head_ids[active], rollout_head_logp[active])
    logp = torch.log_softmax(logits.float(), dim=-1)  # [N, V] float32
    train_head = logp.gather(1, head_ids.long())  # [N, k]
    logp_y = logp.gather(1, tokens.long()[:, None]).squeeze(1)  # [N]
    with torch.no_grad():
        p, q = train_head.exp(), rollout_head_logp.float().exp()
        rho = (1 - q.sum(-1)).clamp_min(eps) / (1 - p.sum(-1)).clamp_min(eps)
        alpha = rho * _importance_weights(rho.reciprocal(), mode, lo, hi)
        weights = _importance_weights((train_head - rollout_head_logp.float()).exp(), mode, lo, hi)
        residual = q * weights - alpha.unsqueeze(-1) * p
        sampled = _importance_weights((logp_y - rollout_logp.float()).exp(), mode, lo, hi)
    correction = (residual * train_head).sum(-1)  # [N]
    adv = advantages.detach().float()
    loss = -adv * logp_y * sampled + adv * correction
    return (loss * mask).to(logits.dtype)
