# defect: The loss is -mean(m * r * sg(w / r) * A), PPO's ratio form: the right gradient, but not the value of -mean(m * w * A * logp).
# must_fail: oracle_loss
# may_fail: asymmetric_widths, default_widths, denominator_counts_rejected, empty_mask, empty_row_nan_advantage, exact_endpoints, extreme_ratios, loss_contract, mixed_mask_dtype, no_mutation, non_contiguous, padding_nan_inf, token_mean, valid_edge_widths, value_errors
"""Known-wrong glm5_offpolicy solution (ratio_form_loss).

PPO code writes the surrogate with the ratio, whose gradient matches the contract's loss but whose value does not.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def _validate(logp: Tensor, rollout_logp: Tensor, mask: Tensor, clip_low: float, clip_high: float) -> None:
    if logp.dim() != 2:
        raise ValueError(f"logp must be 2-D [B, L], got shape {tuple(logp.shape)}")
    if rollout_logp.shape != logp.shape:
        raise ValueError(f"rollout_logp shape {tuple(rollout_logp.shape)} != logp shape {tuple(logp.shape)}")
    if mask.shape != logp.shape:
        raise ValueError(f"mask shape {tuple(mask.shape)} != logp shape {tuple(logp.shape)}")
    if not (0.0 < clip_low < 1.0):  # also false for NaN
        raise ValueError(f"clip_low must satisfy 0 < clip_low < 1, got {clip_low}")
    if not (math.isfinite(clip_high) and clip_high > 0.0):
        raise ValueError(f"clip_high must be finite and > 0, got {clip_high}")


def masked_is_weights(
    logp: Tensor, rollout_logp: Tensor, mask: Tensor, clip_low: float = 0.2, clip_high: float = 0.2
) -> Tensor:
    _validate(logp, rollout_logp, mask, clip_low, clip_high)
    valid = mask != 0  # [B, L]
    lp = logp.detach()
    # Padding may hold NaN/inf: replace it before any arithmetic touches it.
    diff = torch.where(valid, lp - rollout_logp.detach(), torch.zeros((), dtype=lp.dtype))
    ratio = torch.exp(diff)  # [B, L], may overflow to inf on rejected tokens
    keep = valid & (ratio > 1.0 - clip_low) & (ratio < 1.0 + clip_high)
    return torch.where(keep, ratio, torch.zeros((), dtype=lp.dtype))


def offpolicy_loss(
    logp: Tensor,
    rollout_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
) -> Tensor:
    weights = masked_is_weights(logp, rollout_logp, mask, clip_low, clip_high)  # [B, L], detached
    if advantages.shape != (logp.shape[0],):
        raise ValueError(f"advantages must have shape ({logp.shape[0]},), got {tuple(advantages.shape)}")
    valid = mask != 0
    zero = torch.zeros((), dtype=logp.dtype)
    adv = torch.where(valid, advantages.detach()[:, None], zero)  # [B, L]; NaN advantage of an empty row never used
    coeff = torch.where(valid, weights * adv, zero)  # [B, L], detached
    safe_logp = torch.where(valid, logp, zero)  # keeps the graph, drops padded NaN/inf
    count = valid.sum().clamp(min=1).to(logp.dtype)
    surrogate = torch.exp(safe_logp - safe_logp.detach())  # value 1, gradient 1 per valid token
    return -(coeff * surrogate).sum() / count
