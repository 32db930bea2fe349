"""Starter for score_centering: a centred policy-gradient loss with a top-k head and a reconstructed tail.

Implement the function below. Use `torch` and the standard library: numpy and torch's other dependencies
import too, but answers must be torch tensors and no check needs them. Read the statement for the derivation
and the worked examples; the docstring below is the exact contract the grader checks.
"""

from __future__ import annotations

import torch  # noqa: F401 - you will need it
from torch import Tensor


def score_centering_loss(
    logits: Tensor,
    tokens: Tensor,
    rollout_logp: Tensor,
    head_ids: Tensor,
    rollout_head_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    mode: str = "none",
    low: float | None = None,
    high: float | None = None,
    eps: float = 1e-6,
) -> Tensor:
    """Per-row score-centred loss: -A (w_y log p_y - sum_{v in H} residual_v log p_v).

    Args:
        logits: [N, V] floating (float32, float64, bfloat16 or float16), the trainer's logits. One row is one
            token position; it may require grad.
        tokens: [N] integer, the sampled token y of each row.
        rollout_logp: [N] floating, log q_y as the sampler recorded it.
        head_ids: [N, k] integer, the sampler's head H of each row (distinct ids; k = 0 allowed; y need not be
            in H).
        rollout_head_logp: [N, k] floating, log q_v for v in H, with full-vocabulary mass (not renormalized);
            -inf means q_v = 0.
        advantages: [N] floating, A.
        mask: [N], 1/True on real rows, 0/False on padding; bool or any integer or floating dtype.
        mode: "none" (f = 1), "tis" (f(x) = clamp(x, low, high)) or "mis" (f(x) = x if low <= x <= high,
            both ends INCLUSIVE, else 0).
        low, high: the bounds; None means the mode's default: "tis" (0, 2), "mis" (0.5, 5). Ignored by "none".
        eps: the floor of both tail masses.

    Returns:
        loss: [N] in logits' dtype and device, 0.0 on padding rows. For a row with mask 1, computed in float32
        at least (float64 stays float64), every ratio as exp(log p - log q):
            log p = log_softmax(logits) over the WHOLE vocabulary
            p_H = detach(exp(log p[H])), q_H = exp(rollout_head_logp), P_H = sum p_H, Q_H = sum q_H
            alpha = max(1 - Q_H, eps) / max(1 - P_H, eps);  alpha' = alpha * f(1 / alpha)
            residual_v = detach(q_v * f(p_v / q_v) - alpha' * p_v) for v in H  (q_v * f = 0 where q_v = 0)
            w_y = detach(f(p_y / q_y)) with the current p_y and q_y = exp(rollout_logp)
            loss = -detach(A) * (w_y * log p_y - sum_H residual_v * log p_v)
        Gradient reaches logits only: -d loss / d logits = A (w_y (e_y - p) - sum_H residual_v (e_v - p)).

    Numerics:
        Padding rows may hold NaN, +-inf or anything else (their ids stay valid): select them away with
        torch.where before any arithmetic. A head slot with log q = -inf has ratio inf: never compute 0 * inf.

    Raises:
        ValueError: shapes that disagree; tokens/head_ids not integer or the other tensors not floating; an id
            outside [0, V) or repeated within a head row; an unknown mode; bounds (after defaults, tis/mis
            only) not finite, not 0 <= low <= high, or high <= 0; on a row with mask 1, sum of q over the head
            above 1 + 1e-4, or NaN in logits, rollout_logp, rollout_head_logp or advantages.

    Inputs are never modified in place; non-contiguous inputs must work.
    """
    raise NotImplementedError
