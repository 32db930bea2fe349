# kim: pick the experts, gather their logits into a [T, k] block, compute the k gates there, and scatter them
# back into a dense [T, E] tensor. Validation first, with every rule of the statement spelled out.
from __future__ import annotations

import math

import torch


def _check(router_logits, top_k, replay_idx, score_function, expert_bias, scaling_factor):
    if not torch.is_tensor(router_logits) or router_logits.ndim != 2 or not torch.is_floating_point(router_logits):
        raise ValueError("router_logits must be a 2-D floating tensor")
    experts = router_logits.shape[1]
    if type(top_k) is not int or not (1 <= top_k <= experts):
        raise ValueError("top_k must be an int in [1, E]")
    if score_function not in ("softmax", "sigmoid"):
        raise ValueError("score_function must be 'softmax' or 'sigmoid'")
    if expert_bias is not None:
        if score_function == "softmax":
            raise ValueError("expert_bias only goes with sigmoid scores")
        if not torch.is_tensor(expert_bias) or not torch.is_floating_point(expert_bias) \
                or expert_bias.shape != (experts,):
            raise ValueError("expert_bias must be a floating [E] tensor")
    if replay_idx is not None:
        if not torch.is_tensor(replay_idx) or replay_idx.dtype not in (torch.int32, torch.int64):
            raise ValueError("replay_idx must be an int32 or int64 tensor")
        if replay_idx.shape != (router_logits.shape[0], top_k):
            raise ValueError("replay_idx must be [T, top_k]")
        if replay_idx.numel() and (replay_idx.min() < 0 or replay_idx.max() >= experts):
            raise ValueError("replay_idx out of range")
        for row in replay_idx.tolist():
            if len(set(row)) != len(row):
                raise ValueError("replay_idx repeats an expert")
    if scaling_factor is not None:
        if type(scaling_factor) not in (int, float) or not math.isfinite(scaling_factor) or scaling_factor <= 0:
            raise ValueError("scaling_factor must be finite and > 0")


def routed_gates(router_logits, top_k, replay_idx=None, score_function="softmax", expert_bias=None,
                 scaling_factor=None):
    _check(router_logits, top_k, replay_idx, score_function, expert_bias, scaling_factor)
    work = torch.float64 if router_logits.dtype == torch.float64 else torch.float32
    u = router_logits.to(work)
    if replay_idx is not None:
        chosen = replay_idx.to(torch.int64)
    elif score_function == "softmax":
        chosen = u.detach().topk(top_k, dim=1).indices
    else:
        bias = torch.zeros(u.shape[1], dtype=work) if expert_bias is None else expert_bias.detach().to(work)
        chosen = (torch.sigmoid(u.detach()) + bias).topk(top_k, dim=1).indices
    picked = u.gather(1, chosen)  # [T, k]
    if score_function == "softmax":
        weights = torch.softmax(picked, dim=1)
    else:
        weights = torch.sigmoid(picked)
        if top_k > 1:
            weights = weights / (weights.sum(dim=1, keepdim=True) + 1e-20)
    if scaling_factor is not None:
        weights = weights * scaling_factor
    gates = torch.zeros_like(u).scatter(1, chosen, weights)
    routing_map = torch.zeros(u.shape, dtype=torch.bool).scatter(1, chosen, True)
    return gates.to(router_logits.dtype), routing_map
