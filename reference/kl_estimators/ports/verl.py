"""kl_estimators as verl computes it: volcengine/verl@b178a3cd56f58b2d502255daba591e92833930a7.

`verl/trainer/ppo/core_algos.py` lines 1867-1906 (`kl_penalty_forward`): `kl`/`k1` is logprob - ref_logprob, `mse`/`k2`
half its square, `low_var_kl`/`k3` exp(kl) - kl - 1 with kl = ref_logprob - logprob clamped to [-20, 20] and the value
clamped to [-10, 10]; any other mode raises NotImplementedError. The reward penalty (`verl/trainer/ppo/ray_trainer.py`
lines 70-107, `apply_kl_penalty`, mode `kl` by default) multiplies the values by the response mask and reports the
mean of per-response masked means (`verl/utils/torch_functional.py` lines 266-301: masked_sum zeroes non-selected
values with torch.where, masked_mean divides by mask.sum() + 1e-8). The KL loss (`verl/workers/actor/dp_actor.py`
lines 640-648, and `core_algos.py` lines 1055-1058, `agg_loss` in token-mean mode) divides the masked sum by
mask.sum(). Nothing is validated and ref_logprob is not detached (it arrives without a graph).
"""

from __future__ import annotations

import torch
from torch import Tensor

MODES = {"k1": "kl", "kl": "kl", "k2": "mse", "mse": "mse", "k3": "low_var_kl", "low_var_kl": "low_var_kl"}


def _forward(logp: Tensor, ref_logp: Tensor, estimator: str) -> Tensor:
    mode = MODES.get(estimator) if isinstance(estimator, str) else None
    if mode == "kl":
        return logp - ref_logp
    if mode == "mse":
        return 0.5 * (logp - ref_logp).square()
    if mode == "low_var_kl":
        kl = torch.clamp(ref_logp - logp, min=-20, max=20)
        return torch.clamp(torch.exp(kl) - kl - 1, min=-10, max=10)
    raise NotImplementedError(estimator)


def _masked_sum(values: Tensor, mask: Tensor, axis: int | None = None) -> Tensor:
    return (torch.where(mask.bool(), values, 0.0) * mask).sum(dim=axis)


def kl_penalty(logp: Tensor, ref_logp: Tensor, mask: Tensor, estimator: str = "k1", reduction: str = "none") -> Tensor:
    kld = _forward(logp.detach(), ref_logp.detach(), estimator) * mask  # [B, L]
    if reduction != "mean":
        return kld
    return (_masked_sum(kld, mask, -1) / (mask.sum(dim=-1) + 1e-8)).mean(dim=0)  # mean of per-response means


def kl_loss(logp: Tensor, ref_logp: Tensor, mask: Tensor, estimator: str = "k3") -> Tensor:
    return _masked_sum(_forward(logp, ref_logp, estimator), mask) / mask.sum()
