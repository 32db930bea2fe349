# defect: MIS weights are x * 1[low <= x <= high] and q_v f(p_v / q_v) is a plain product: 0 * inf gives NaN.
# must_fail: no_mutation, oracle_values, oracle_grads, oracle_large, zero_q_slots, stop_gradient
# may_fail:
"""Known-wrong score_centering_loss solution (mis_inf_times_zero).

MIS weights are x * 1[low <= x <= high] and q_v f(p_v / q_v) is a plain product: 0 * inf gives NaN.

A head slot with q = 0 has ratio inf, and inf * 0 is NaN.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

DEFAULT_BOUNDS = {"tis": (0.0, 2.0), "mis": (0.5, 5.0)}
MODES = ("none", "tis", "mis")
HEAD_MASS_SLACK = 1e-4  # a recorded head may exceed mass 1 by rounding, never by more


def resolve_bounds(mode: object, low: float | None, high: float | None) -> tuple[float, float]:
    """The mode's bounds with defaults filled in, validated; mode "none" uses no bounds at all."""
    if not isinstance(mode, str) or mode not in MODES:
        raise ValueError(f"mode must be one of {list(MODES)}, got {mode!r}")
    if mode == "none":
        return 0.0, math.inf
    default_low, default_high = DEFAULT_BOUNDS[mode]
    lo = default_low if low is None else float(low)
    hi = default_high if high is None else float(high)
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise ValueError(f"low and high must be finite, got low={lo}, high={hi}")
    if not 0.0 <= lo <= hi or hi <= 0.0:
        raise ValueError(f"bounds must satisfy 0 <= low <= high and high > 0, got low={lo}, high={hi}")
    return lo, hi


def _is_integer(t: Tensor) -> bool:
    return not t.is_floating_point() and not t.is_complex() and t.dtype != torch.bool


def _is_real_float(t: Tensor) -> bool:
    return t.is_floating_point()


def _validate(logits: Tensor, tokens: Tensor, rollout_logp: Tensor, head_ids: Tensor, rollout_head_logp: Tensor,
              advantages: Tensor, mask: Tensor) -> None:
    if logits.dim() != 2 or not _is_real_float(logits):
        raise ValueError(f"logits must be a 2-D floating tensor [N, V], got {logits.dtype} {list(logits.shape)}")
    n, vocab = logits.shape
    if head_ids.dim() != 2 or head_ids.shape[0] != n:
        raise ValueError(f"head_ids must be [N, k] with N = {n}, got {list(head_ids.shape)}")
    for name, t, shape in [("tokens", tokens, (n,)), ("rollout_logp", rollout_logp, (n,)),
                           ("advantages", advantages, (n,)), ("mask", mask, (n,)),
                           ("rollout_head_logp", rollout_head_logp, tuple(head_ids.shape))]:
        if tuple(t.shape) != shape:
            raise ValueError(f"{name} must have shape {list(shape)}, got {list(t.shape)}")
    for name, t in [("tokens", tokens), ("head_ids", head_ids)]:
        if not _is_integer(t):
            raise ValueError(f"{name} must hold integer ids, got dtype {t.dtype}")
    for name, t in [("rollout_logp", rollout_logp), ("rollout_head_logp", rollout_head_logp),
                    ("advantages", advantages)]:
        if not _is_real_float(t):
            raise ValueError(f"{name} must be floating, got dtype {t.dtype}")
    if bool(((tokens < 0) | (tokens >= vocab)).any()) or bool(((head_ids < 0) | (head_ids >= vocab)).any()):
        raise ValueError(f"token and head ids must lie in [0, {vocab})")
    if head_ids.shape[1] > 1:
        ordered = head_ids.sort(dim=1).values  # [N, k]
        if bool((ordered[:, 1:] == ordered[:, :-1]).any()):
            raise ValueError("the ids of one head row must be distinct")
    active = mask != 0  # [N]
    for name, t in [("logits", logits), ("rollout_logp", rollout_logp), ("rollout_head_logp", rollout_head_logp),
                    ("advantages", advantages)]:
        rows = t.detach()[active]
        if bool(torch.isnan(rows).any()):
            raise ValueError(f"{name} holds NaN on an active row")


def _weight(x: Tensor, mode: str, lo: float, hi: float) -> Tensor:
    """f(x) of the mode: 1, clamp(x, lo, hi), or x on [lo, hi] (inclusive) and 0 elsewhere, inf included."""
    if mode == "none":
        return torch.ones_like(x)
    if mode == "tis":
        return torch.clamp(x, lo, hi)
    return x * ((x >= lo) & (x <= hi))


def score_centering_loss(
    logits: Tensor, tokens: Tensor, rollout_logp: Tensor, head_ids: Tensor, rollout_head_logp: Tensor,
    advantages: Tensor, mask: Tensor, mode: str = "none", low: float | None = None, high: float | None = None,
    eps: float = 1e-6,
) -> Tensor:
    _validate(logits, tokens, rollout_logp, head_ids, rollout_head_logp, advantages, mask)
    lo, hi = resolve_bounds(mode, low, high)
    compute = torch.float64 if logits.dtype == torch.float64 else torch.float32
    active = mask != 0  # [N]
    zero = torch.zeros((), dtype=compute, device=logits.device)
    # Padding rows may hold anything (NaN, inf): they are replaced before any arithmetic, so their gradient is 0.
    z = torch.where(active[:, None], logits.to(compute), zero)  # [N, V]
    log_q_y = torch.where(active, rollout_logp.detach().to(compute), zero)  # [N]
    log_q_head = torch.where(active[:, None], rollout_head_logp.detach().to(compute), zero)  # [N, k], may be -inf
    adv = torch.where(active, advantages.detach().to(compute), zero)  # [N]
    ids, head = tokens.long(), head_ids.long()

    q_head = log_q_head.exp()  # [N, k]
    if bool((active & (q_head.sum(dim=1) > 1.0 + HEAD_MASS_SLACK)).any()):
        raise ValueError("a recorded head holds more than the whole probability mass (sum of q over H > 1)")

    logp = torch.log_softmax(z, dim=-1)  # [N, V], over the full vocabulary
    logp_head = logp.gather(1, head)  # [N, k]
    logp_y = logp.gather(1, ids[:, None]).squeeze(1)  # [N]
    p_head = logp_head.detach().exp()  # [N, k]

    tail_q = torch.clamp(1.0 - q_head.sum(dim=1), min=eps)  # [N]
    tail_p = torch.clamp(1.0 - p_head.sum(dim=1), min=eps)  # [N]
    alpha = tail_q / tail_p  # [N]
    alpha_prime = alpha * _weight(1.0 / alpha, mode, lo, hi)  # [N]; every tail token has ratio 1 / alpha

    ratio_head = torch.exp(logp_head.detach() - log_q_head)  # [N, k]; +inf where q = 0
    weighted_q = q_head * _weight(ratio_head, mode, lo, hi)
    residual = weighted_q - alpha_prime[:, None] * p_head  # [N, k], detached

    w_y = _weight(torch.exp(logp_y.detach() - log_q_y), mode, lo, hi)  # [N], the current p_y over q_y
    loss = -adv * (w_y * logp_y - (residual * logp_head).sum(dim=1))  # [N]
    return torch.where(active, loss, zero).to(logits.dtype)
