"""score_centering_loss, dense version: build q-hat and the weights over the whole vocabulary, then centre.

Instead of the head-only residual, this keeps one coefficient per vocabulary token, c_v = q-hat_v w_v, and uses
the tail's own coefficient per unit of p (alpha') to write the loss in the contract's form.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

BOUNDS = {"tis": (0.0, 2.0), "mis": (0.5, 5.0)}


def _f(x: Tensor, mode: str, low: float, high: float) -> Tensor:
    if mode == "none":
        return torch.ones_like(x)
    if mode == "tis":
        return x.clamp(low, high)
    keep = (x >= low) & (x <= high)
    return torch.where(keep, x, torch.zeros_like(x))


def _check_inputs(logits, tokens, rollout_logp, head_ids, rollout_head_logp, advantages, mask) -> None:
    if logits.ndim != 2 or not logits.dtype.is_floating_point:
        raise ValueError("logits must be a floating [N, V] tensor")
    n, v = logits.shape
    if head_ids.ndim != 2 or head_ids.shape[0] != n or rollout_head_logp.shape != head_ids.shape:
        raise ValueError("head_ids and rollout_head_logp must both be [N, k]")
    if any(t.shape != (n,) for t in (tokens, rollout_logp, advantages, mask)):
        raise ValueError("tokens, rollout_logp, advantages and mask must be [N]")
    for t in (tokens, head_ids):
        if t.dtype.is_floating_point or t.dtype.is_complex or t.dtype == torch.bool:
            raise ValueError("ids must be integers")
    for t in (rollout_logp, rollout_head_logp, advantages):
        if not t.dtype.is_floating_point:
            raise ValueError("recorded values and advantages must be floating")
    ids = torch.cat([tokens.reshape(-1), head_ids.reshape(-1)]).long()
    if ids.numel() and (ids.min() < 0 or ids.max() >= v):
        raise ValueError("an id is out of range")
    for row in head_ids.tolist():
        if len(set(row)) != len(row):
            raise ValueError("a head repeats an id")


def score_centering_loss(logits, tokens, rollout_logp, head_ids, rollout_head_logp, advantages, mask,
                         mode="none", low=None, high=None, eps=1e-6):
    _check_inputs(logits, tokens, rollout_logp, head_ids, rollout_head_logp, advantages, mask)
    if mode not in ("none", "tis", "mis"):
        raise ValueError(f"unknown mode {mode!r}")
    lo, hi = 0.0, math.inf
    if mode != "none":
        lo = BOUNDS[mode][0] if low is None else float(low)
        hi = BOUNDS[mode][1] if high is None else float(high)
        if not (math.isfinite(lo) and math.isfinite(hi) and 0 <= lo <= hi and hi > 0):
            raise ValueError(f"bad bounds {lo}, {hi}")

    n, v = logits.shape
    live = mask.bool()
    work = torch.float64 if logits.dtype == torch.float64 else torch.float32
    for t in (logits, rollout_logp, rollout_head_logp, advantages):
        if torch.isnan(t.detach()[live]).any():
            raise ValueError("NaN on a real row")

    # padding rows become harmless numbers before anything else
    z = torch.where(live[:, None], logits.to(work), 0.0)
    lq_y = torch.where(live, rollout_logp.detach().to(work), 0.0)
    lq_h = torch.where(live[:, None], rollout_head_logp.detach().to(work), -math.inf)
    a = torch.where(live, advantages.detach().to(work), 0.0)
    heads = head_ids.long()

    q_h = lq_h.exp()
    if ((q_h.sum(1) > 1 + 1e-4) & live).any():
        raise ValueError("the head holds more than all of q")

    logp = z.log_softmax(-1)
    p = logp.detach().exp()
    in_head = torch.zeros(n, v, dtype=torch.bool).scatter(1, heads, True)
    alpha = (1 - q_h.sum(1)).clamp(min=eps) / (1 - p.gather(1, heads).sum(1)).clamp(min=eps)

    # q-hat and the ratio of every token of the vocabulary
    q_hat = (alpha[:, None] * p).scatter(1, heads, q_h)
    ratio = torch.full_like(p, 1.0) / alpha[:, None]
    ratio = ratio.scatter(1, heads, (logp.detach().gather(1, heads) - lq_h).exp())
    coef = torch.where(q_hat > 0, q_hat * _f(ratio, mode, lo, hi), 0.0)
    tail_coef = alpha * _f(1 / alpha, mode, lo, hi)
    # off the head coef - tail_coef * p is zero, so only the head contributes
    centre = torch.where(in_head, coef - tail_coef[:, None] * p, 0.0)

    tok = tokens.long()[:, None]
    w = _f((logp.detach().gather(1, tok) - lq_y[:, None]).exp(), mode, lo, hi)[:, 0]
    loss = -a * (w * logp.gather(1, tok)[:, 0] - (centre * logp).sum(1))
    return torch.where(live, loss, 0.0).to(logits.dtype)
