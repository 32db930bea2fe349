"""kl_estimators as NeMo-RL computes the KL: NVIDIA-NeMo/RL@7ea279abfbeb698b092856d0dab61e7cf39bc909.

`nemo_rl/algorithms/utils.py` lines 42-101, `calculate_kl`: log r = ref - logp clamped to [-20, 20] (where that clamp
bites, the importance weight is detached), k1 = -log r, k2 = (log r)^2 / 2, k3 = exp(log r) - 1 - log r, an optional
importance weight multiplied in, then the value clamped to [-10, 10]; lines 212-224, `masked_mean`: (x * mask).sum()
over (normaliser + 1e-8). `nemo_rl/algorithms/loss/loss_functions.py` lines 477-515: the KL loss weights each token
by exp(logp - logp.detach()) (value 1; its gradient adds k(d), the score-function term, see arXiv 2506.09477),
nan_to_num'd, and takes the token mean over the batch's valid tokens. The reward-side KL (advantage_estimator.py lines
248-258) is computed without grad. The reference is not detached and shapes and dtypes are not validated; the
reduction is handled in NeMo-RL's if/else-raise-ValueError style.
"""

from __future__ import annotations

import torch
from torch import Tensor


def _calculate_kl(
    logprobs,
    logprobs_reference,
    kl_type="k3",
    input_clamp_value=20.0,
    output_clamp_value=10.0,
    importance_sampling_weights=None,
):
    logr = logprobs_reference - logprobs
    if input_clamp_value is not None:
        logr_clamped = logr.clamp(min=-input_clamp_value, max=input_clamp_value)
        if importance_sampling_weights is not None:
            # where the input clamp bites, the weight is detached too
            importance_sampling_weights = torch.where(
                logr == logr_clamped, importance_sampling_weights, importance_sampling_weights.detach()
            )
        logr = logr_clamped

    if kl_type == "k1":
        kl = -logr
    elif kl_type == "k2":
        kl = torch.square(logr) / 2
    elif kl_type == "k3":
        kl = torch.exp(logr) - 1 - logr
    else:
        raise ValueError(f"Invalid KL type: {kl_type}")

    if importance_sampling_weights is not None:
        kl = importance_sampling_weights * kl
    if output_clamp_value is not None:
        kl = kl.clamp(min=-output_clamp_value, max=output_clamp_value)
    return kl


def _masked_mean(values, mask, dim=None, global_normalization_factor=None):
    nf = torch.sum(mask, dim=dim) if global_normalization_factor is None else global_normalization_factor
    return torch.sum(values * mask, dim=dim) / (nf + 1e-8)


def kl_penalty(logp: Tensor, ref_logp: Tensor, mask: Tensor, estimator: str = "k3", reduction: str = "none") -> Tensor:
    with torch.no_grad():  # the reward-side KL is computed without grad in NeMo-RL
        kl = _calculate_kl(logp, ref_logp, kl_type=estimator)
        if reduction == "none":
            out = kl * mask
        elif reduction == "mean":
            out = _masked_mean(kl, mask, global_normalization_factor=mask.sum())
        else:
            raise ValueError(f"Invalid reduction: {reduction}")
    return out.to(logp.dtype).detach()


def kl_loss(logp: Tensor, ref_logp: Tensor, mask: Tensor, estimator: str = "k3") -> Tensor:
    curr = logp
    kl_importance_weights = torch.exp(curr - curr.detach())
    kl_importance_weights = torch.nan_to_num(kl_importance_weights, nan=0.0, posinf=0.0, neginf=0.0)
    kl = _calculate_kl(
        logprobs=curr,
        logprobs_reference=ref_logp,
        kl_type=estimator,
        input_clamp_value=20.0,
        output_clamp_value=10.0,
        importance_sampling_weights=kl_importance_weights,
    )
    loss = _masked_mean(kl, mask, global_normalization_factor=mask.sum())
    return loss.to(logp.dtype)
