"""Zeroes TIS ratios outside [low, high] (a real bug, owned by oracle_tis) and uses the mask as a bool condition,
so that every non-bool mask raises RuntimeError, as the declared misreading of the mask does: once that
misreading is charged, its raising cases would be credited in every other check, oracle_tis's own included. It
must score no more than tis_masks.py, the same file answering on every mask."""

from __future__ import annotations

import math

import torch
from torch import Tensor

DEFAULT_BOUNDS = {"tis": (0.0, 2.0), "icepop": (0.5, 2.0)}


def resolve_bounds(mode: object, low: float | None, high: float | None) -> tuple[float, float]:
    """The mode's defaults filled in, then validated; raises ValueError on anything outside the contract."""
    if not isinstance(mode, str) or mode not in DEFAULT_BOUNDS:
        raise ValueError(f"mode must be one of {sorted(DEFAULT_BOUNDS)}, got {mode!r}")
    default_low, default_high = DEFAULT_BOUNDS[mode]
    lo = default_low if low is None else float(low)
    hi = default_high if high is None else float(high)
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise ValueError(f"low and high must be finite, got low={lo}, high={hi}")
    if not 0.0 <= lo <= hi:
        raise ValueError(f"bounds must satisfy 0 <= low <= high, got low={lo}, high={hi}")
    if hi <= 0.0:
        raise ValueError(f"high must be > 0, got {hi}")
    return lo, hi


def behavior_weights(
    train_logp: Tensor,
    rollout_logp: Tensor,
    mask: Tensor,
    mode: str,
    low: float | None = None,
    high: float | None = None,
) -> tuple[Tensor, Tensor]:
    if rollout_logp.shape != train_logp.shape or mask.shape != train_logp.shape:
        raise ValueError(
            f"train_logp {tuple(train_logp.shape)}, rollout_logp {tuple(rollout_logp.shape)} and "
            f"mask {tuple(mask.shape)} must have the same shape"
        )
    lo, hi = resolve_bounds(mode, low, high)
    dtype, device = train_logp.dtype, train_logp.device
    valid = mask  # [B, L]
    zero = torch.zeros((), dtype=dtype, device=device)
    # Padding may hold NaN/inf: replace it before any arithmetic touches it.
    log_ratio = torch.where(valid, train_logp.detach() - rollout_logp.detach(), zero)  # [B, L]
    rho = torch.exp(log_ratio)  # [B, L], in the input dtype; may overflow to inf
    low_t = torch.tensor(lo, dtype=dtype, device=device)  # the bounds rounded to rho's dtype
    high_t = torch.tensor(hi, dtype=dtype, device=device)
    if mode == "tis":
        weights = torch.where((rho >= low_t) & (rho <= high_t), rho, zero)  # [B, L]
    else:
        weights = torch.where((rho >= low_t) & (rho <= high_t), rho, zero)  # both endpoints kept
    weights = torch.where(valid, weights, zero)  # [B, L]
    changed = valid & (weights != rho)  # [B, L]
    # The exact share, rounded once to the input dtype.
    share = changed.sum().to(torch.float64) / valid.sum().clamp(min=1).to(torch.float64)
    return weights, share.to(dtype)
