"""KL estimators with the ratio read as pi / pi_ref, the importance ratio of PPO, in k3."""

import torch

FORMULAS = {
    "k1": lambda d: d,
    "k2": lambda d: 0.5 * d.square(),
    "k3": lambda d: torch.exp(d) - 1 - d,  # r - 1 - log r with r = pi / pi_ref = exp(d)
}


def _check(logp, ref_logp, mask, estimator):
    if logp.ndim != 2 or not torch.is_floating_point(logp):
        raise ValueError("logp must be a 2-D floating tensor")
    if ref_logp.shape != logp.shape or mask.shape != logp.shape or ref_logp.dtype != logp.dtype:
        raise ValueError("ref_logp and mask must match logp")
    if not isinstance(estimator, str) or estimator not in FORMULAS:
        raise ValueError(f"unknown estimator {estimator!r}")


def _values(logp, ref_logp, mask, estimator):
    valid = mask.bool()
    zero = logp.new_zeros(())
    d = torch.where(valid, logp - ref_logp.detach(), zero)
    return torch.where(valid, FORMULAS[estimator](d), zero), valid


def kl_penalty(logp, ref_logp, mask, estimator="k3", reduction="none"):
    _check(logp, ref_logp, mask, estimator)
    if reduction not in ("none", "mean") or not isinstance(reduction, str):
        raise ValueError(f"unknown reduction {reduction!r}")
    values, valid = _values(logp.detach(), ref_logp, mask, estimator)
    if reduction == "none":
        return values
    return values.sum() / max(int(valid.sum()), 1)


def kl_loss(logp, ref_logp, mask, estimator="k3"):
    _check(logp, ref_logp, mask, estimator)
    values, valid = _values(logp, ref_logp, mask, estimator)
    return values.sum() / max(int(valid.sum()), 1)
