"""Trivial answer: zeros of the right shapes, the loss connected to logp."""

import torch


def kl_penalty(logp, ref_logp, mask, estimator="k3", reduction="none"):
    return torch.zeros_like(logp).detach() if reduction == "none" else torch.zeros((), dtype=logp.dtype)


def kl_loss(logp, ref_logp, mask, estimator="k3"):
    return (logp * 0).sum()
