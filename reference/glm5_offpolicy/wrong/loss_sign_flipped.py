# defect: The loss is +sum(m w A logp) / N instead of its negative.
# must_fail: oracle_loss, oracle_grad
# may_fail: exact_endpoints, asymmetric_widths, default_widths, padding_nan_inf, empty_row_nan_advantage, extreme_ratios, gradient_detached, denominator_counts_rejected, token_mean, mixed_mask_dtype, non_contiguous, valid_edge_widths, sweep_gradients, bandit_trajectory, bandit_rejections, empty_mask, loss_contract, no_mutation, value_errors
"""Known-wrong glm5_offpolicy solution (loss_sign_flipped).

The loss is +sum(m w A logp) / N instead of its negative.

Gradient ascent on the surrogate's negative: the policy moves away from positive advantages.
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
    zero = torch.zeros((), dtype=logp.dtype)
    # Padding may hold NaN/inf: select it away before exp sees it.
    diff = torch.where(valid, logp.detach() - rollout_logp.detach(), zero)  # [B, L]
    ratio = torch.exp(diff)  # [B, L]; may overflow to inf on tokens that are then rejected
    keep = valid & (ratio > 1.0 - clip_low) & (ratio < 1.0 + clip_high)  # [B, L]
    return torch.where(keep, ratio, zero)  # [B, L], detached


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
    valid = mask != 0  # [B, L]
    zero = torch.zeros((), dtype=logp.dtype)
    adv = torch.where(valid, advantages.detach()[:, None], zero)  # [B, L]; an empty row's advantage is never read
    coeff = torch.where(valid, weights * adv, zero)  # [B, L], detached
    safe_logp = torch.where(valid, logp, zero)  # [B, L]; keeps the graph, drops padded NaN/inf
    count = valid.sum().clamp(min=1).to(logp.dtype)  # every valid token, ratio-rejected ones included
    return (coeff * safe_logp).sum() / count
