# bob: gather the valid tokens into a flat list with boolean indexing, do all the work on that
# list, and scatter the weights back. Padding is never read, so NaN padding cannot leak anywhere.
from __future__ import annotations

import math

import torch
from torch import Tensor


def _validate(logp: Tensor, rollout_logp: Tensor, mask: Tensor, clip_low: float, clip_high: float) -> None:
    if logp.ndim != 2:
        raise ValueError(f"expected logp [B, L], got {tuple(logp.shape)}")
    for name, other in (("rollout_logp", rollout_logp), ("mask", mask)):
        if other.shape != logp.shape:
            raise ValueError(f"{name} has shape {tuple(other.shape)}, expected {tuple(logp.shape)}")
    if not 0.0 < clip_low < 1.0:
        raise ValueError(f"bad clip_low {clip_low}")
    if not (math.isfinite(clip_high) and clip_high > 0.0):
        raise ValueError(f"bad clip_high {clip_high}")


def _token_weights(logp: Tensor, rollout_logp: Tensor, valid: Tensor, clip_low: float, clip_high: float) -> Tensor:
    """Weights of the valid tokens only, flattened: [N]."""
    ratio = torch.exp(logp.detach()[valid] - rollout_logp.detach()[valid])  # [N]
    inside = (ratio > 1.0 - clip_low) & (ratio < 1.0 + clip_high)  # [N]
    return ratio.masked_fill(~inside, 0.0)  # masked_fill, not a product: inf * 0 would be NaN


def masked_is_weights(logp, rollout_logp, mask, clip_low=0.2, clip_high=0.2):
    _validate(logp, rollout_logp, mask, clip_low, clip_high)
    valid = mask.bool()  # [B, L]
    weights = torch.zeros(logp.shape, dtype=logp.dtype, device=logp.device)  # [B, L]
    weights[valid] = _token_weights(logp, rollout_logp, valid, clip_low, clip_high)
    return weights


def offpolicy_loss(logp, rollout_logp, advantages, mask, clip_low=0.2, clip_high=0.2):
    _validate(logp, rollout_logp, mask, clip_low, clip_high)
    if advantages.shape != (logp.shape[0],):
        raise ValueError(f"advantages has shape {tuple(advantages.shape)}, expected ({logp.shape[0]},)")
    valid = mask.bool()  # [B, L]
    w = _token_weights(logp, rollout_logp, valid, clip_low, clip_high)  # [N], detached
    adv = advantages.detach()[:, None].expand(logp.shape)[valid]  # [N]
    lp = logp[valid]  # [N], the only factor with a gradient
    n_valid = int(valid.sum())
    return -(w * adv * lp).sum() / max(n_valid, 1)
