"""Starter for behavior_weights: truncated importance sampling (TIS) and ICE-POP behavior-correction weights.

Implement the function below. Use `torch` and the standard library: numpy and torch's other dependencies
import too, but answers must be torch tensors and no check needs them. Read the statement for the formulas;
the docstring below is the exact contract the grader checks.
"""

from __future__ import annotations

import torch  # noqa: F401 - you will need it
from torch import Tensor


def behavior_weights(
    train_logp: Tensor,
    rollout_logp: Tensor,
    mask: Tensor,
    mode: str,
    low: float | None = None,
    high: float | None = None,
) -> tuple[Tensor, Tensor]:
    """Per-token behavior-correction weights and the share of tokens whose weight is not their ratio.

    Args:
        train_logp: [B, L] floating (float32, float64 or bfloat16), log p0 of each sampled token as the
            trainer recomputes it. It may require grad; the results must not.
        rollout_logp: [B, L], same dtype, log q of the same token as the sampler recorded it.
        mask: [B, L], 1/True on valid tokens, 0/False on padding. bool or any int/float dtype holding only
            0 and 1; its dtype never changes the results' dtype.
        mode: exactly "tis" or "icepop".
        low, high: the interval [low, high]. None (or omitted) means the mode's default:
            "tis": low 0, high 2;  "icepop": low 0.5, high 2.

    Returns:
        (weights, clipfrac), both detached, in train_logp's dtype and device.
        weights: [B, L]. On a valid token, with rho = exp(train_logp - rollout_logp) computed in the
            input dtype and the bounds rounded to that dtype (torch.tensor(low, dtype=rho.dtype)):
                "tis":    weights = clamp(rho, low, high)
                "icepop": weights = rho if low <= rho <= high (both ends INCLUSIVE), else 0
            An overflowing rho (inf) gives high under "tis" and 0 under "icepop". Padding gets exactly 0.
        clipfrac: 0-dim. (number of valid tokens whose weight != rho) / (number of valid tokens),
            rounded to the input dtype; 0 when no token is valid.

    Numerics:
        Padded positions may hold NaN or +-inf in either input: do not let them reach any arithmetic
        (clamp(NaN) is NaN, and NaN * 0 is NaN). Select them away with torch.where.

    Raises:
        ValueError: rollout_logp.shape or mask.shape differs from train_logp.shape (no broadcasting);
            mode is not exactly "tis" or "icepop"; low or high (after defaults) is not finite;
            not 0 <= low <= high; high <= 0.

    Inputs are never modified in place; non-contiguous inputs must work.
    """
    raise NotImplementedError
