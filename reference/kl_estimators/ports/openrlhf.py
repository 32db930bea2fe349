"""kl_estimators as OpenRLHF computes it: OpenRLHF/OpenRLHF@3c3be6234e0cb353e76bb8019947db9dfe99fca7.

`openrlhf/models/utils.py` lines 64-95 (`compute_approx_kl`, estimator `k1` by default): the log-ratio in float32
(`.float()` on both inputs), k1 as is, k2 = log_ratio**2 / 2, k3 = exp(-log_ratio) - 1 + log_ratio, any other name a
ValueError, and every estimator's value clamped to [-10, 10]. Lines 166-169 (`masked_mean`): (x * mask).sum() /
mask.sum(), no floor. The KL loss (`openrlhf/trainer/ray/ppo_actor.py` lines 319-330, and `openrlhf/models/loss.py`
lines 11-32, `aggregate_loss` per token) is that masked mean over the batch. Shapes and dtypes are not validated and
the base log-probabilities are not detached (they arrive without a graph). The float32 result is handed back in the
inputs' dtype, as training code in float32 does.
"""

from __future__ import annotations

from torch import Tensor


def _approx_kl(logp: Tensor, ref_logp: Tensor, estimator: str) -> Tensor:
    log_ratio = logp.float() - ref_logp.float()
    if estimator == "k1":
        pass
    elif estimator == "k2":
        log_ratio = log_ratio**2 / 2.0
    elif estimator == "k3":
        log_ratio = (-log_ratio).exp() - 1 + log_ratio
    else:
        raise ValueError(f"Unknown kl_estimator: {estimator}")
    return log_ratio.clamp(min=-10, max=10)


def kl_penalty(logp: Tensor, ref_logp: Tensor, mask: Tensor, estimator: str = "k1", reduction: str = "none") -> Tensor:
    if reduction not in ("none", "mean"):
        raise ValueError(f"unknown reduction {reduction!r}")
    kl = _approx_kl(logp.detach(), ref_logp.detach(), estimator) * mask  # [B, L]
    return (kl if reduction == "none" else kl.sum() / mask.sum()).to(logp.dtype)


def kl_loss(logp: Tensor, ref_logp: Tensor, mask: Tensor, estimator: str = "k1") -> Tensor:
    return ((_approx_kl(logp, ref_logp, estimator) * mask).sum() / mask.sum()).to(logp.dtype)
