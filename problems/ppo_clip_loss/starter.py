"""Starter for ppo_clip_loss: PPO's clipped surrogate as GRPO optimizes it, with a dual clip and two reductions.

Implement the function below. Use `torch` and the standard library: numpy and torch's other dependencies
import too, but answers must be torch tensors and no check needs them. Read the statement for the formulas;
the docstring below is the exact contract the grader checks.
"""

from __future__ import annotations

import torch  # noqa: F401 - you will need it
from torch import Tensor


def ppo_clip_loss(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    dual_clip: float | None = None,
    reduction: str = "token_mean",
) -> tuple[Tensor, Tensor]:
    """Clipped surrogate loss (to minimize) and the share of tokens on its clipped branch.

    Args:
        logp: [B, L] float32 or float64, log-probability of each sampled token under the policy being
            trained (B responses, L token positions). It may require grad.
        old_logp: [B, L], log-probability of the same token under the policy that sampled it.
        advantages: [B], one advantage per response, shared by all of that response's tokens.
        mask: [B, L], 1/True on valid tokens, 0/False on padding. bool or any int/float dtype holding only
            0 and 1; its dtype never changes the results' dtype.
        eps_low: width of the interval below 1; 0 <= eps_low < 1.
        eps_high: width of the interval above 1; finite and > 0.
        dual_clip: None, or a finite c > 1 that caps the loss of tokens with a negative advantage.
        reduction: exactly "token_mean" or "seq_mean".

    Returns:
        (loss, clipfrac), two 0-dim tensors in logp's dtype and device.
        On a valid token of response i, with r = exp(logp - sg(old_logp)):
            l = max(-A_i * r, -A_i * clamp(r, 1 - eps_low, 1 + eps_high))
            and, when dual_clip = c is given and A_i < 0:  l = min(l, -c * A_i).
        loss:
            "token_mean": sum of l over valid tokens / max(1, number of valid tokens)
            "seq_mean":   (1 / B) * sum_i [ sum_t l / max(1, valid tokens of response i) ]
                          (B counts every response, even one with no valid token)
            Connected to logp's graph (loss.backward() works), also when no token is valid (then the
            loss is 0 and the gradient is 0). Gradient flows through logp only: old_logp and advantages
            are constants.
        clipfrac: detached. (valid tokens where -A * clamp(r, ...) > -A * r, strictly) / (valid tokens),
            whatever the reduction, the dual clip playing no part; 0 when no token is valid.

    Numerics:
        Padded positions may hold NaN or +-inf in logp and old_logp: do not let them reach any arithmetic
        (0 * NaN is NaN, in the forward and in the backward pass). Valid log-ratios lie in [-20, 20].

    Raises:
        ValueError, before computing anything, when: logp is not a 2-D floating tensor; old_logp.shape or
            mask.shape differs from logp.shape (no broadcasting); advantages.shape is not (B,); eps_low is
            not in [0, 1); eps_high is not finite or <= 0; dual_clip is neither None nor a finite number
            > 1; reduction is not "token_mean" or "seq_mean".

    Inputs are never modified in place; non-contiguous inputs must work.
    """
    raise NotImplementedError
