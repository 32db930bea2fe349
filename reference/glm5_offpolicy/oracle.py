"""Scalar-loop oracle for glm5_offpolicy, written apart from the reference: one token at a time."""

from __future__ import annotations

import math
import struct

import torch
from torch import Tensor


def _round_to(x: float, dtype: torch.dtype) -> float:
    """Round a Python float to the nearest value of `dtype` (float32 or float64)."""
    if dtype == torch.float32:
        if math.isinf(x) or abs(x) > 3.4028234663852886e38:
            return math.copysign(math.inf, x)
        return struct.unpack("<f", struct.pack("<f", x))[0]
    return x


def _exp_in(x: float, dtype: torch.dtype) -> float:
    try:
        return _round_to(math.exp(x), dtype)
    except OverflowError:
        return math.inf


def _check(logp: Tensor, rollout_logp: Tensor, mask: Tensor, clip_low: float, clip_high: float) -> None:
    if len(logp.shape) != 2:
        raise ValueError("logp must be [B, L]")
    if tuple(rollout_logp.shape) != tuple(logp.shape) or tuple(mask.shape) != tuple(logp.shape):
        raise ValueError("rollout_logp and mask must have logp's shape")
    if math.isnan(clip_low) or clip_low <= 0 or clip_low >= 1:
        raise ValueError("clip_low outside (0, 1)")
    if math.isnan(clip_high) or math.isinf(clip_high) or clip_high <= 0:
        raise ValueError("clip_high must be finite and positive")


def _weight_table(logp: Tensor, rollout_logp: Tensor, mask: Tensor, clip_low: float, clip_high: float):
    dtype = logp.dtype
    low = _round_to(1.0 - clip_low, dtype)
    high = _round_to(1.0 + clip_high, dtype)
    rows, cols = logp.shape
    lp, rl, mk = logp.detach().tolist(), rollout_logp.detach().tolist(), mask.tolist()
    table, valid = [], []
    for i in range(rows):
        trow, vrow = [], []
        for t in range(cols):
            if not mk[i][t]:
                trow.append(0.0)
                vrow.append(False)
                continue
            d = _round_to(lp[i][t] - rl[i][t], dtype)
            r = _exp_in(d, dtype)
            trow.append(r if low < r < high else 0.0)
            vrow.append(True)
        table.append(trow)
        valid.append(vrow)
    return table, valid


def masked_is_weights(logp, rollout_logp, mask, clip_low=0.2, clip_high=0.2):
    _check(logp, rollout_logp, mask, clip_low, clip_high)
    table, _ = _weight_table(logp, rollout_logp, mask, clip_low, clip_high)
    return torch.tensor(table, dtype=logp.dtype).reshape(logp.shape)


def offpolicy_loss(logp, rollout_logp, advantages, mask, clip_low=0.2, clip_high=0.2):
    _check(logp, rollout_logp, mask, clip_low, clip_high)
    if tuple(advantages.shape) != (logp.shape[0],):
        raise ValueError("advantages must be [B]")
    table, valid = _weight_table(logp, rollout_logp, mask, clip_low, clip_high)
    adv = advantages.detach().tolist()
    lp = logp.detach().tolist()
    count = sum(v for row in valid for v in row)
    denom = float(max(1, count))
    total = 0.0
    coeff = [[0.0] * len(row) for row in valid]
    for i, row in enumerate(valid):
        for t, ok in enumerate(row):
            if ok:
                coeff[i][t] = -table[i][t] * adv[i] / denom
                total += coeff[i][t] * lp[i][t]
    # The loss is linear in logp, so d loss / d logp is exactly `coeff`: attach it to the loop's value.
    c = torch.tensor(coeff, dtype=logp.dtype).reshape(logp.shape)
    valid_t = torch.tensor(valid, dtype=torch.bool).reshape(logp.shape)
    centred = torch.where(valid_t, logp - logp.detach(), torch.zeros((), dtype=logp.dtype))
    return torch.tensor(total, dtype=logp.dtype) + (c * centred).sum()
