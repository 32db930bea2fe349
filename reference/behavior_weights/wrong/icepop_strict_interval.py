# defect: ICE-POP keeps a token only when low < rho < high, so a ratio exactly on a bound gets weight 0.
# must_fail: exact_endpoints, endpoint_sweep, toy_bf16_on_bound
# may_fail: valid_edge_bounds, toy_spread, toy_clipfrac, bfloat16_inputs, oracle_icepop
"""Known-wrong behavior_weights solution (icepop_strict_interval).

ICE-POP keeps a token only when low < rho < high, so a ratio exactly on a bound gets weight 0.

Carries GLM-5's open interval over to ICE-POP, whose interval (slime's icepop_function) is closed.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

DEFAULT_BOUNDS = {"tis": (0.0, 2.0), "icepop": (0.5, 2.0)}


def _bounds(mode: object, low: float | None, high: float | None) -> tuple[float, float]:
    if not isinstance(mode, str) or mode not in DEFAULT_BOUNDS:
        raise ValueError(f"mode must be 'tis' or 'icepop', got {mode!r}")
    lo = DEFAULT_BOUNDS[mode][0] if low is None else float(low)
    hi = DEFAULT_BOUNDS[mode][1] if high is None else float(high)
    if not (math.isfinite(lo) and math.isfinite(hi) and 0.0 <= lo <= hi and hi > 0.0):
        raise ValueError(f"invalid bounds low={lo}, high={hi}")
    return lo, hi


def behavior_weights(
    train_logp: Tensor, rollout_logp: Tensor, mask: Tensor, mode: str, low: float | None = None,
    high: float | None = None,
) -> tuple[Tensor, Tensor]:
    if rollout_logp.shape != train_logp.shape or mask.shape != train_logp.shape:
        raise ValueError("train_logp, rollout_logp and mask must have the same shape")
    lo, hi = _bounds(mode, low, high)
    valid = mask != 0  # [B, L]
    zero = torch.zeros((), dtype=train_logp.dtype)
    # Padding may hold NaN/inf: select it away before exp sees it.
    log_ratio = torch.where(valid, train_logp.detach() - rollout_logp.detach(), zero)  # [B, L]
    rho = torch.exp(log_ratio)  # [B, L]; may overflow to inf
    low_t = torch.tensor(lo, dtype=rho.dtype)
    high_t = torch.tensor(hi, dtype=rho.dtype)
    if mode == "tis":
        weights = torch.clamp(rho, low_t, high_t)  # [B, L]
    else:
        weights = torch.where((rho > low_t) & (rho < high_t), rho, zero)  # [B, L]
    weights = torch.where(valid, weights, zero)  # [B, L]
    changed = valid & (weights != rho)  # [B, L]
    share = changed.sum().double() / valid.sum().clamp(min=1).double()
    return weights, share.to(rho.dtype)
