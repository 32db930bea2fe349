"""Scalar-loop oracle for kl_estimators, written apart from the reference: one token at a time, in Python floats."""

from __future__ import annotations

import math

import torch
from torch import Tensor

KS = ("k1", "k2", "k3")


def _check(logp: Tensor, ref_logp: Tensor, mask: Tensor, estimator: str) -> None:
    floating = logp.dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64)
    same = tuple(ref_logp.shape) == tuple(logp.shape) == tuple(mask.shape) and ref_logp.dtype == logp.dtype
    if len(logp.shape) != 2 or not floating or not same or type(estimator) is not str or estimator not in KS:
        raise ValueError("logp must be 2-D floating, ref_logp and mask alike; estimator one of k1, k2, k3")


def _token(d: float, estimator: str) -> tuple[float, float]:
    """(k, dk/dd) of one token, with d = log pi - log pi_ref = -log r."""
    if estimator == "k1":
        return d, 1.0
    if estimator == "k2":
        return 0.5 * d * d, d
    return math.expm1(-d) + d, -math.expm1(-d)


def _table(logp: Tensor, ref_logp: Tensor, mask: Tensor, estimator: str):
    lp, rl, mk = logp.detach().tolist(), ref_logp.detach().tolist(), mask.tolist()
    values, slopes, count = [], [], 0
    for i, row in enumerate(lp):
        values.append([0.0] * len(row))
        slopes.append([0.0] * len(row))
        for t, x in enumerate(row):
            if mk[i][t]:
                count += 1
                values[i][t], slopes[i][t] = _token(x - rl[i][t], estimator)
    return values, slopes, count


def kl_penalty(logp, ref_logp, mask, estimator="k3", reduction="none"):
    _check(logp, ref_logp, mask, estimator)
    if reduction not in ("none", "mean") or type(reduction) is not str:
        raise ValueError("unknown reduction")
    values, _, count = _table(logp, ref_logp, mask, estimator)
    if reduction == "mean":
        return torch.tensor(math.fsum(v for row in values for v in row) / max(1, count), dtype=logp.dtype)
    return torch.tensor(values, dtype=torch.float64).reshape(logp.shape).to(logp.dtype)


def kl_loss(logp, ref_logp, mask, estimator="k3"):
    _check(logp, ref_logp, mask, estimator)
    values, slopes, count = _table(logp, ref_logp, mask, estimator)
    total = math.fsum(v for row in values for v in row) / max(1, count)
    # d loss / d logp is the slope over the count: attach that gradient to the loop's value.
    grad = torch.tensor(slopes, dtype=torch.float64).reshape(logp.shape).to(logp.dtype) / max(1, count)
    valid = torch.tensor(mask.tolist(), dtype=torch.bool).reshape(logp.shape)
    moved = torch.where(valid, logp - logp.detach(), torch.zeros((), dtype=logp.dtype))
    return torch.tensor(total, dtype=logp.dtype) + (grad * moved).sum()
