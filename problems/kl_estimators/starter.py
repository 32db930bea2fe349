"""Starter for kl_estimators: implement both functions; the docstrings are the exact contract the grader checks."""

from __future__ import annotations

import torch  # noqa: F401 - you will need it
from torch import Tensor


def kl_penalty(logp: Tensor, ref_logp: Tensor, mask: Tensor, estimator: str = "k3", reduction: str = "none") -> Tensor:
    """Per-token estimate of KL(pi || pi_ref) from tokens sampled from pi, as a detached reward penalty.

    With d = logp - ref_logp (so the ratio r = pi_ref / pi = exp(-d)), on a valid token:
        k1 = d,    k2 = d**2 / 2,    k3 = (r - 1) - log r = exp(-d) - 1 + d.

    Args:
        logp: [B, L] float32 or float64, log pi of each sampled token. It may require grad; the result must not.
        ref_logp: [B, L], log pi_ref of the same tokens, same dtype as logp.
        mask: [B, L], 1/True on valid tokens, 0/False on padding; bool or any int/float dtype.
        estimator: exactly "k1", "k2" or "k3".
        reduction: "none": the [B, L] values, exactly 0 on padding; "mean": a 0-dim token mean over the valid
            tokens of the whole batch, sum(m * k) / max(1, sum(m)) (0 when no token is valid).

    Returns a detached tensor in logp's dtype and device; no clamping; NaN/inf padding never reaches it; inputs
    are never modified; non-contiguous inputs work. Raises ValueError: logp not a 2-D floating tensor; ref_logp or
    mask of another shape (no broadcasting); ref_logp of another dtype; estimator or reduction not named above.
    """
    raise NotImplementedError


def kl_loss(logp: Tensor, ref_logp: Tensor, mask: Tensor, estimator: str = "k3") -> Tensor:
    """The token-mean KL term of a loss: the value of kl_penalty(..., reduction="mean"), differentiable in logp.

    Gradient flows through every occurrence of logp (in d and in r); ref_logp is a constant even when it requires
    grad. Per valid token, d loss / d logp = k'(d) / max(1, sum(m)) with k1' = 1, k2' = d, k3' = 1 - exp(-d).
    Returns a 0-dim tensor in logp's dtype. An empty mask gives a zero still connected to logp's graph, whose
    backward() leaves finite zero gradients even where the padding is NaN.

    Raises: as kl_penalty (there is no reduction argument).
    """
    raise NotImplementedError
