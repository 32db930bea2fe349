"""Starter for glm5_offpolicy: double-sided off-policy correction (GLM-5 report, section 4.1.2).

Implement both functions below. Use `torch` and the standard library: numpy and torch's other dependencies
import too, but answers must be torch tensors and no check needs them. Read the statement for the formulas;
the docstrings below are the exact contract the grader checks.
"""

from __future__ import annotations

import torch  # noqa: F401 - you will need it
from torch import Tensor


def masked_is_weights(
    logp: Tensor, rollout_logp: Tensor, mask: Tensor, clip_low: float = 0.2, clip_high: float = 0.2
) -> Tensor:
    """Per-token importance weights with double-sided rejection.

    Args:
        logp: [B, L] float32 or float64, log pi_current of each token (B responses, L tokens).
            It may require grad; the weights must not.
        rollout_logp: [B, L], log pi_rollout recorded when the response was generated.
        mask: [B, L], 1/True on valid tokens, 0/False on padding. bool or any int/float dtype holding
            only 0 and 1; its dtype never changes the result's dtype.
        clip_low: width of the interval below 1; must satisfy 0 < clip_low < 1.
        clip_high: width of the interval above 1; must be finite and > 0.

    Returns:
        weights: [B, L], same dtype and device as `logp`, detached (requires_grad False).
        On a valid token, with r = exp(logp - rollout_logp) computed in the input dtype:
            weights = r   if  1 - clip_low < r < 1 + clip_high   (both inequalities strict)
            weights = 0   otherwise (a ratio exactly on a bound is rejected, never clamped).
        The bounds 1 - clip_low and 1 + clip_high are rounded to r's dtype before comparing:
        for float32 inputs the lower bound is float32(0.8) = 0.800000011920929..., not 0.8.
        On padding the weight is exactly 0.

    Numerics:
        Padded positions may hold NaN or +-inf in logp and rollout_logp: do not let them reach any
        arithmetic. A rejected ratio may overflow to inf; select 0 with torch.where, never inf * 0.

    Raises:
        ValueError: logp is not 2-D; rollout_logp.shape or mask.shape differs from logp.shape (no
            broadcasting); clip_low not in (0, 1) (NaN included); clip_high not finite or <= 0.

    Inputs are never modified in place; non-contiguous inputs must work.
    """
    raise NotImplementedError


def offpolicy_loss(
    logp: Tensor,
    rollout_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
) -> Tensor:
    """Token-mean REINFORCE loss corrected by the masked importance weights.

        loss = -sum_{i,t} m_it * w_it * sg(A_i) * logp_it / max(1, sum_{i,t} m_it)

    Args:
        logp, rollout_logp, mask, clip_low, clip_high: as in `masked_is_weights`.
        advantages: [B], one advantage per response, broadcast over that response's tokens. The
            advantage of a response with no valid token is never used and may be NaN.

    Returns:
        loss: a 0-dim Tensor (shape ()) in logp's dtype -- never a Python float or `.item()`.
        The denominator counts every valid token, including tokens whose ratio was rejected.
        Gradient flows only through the direct logp factor: the weights, rollout_logp and the
        advantages are constants, so d loss / d logp_it = -m_it * w_it * A_i / max(1, sum m).
        With an empty mask the loss is a zero that is still connected to logp's graph, so
        loss.backward() works and gives finite zero gradients even if the padding holds NaN.

    Raises:
        ValueError: every case of `masked_is_weights`, and advantages.shape != (B,).

    Inputs are never modified in place; non-contiguous inputs must work.
    """
    raise NotImplementedError
