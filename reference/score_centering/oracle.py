"""Dense per-token oracle for score_centering_loss, written apart from the reference.

One row at a time, in Python floats: it rebuilds the whole reconstructed behaviour distribution q-hat over the
vocabulary (q on the head, alpha * p on the tail), weights every token, and centres the score with the full
mean mu = sum_v q-hat_v w_v (e_v - p). The gradient comes from that dense formula, never from the head-only
residual algebra the reference uses, so the two agree only if the algebra is right. The loss value is the
contract's: the centring coefficient of a token is q-hat_v w_v minus the tail's own coefficient per unit of p,
which the loop finds to be zero on every tail token.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

DEFAULTS = {"tis": (0.0, 2.0), "mis": (0.5, 5.0)}


def _bounds(mode, low, high) -> tuple[float, float]:
    if mode not in ("none", "tis", "mis"):
        raise ValueError("unknown mode")
    if mode == "none":
        return 0.0, math.inf
    lo = DEFAULTS[mode][0] if low is None else float(low)
    hi = DEFAULTS[mode][1] if high is None else float(high)
    if lo != lo or hi != hi or abs(lo) == math.inf or abs(hi) == math.inf or lo < 0 or lo > hi or hi <= 0:
        raise ValueError("bad bounds")
    return lo, hi


def _f(x: float, mode: str, lo: float, hi: float) -> float:
    if mode == "none":
        return 1.0
    if mode == "tis":
        return min(max(x, lo), hi)
    return x if lo <= x <= hi else 0.0


def _exp(x: float) -> float:
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf


def _row(z: list[float], y: int, log_q_y: float, head: list[int], log_q_head: list[float], adv: float,
         mode: str, lo: float, hi: float, eps: float) -> tuple[float, list[float]]:
    """(loss, d loss / d logits) of one active row."""
    vocab = len(z)
    top = max(z)
    log_norm = top + math.log(math.fsum(math.exp(v - top) for v in z))
    logp = [v - log_norm for v in z]
    p = [math.exp(v) for v in logp]
    q_head = {v: (0.0 if lq == -math.inf else math.exp(lq)) for v, lq in zip(head, log_q_head, strict=True)}
    if math.fsum(q_head.values()) > 1.0 + 1e-4:
        raise ValueError("head mass above 1")
    alpha = max(1.0 - math.fsum(q_head.values()), eps) / max(1.0 - math.fsum(p[v] for v in head), eps)
    # q-hat and the weight of every token of the vocabulary
    coeff = []
    for v in range(vocab):
        if v in q_head:
            qv = q_head[v]
            ratio = _exp(logp[v] - log_q_head[head.index(v)]) if qv > 0 else math.inf
        else:
            qv = alpha * p[v]
            ratio = 1.0 / alpha  # p_v / (alpha p_v), exactly
        coeff.append(0.0 if qv == 0.0 else qv * _f(ratio, mode, lo, hi))
    tail_per_p = alpha * _f(1.0 / alpha, mode, lo, hi)  # a tail token's coefficient per unit of p
    total = math.fsum(coeff)
    w_y = _f(_exp(logp[y] - log_q_y), mode, lo, hi)
    # -d loss / d z_j = A (w_y (1[j = y] - p_j) - (coeff_j - p_j * total))
    grad = [-adv * (w_y * ((j == y) - p[j]) - (coeff[j] - p[j] * total)) for j in range(vocab)]
    centring = math.fsum((coeff[v] - tail_per_p * p[v]) * logp[v] for v in range(vocab))
    loss = -adv * (w_y * logp[y] - centring)
    return loss, grad


class _Spliced(torch.autograd.Function):
    """Loss values with a gradient computed beforehand, attached to logits."""

    @staticmethod
    def forward(ctx, logits: Tensor, values: Tensor, grads: Tensor) -> Tensor:  # type: ignore[override]
        ctx.save_for_backward(grads)
        return values.clone()

    @staticmethod
    def backward(ctx, grad_out: Tensor):  # type: ignore[override]
        (grads,) = ctx.saved_tensors
        return grad_out[:, None] * grads, None, None


def score_centering_loss(logits, tokens, rollout_logp, head_ids, rollout_head_logp, advantages, mask,
                         mode="none", low=None, high=None, eps=1e-6):
    if len(logits.shape) != 2:
        raise ValueError("logits must be [N, V]")
    n, vocab = logits.shape
    if head_ids.dim() != 2 or tuple(rollout_head_logp.shape) != tuple(head_ids.shape) or head_ids.shape[0] != n:
        raise ValueError("head shapes")
    if any(tuple(t.shape) != (n,) for t in (tokens, rollout_logp, advantages, mask)):
        raise ValueError("row shapes")
    lo, hi = _bounds(mode, low, high)
    zs, ys, lq = logits.detach().double().tolist(), tokens.tolist(), rollout_logp.detach().double().tolist()
    heads, lqh = head_ids.tolist(), rollout_head_logp.detach().double().tolist()
    advs, active = advantages.detach().double().tolist(), [bool(m) for m in mask.tolist()]
    values, grads = [], []
    for i in range(n):
        if any(not 0 <= v < vocab for v in [ys[i], *heads[i]]) or len(set(heads[i])) != len(heads[i]):
            raise ValueError("bad ids")
        if not active[i]:
            values.append(0.0)
            grads.append([0.0] * vocab)
            continue
        if any(math.isnan(x) for x in [*zs[i], lq[i], *lqh[i], advs[i]]):
            raise ValueError("NaN on an active row")
        loss, grad = _row(zs[i], ys[i], lq[i], heads[i], lqh[i], advs[i], mode, lo, hi, eps)
        values.append(loss)
        grads.append(grad)
    # Computed in float64 and rounded once to the logits' dtype.
    value_t = torch.tensor(values, dtype=torch.float64).to(logits.dtype)
    grad_t = torch.tensor(grads, dtype=torch.float64).reshape(n, vocab).to(logits.dtype)
    return _Spliced.apply(logits, value_t, grad_t)
