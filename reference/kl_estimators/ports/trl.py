"""kl_estimators as TRL's GRPOTrainer computes it: huggingface/trl@f2cd57710ae345ea6428ae95363267fcf38a3dc8.

`trl/trainer/grpo_trainer.py` lines 3068-3076: per_token_kl = exp(ref - logp) - (ref - logp) - 1, k3 in the inputs'
dtype, unclamped; lines 3120-3125: beta * per_token_kl joins the per-token loss, which loss_type "grpo" reduces as
((x * mask).sum(-1) / mask.sum(-1).clamp(min=1)).mean(), a mean of per-response means; line 3238 logs the KL as a
token mean over the batch. TRL computes only k3: k1 and k2 here follow the statement. Nothing is validated, and the
reference log-probabilities are not detached (they arrive without a graph).
"""

from __future__ import annotations

import torch
from torch import Tensor


def _per_token(logp: Tensor, ref_logp: Tensor, estimator: str) -> Tensor:
    if estimator == "k1":
        return logp - ref_logp
    if estimator == "k2":
        return (logp - ref_logp) ** 2 / 2
    return torch.exp(ref_logp - logp) - (ref_logp - logp) - 1


def kl_penalty(logp: Tensor, ref_logp: Tensor, mask: Tensor, estimator: str = "k3", reduction: str = "none") -> Tensor:
    kl = _per_token(logp.detach(), ref_logp.detach(), estimator) * mask  # [B, L]
    return kl if reduction != "mean" else kl.sum() / mask.sum().clamp(min=1.0)


def kl_loss(logp: Tensor, ref_logp: Tensor, mask: Tensor, estimator: str = "k3") -> Tensor:
    per_token = _per_token(logp, ref_logp, estimator) * mask  # [B, L]
    return (per_token.sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
