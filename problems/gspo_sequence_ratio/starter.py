"""Starter for gspo_sequence_ratio: GSPO's sequence-level importance ratio, its clipped loss and GSPO-token's ratio.

Implement the three functions below. Use `torch` and the standard library: numpy and torch's other dependencies
import too, but answers must be torch tensors and no check needs them. Read the statement for the formulas; the
docstrings below are the exact contract the grader checks.

Common to all three: logp [B, L] float32 or float64 is the log-probability of each sampled token under the policy
being trained (it may require grad); old_logp [B, L] the same under the policy that sampled it (a constant: no
gradient ever reaches it); mask [B, L] is 1/True on valid tokens, 0/False on padding, bool or any int/float dtype
holding only 0 and 1, and never changes a result's dtype. Results are in logp's dtype and device. Padded positions
may hold NaN or +-inf in logp and old_logp: they must reach no arithmetic, forward or backward. Valid log-ratios
lie in [-20, 20]; valid log-probabilities may lie far below where exp underflows. Inputs are never modified;
non-contiguous inputs must work. ValueError, before computing anything, when logp is not a 2-D floating tensor or
old_logp.shape or mask.shape differs from logp.shape (no broadcasting).
"""

from __future__ import annotations

import torch  # noqa: F401 - you will need it
from torch import Tensor


def sequence_ratio(logp: Tensor, old_logp: Tensor, mask: Tensor) -> Tensor:
    """s_i = exp( (1 / |y_i|) * sum over response i's valid tokens of (logp - old_logp) ), shape [B].

    |y_i| is the number of valid tokens of response i; a response with none has s_i = 1 and no gradient.
    Connected to logp's graph: d s_i / d logp[i, t] = s_i / |y_i| on each valid token.
    """
    raise NotImplementedError


def gspo_loss(logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, eps_low: float = 3e-4,
              eps_high: float = 4e-4) -> tuple[Tensor, Tensor]:
    """GSPO's clipped sequence-level loss (to minimize) and the share of tokens in clipped responses.

    advantages: [B], one per response, a constant. With s_i from sequence_ratio:
        l_i = max(-A_i * s_i, -A_i * clamp(s_i, 1 - eps_low, 1 + eps_high)), and l_i = 0 for an empty response.
    loss: (1 / B) * sum_i l_i, B counting every response, empty ones too; a 0-dim tensor connected to logp's
        graph (backward works, also when no token is valid: then loss and gradient are 0).
    clipfrac: detached 0-dim, (valid tokens of the responses where -A_i * clamp(s_i, ...) > -A_i * s_i, strictly)
        / max(1, valid tokens of the batch).
    Raises ValueError also when advantages.shape is not (B,), eps_low is not in [0, 1), or eps_high is not finite
    and > 0.
    """
    raise NotImplementedError


def gspo_token_ratio(logp: Tensor, old_logp: Tensor, mask: Tensor) -> Tensor:
    """GSPO-token's per-token ratio s_i,t = sg[s_i] * pi(y_i,t) / sg[pi(y_i,t)], shape [B, L].

    Its value is s_i on every valid token of response i and 0 on padding; its gradient reaches logp[i, t] through
    that token's own log-probability only: d s_i,t / d logp[i, t'] = s_i if t' == t (valid), else 0.
    """
    raise NotImplementedError
