"""Hidden reference for kl_estimators: vectorized, the behaviour every check measures against."""

from __future__ import annotations

import torch
from torch import Tensor

ESTIMATORS = ("k1", "k2", "k3")
REDUCTIONS = ("none", "mean")


def _validate(logp: Tensor, ref_logp: Tensor, mask: Tensor, estimator: str) -> None:
    if logp.dim() != 2 or not logp.is_floating_point():
        raise ValueError(f"logp must be a 2-D floating tensor [B, L], got {logp.dtype} {tuple(logp.shape)}")
    if ref_logp.shape != logp.shape or mask.shape != logp.shape:
        raise ValueError(f"ref_logp {tuple(ref_logp.shape)} and mask {tuple(mask.shape)} must have logp's shape")
    if ref_logp.dtype != logp.dtype:
        raise ValueError(f"ref_logp dtype {ref_logp.dtype} != logp dtype {logp.dtype}")
    if not isinstance(estimator, str) or estimator not in ESTIMATORS:
        raise ValueError(f"estimator must be one of {ESTIMATORS}, got {estimator!r}")


def _per_token(logp: Tensor, ref_logp: Tensor, valid: Tensor, estimator: str) -> Tensor:
    """k of every token, 0 on padding; differentiable in logp only (ref_logp is a constant)."""
    zero = torch.zeros((), dtype=logp.dtype)
    d = torch.where(valid, logp - ref_logp.detach(), zero)  # [B, L], d = -log r; padding never reaches exp
    if estimator == "k1":
        k = d
    elif estimator == "k2":
        k = d * d / 2
    else:
        k = torch.expm1(-d) + d  # (r - 1) - log r, r = exp(-d)
    return torch.where(valid, k, zero)


def _token_mean(values: Tensor, valid: Tensor) -> Tensor:
    return values.sum() / valid.sum().clamp(min=1).to(values.dtype)


def kl_penalty(logp: Tensor, ref_logp: Tensor, mask: Tensor, estimator: str = "k3", reduction: str = "none") -> Tensor:
    _validate(logp, ref_logp, mask, estimator)
    if not isinstance(reduction, str) or reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")
    valid = mask != 0
    values = _per_token(logp.detach(), ref_logp, valid, estimator)  # [B, L]
    return values if reduction == "none" else _token_mean(values, valid)


def kl_loss(logp: Tensor, ref_logp: Tensor, mask: Tensor, estimator: str = "k3") -> Tensor:
    _validate(logp, ref_logp, mask, estimator)
    valid = mask != 0
    return _token_mean(_per_token(logp, ref_logp, valid, estimator), valid)
