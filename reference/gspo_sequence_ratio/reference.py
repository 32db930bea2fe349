"""Hidden reference for gspo_sequence_ratio: vectorized, the behaviour every check measures against."""

from __future__ import annotations

import math

import torch
from torch import Tensor


def _validate(logp: Tensor, old_logp: Tensor, mask: Tensor) -> None:
    if logp.dim() != 2 or not logp.is_floating_point():
        raise ValueError(f"logp must be a 2-D floating tensor [B, L], got {logp.dtype} of shape {tuple(logp.shape)}")
    if old_logp.shape != logp.shape or mask.shape != logp.shape:
        raise ValueError(f"old_logp {tuple(old_logp.shape)} and mask {tuple(mask.shape)} must have logp's shape")


def _log_ratio(logp: Tensor, old_logp: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """(mean log-ratio over each response's valid tokens [B], valid token counts [B]); padding never reaches it."""
    valid = mask != 0  # [B, L]
    per_token = torch.where(valid, logp - old_logp.detach(), torch.zeros((), dtype=logp.dtype))  # [B, L]
    lengths = valid.sum(dim=1)  # [B]
    return per_token.sum(dim=1) / lengths.clamp(min=1).to(logp.dtype), lengths


def sequence_ratio(logp: Tensor, old_logp: Tensor, mask: Tensor) -> Tensor:
    _validate(logp, old_logp, mask)
    return torch.exp(_log_ratio(logp, old_logp, mask)[0])  # [B]; 1 for an empty response


def gspo_loss(logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, eps_low: float = 3e-4,
              eps_high: float = 4e-4) -> tuple[Tensor, Tensor]:
    _validate(logp, old_logp, mask)
    if advantages.shape != (logp.shape[0],):
        raise ValueError(f"advantages must have shape ({logp.shape[0]},), got {tuple(advantages.shape)}")
    if not 0.0 <= eps_low < 1.0:  # also false for NaN
        raise ValueError(f"eps_low must satisfy 0 <= eps_low < 1, got {eps_low}")
    if not (math.isfinite(eps_high) and eps_high > 0.0):
        raise ValueError(f"eps_high must be finite and > 0, got {eps_high}")
    mean_log_ratio, lengths = _log_ratio(logp, old_logp, mask)
    ratio = torch.exp(mean_log_ratio)  # [B]
    adv = advantages.detach().to(logp.dtype)  # [B]
    unclipped = -adv * ratio
    clipped = -adv * ratio.clamp(1.0 - eps_low, 1.0 + eps_high)
    per_response = torch.where(lengths > 0, torch.maximum(unclipped, clipped), torch.zeros((), dtype=logp.dtype))
    loss = per_response.sum() / max(1, logp.shape[0])  # empty responses count in B
    clipped_tokens = torch.where(clipped > unclipped, lengths, 0).sum().to(torch.float64)
    share = clipped_tokens / lengths.sum().clamp(min=1).to(torch.float64)
    return loss, share.to(logp.dtype)


def gspo_token_ratio(logp: Tensor, old_logp: Tensor, mask: Tensor) -> Tensor:
    _validate(logp, old_logp, mask)
    valid = mask != 0  # [B, L]
    zero = torch.zeros((), dtype=logp.dtype)
    seq = torch.exp(_log_ratio(logp, old_logp, mask)[0]).detach()  # [B], sg[s_i]
    own = torch.where(valid, logp - logp.detach(), zero)  # [B, L]: 0 in value, d/d logp_t = 1 on its own token
    return torch.where(valid, seq[:, None] * torch.exp(own), zero)  # [B, L]
