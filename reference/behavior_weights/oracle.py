"""Scalar-loop oracle for behavior_weights, written apart from the reference: one token at a time."""

from __future__ import annotations

import math
import struct

import torch
from torch import Tensor

DEFAULTS = {"tis": (0.0, 2.0), "icepop": (0.5, 2.0)}


def _to_dtype(x: float, dtype: torch.dtype) -> float:
    """Round a Python float to the nearest float32 (IEEE round-to-nearest-even); float64 is unchanged."""
    if dtype == torch.float64 or math.isnan(x) or math.isinf(x):
        return x
    if dtype != torch.float32:
        raise TypeError(f"the oracle handles float32 and float64, not {dtype}")
    try:
        return struct.unpack("<f", struct.pack("<f", x))[0]
    except OverflowError:
        return math.copysign(math.inf, x)


def _bounds(mode, low, high) -> tuple[float, float]:
    if mode not in ("tis", "icepop"):
        raise ValueError("unknown mode")
    lo = DEFAULTS[mode][0] if low is None else float(low)
    hi = DEFAULTS[mode][1] if high is None else float(high)
    for value in (lo, hi):
        if value != value or value in (math.inf, -math.inf):
            raise ValueError("bounds must be finite")
    if lo < 0 or lo > hi or hi <= 0:
        raise ValueError("need 0 <= low <= high and high > 0")
    return lo, hi


def _weight(rho: float, lo: float, hi: float, mode: str) -> float:
    if mode == "tis":
        if rho < lo:
            return lo
        if rho > hi:
            return hi
        return rho
    if lo <= rho and rho <= hi:
        return rho
    return 0.0


def behavior_weights(train_logp: Tensor, rollout_logp: Tensor, mask: Tensor, mode, low=None, high=None):
    shape = tuple(train_logp.shape)
    if tuple(rollout_logp.shape) != shape or tuple(mask.shape) != shape:
        raise ValueError("shapes differ")
    lo, hi = _bounds(mode, low, high)
    dtype = train_logp.dtype
    lo, hi = _to_dtype(lo, dtype), _to_dtype(hi, dtype)
    tr, ro, mk = train_logp.detach().tolist(), rollout_logp.detach().tolist(), mask.tolist()
    table = []
    n_valid = n_changed = 0
    for i in range(shape[0]):
        row = []
        for t in range(shape[1]):
            if not mk[i][t]:
                row.append(0.0)
                continue
            d = _to_dtype(tr[i][t] - ro[i][t], dtype)
            try:
                rho = _to_dtype(math.exp(d), dtype)
            except OverflowError:
                rho = math.inf
            w = _weight(rho, lo, hi, mode)
            row.append(w)
            n_valid += 1
            n_changed += w != rho
        table.append(row)
    share = n_changed / n_valid if n_valid else 0.0
    weights = torch.tensor(table, dtype=dtype).reshape(shape)
    return weights, torch.tensor(_to_dtype(share, dtype), dtype=dtype)
