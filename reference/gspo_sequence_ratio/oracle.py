"""Scalar-loop oracle for gspo_sequence_ratio, written apart from the reference: one response at a time in Python
floats, each result given its gradient through a zero-valued offset."""

from __future__ import annotations

import math

import torch
from torch import Tensor


def _check(logp, old_logp, mask, advantages=None, eps_low=0.0, eps_high=1.0) -> None:
    shape = tuple(logp.shape)
    if len(shape) != 2 or logp.dtype not in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        raise ValueError("logp must be [B, L] floating")
    if tuple(old_logp.shape) != shape or tuple(mask.shape) != shape:
        raise ValueError("old_logp and mask must have logp's shape")
    if advantages is not None and tuple(advantages.shape) != (shape[0],):
        raise ValueError("advantages must be [B]")
    if math.isnan(eps_low) or eps_low < 0 or eps_low >= 1 or not math.isfinite(eps_high) or eps_high <= 0:
        raise ValueError("eps_low outside [0, 1), or eps_high not finite and positive")


def _ratios(logp: Tensor, old_logp: Tensor, mask: Tensor) -> tuple[list[float], list[int]]:
    """s_i = exp(mean of the valid tokens' log-ratios) and the valid counts, response by response."""
    lp, old, mk = logp.detach().tolist(), old_logp.detach().tolist(), mask.tolist()
    ratios, counts = [], []
    for i in range(len(lp)):
        terms = [lp[i][t] - old[i][t] for t in range(len(lp[i])) if mk[i][t]]
        counts.append(len(terms))
        ratios.append(math.exp(math.fsum(terms) / len(terms)) if terms else 1.0)
    return ratios, counts


def _with_gradient(value: Tensor, logp: Tensor, mask: Tensor, slope: list[list[float]], dims: int) -> Tensor:
    """value plus a term that is 0 in the forward pass and whose derivative in logp[i, t] is slope[i][t]."""
    valid = torch.tensor(mask.tolist(), dtype=torch.bool).reshape(logp.shape)
    offset = torch.where(valid, logp - logp.detach(), torch.zeros((), dtype=logp.dtype))
    term = torch.tensor(slope, dtype=logp.dtype).reshape(logp.shape) * offset
    return value + (term.sum() if dims == 0 else term.sum(dim=1) if dims == 1 else term)


def sequence_ratio(logp, old_logp, mask):
    _check(logp, old_logp, mask)
    ratios, counts = _ratios(logp, old_logp, mask)
    slope = [[ratios[i] / counts[i] if mask[i, t] else 0.0 for t in range(logp.shape[1])] for i in range(len(ratios))]
    return _with_gradient(torch.tensor(ratios, dtype=logp.dtype), logp, mask, slope, 1)


def gspo_loss(logp, old_logp, advantages, mask, eps_low=3e-4, eps_high=4e-4):
    _check(logp, old_logp, mask, advantages, eps_low, eps_high)
    ratios, counts = _ratios(logp, old_logp, mask)
    rows = len(ratios)
    low, high = 1.0 - eps_low, 1.0 + eps_high
    total, clipped_tokens, slope = [], 0, []
    for i, (s, n) in enumerate(zip(ratios, counts, strict=True)):
        a = float(advantages.detach()[i])
        bounded = min(max(s, low), high)
        wins = n > 0 and -a * bounded > -a * s
        total.append(0.0 if n == 0 else -a * bounded if wins else -a * s)
        clipped_tokens += n if wins else 0
        d = 0.0 if wins or n == 0 else -a * s / (n * rows)
        slope.append([d if mask[i, t] else 0.0 for t in range(logp.shape[1])])
    loss = torch.tensor(math.fsum(total) / max(1, rows), dtype=logp.dtype)
    clipfrac = torch.tensor(clipped_tokens / max(1, sum(counts)), dtype=logp.dtype)
    return _with_gradient(loss, logp, mask, slope, 0), clipfrac


def gspo_token_ratio(logp, old_logp, mask):
    _check(logp, old_logp, mask)
    ratios, _ = _ratios(logp, old_logp, mask)
    cols = logp.shape[1]
    slope = [[ratios[i] if mask[i, t] else 0.0 for t in range(cols)] for i in range(len(ratios))]
    return _with_gradient(torch.tensor(slope, dtype=logp.dtype), logp, mask, slope, 2)
