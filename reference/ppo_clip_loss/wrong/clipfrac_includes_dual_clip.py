# defect: clipfrac also counts tokens whose loss the dual clip capped.
# must_fail: contract, detached, empty_mask, no_mutation, oracle_token_mean, oracle_seq_mean, default_arguments, dual_clip_cap, clipfrac_ignores_dual_clip, padding_nan_inf, stop_gradient, mask_dtypes, non_contiguous, value_errors, sweep_clipfrac
# may_fail:
"""Known-wrong ppo_clip_loss solution (clipfrac_includes_dual_clip).

clipfrac also counts tokens whose loss the dual clip capped.

Some libraries log the dual clip's share beside clipfrac; adding it into clipfrac changes the definition.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

REDUCTIONS = ("token_mean", "seq_mean")


def _validate(logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, eps_low: float, eps_high: float,
              dual_clip: float | None, reduction: str) -> None:
    if logp.dim() != 2 or not logp.is_floating_point():
        raise ValueError(f"logp must be a 2-D floating tensor [B, L], got {logp.dtype} of shape {tuple(logp.shape)}")
    if old_logp.shape != logp.shape:
        raise ValueError(f"old_logp shape {tuple(old_logp.shape)} != logp shape {tuple(logp.shape)}")
    if mask.shape != logp.shape:
        raise ValueError(f"mask shape {tuple(mask.shape)} != logp shape {tuple(logp.shape)}")
    if advantages.shape != (logp.shape[0],):
        raise ValueError(f"advantages must have shape ({logp.shape[0]},), got {tuple(advantages.shape)}")
    if not 0.0 <= eps_low < 1.0:  # also false for NaN
        raise ValueError(f"eps_low must satisfy 0 <= eps_low < 1, got {eps_low}")
    if not (math.isfinite(eps_high) and eps_high > 0.0):
        raise ValueError(f"eps_high must be finite and > 0, got {eps_high}")
    if dual_clip is not None and not (math.isfinite(dual_clip) and dual_clip > 1.0):
        raise ValueError(f"dual_clip must be None or a finite number > 1, got {dual_clip}")
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")


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
    _validate(logp, old_logp, advantages, mask, eps_low, eps_high, dual_clip, reduction)
    dtype = logp.dtype
    valid = mask != 0  # [B, L]
    zero = torch.zeros((), dtype=dtype, device=logp.device)
    # Padding may hold NaN/inf: select it away before exp, so neither the forward nor the backward sees it.
    log_ratio = torch.where(valid, logp - old_logp.detach(), zero)  # [B, L]
    ratio = torch.exp(log_ratio)  # [B, L], graph-connected to logp only
    adv = advantages.detach().to(dtype)[:, None]  # [B, 1], one advantage per response
    unclipped = -adv * ratio  # [B, L]
    clipped = -adv * ratio.clamp(1.0 - eps_low, 1.0 + eps_high)  # [B, L]
    per_token = torch.maximum(unclipped, clipped)  # [B, L]
    surrogate = per_token
    if dual_clip is not None:
        # Only negative advantages are capped: -c * A is then a positive ceiling on the token's loss.
        per_token = torch.where(adv < 0, torch.minimum(per_token, -dual_clip * adv), per_token)
    per_token = torch.where(valid, per_token, zero)  # [B, L]

    lengths = valid.sum(dim=1)  # [B]
    if reduction == "token_mean":
        loss = per_token.sum() / lengths.sum().clamp(min=1).to(dtype)
    else:
        per_response = per_token.sum(dim=1) / lengths.clamp(min=1).to(dtype)  # [B]
        loss = per_response.sum() / max(1, logp.shape[0])

    clipped_tokens = valid & ((clipped > unclipped) | (per_token < surrogate))  # [B, L]
    share = clipped_tokens.sum().to(torch.float64) / lengths.sum().clamp(min=1).to(torch.float64)
    return loss, share.to(dtype)
