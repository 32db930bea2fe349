# leo: the Mixtral way: softmax over every expert, keep the k largest probabilities, scatter them back.
# Sigmoid routing as the statement says, bias for the ranking only.
from __future__ import annotations

import math

import torch


def routed_gates(router_logits, top_k, replay_idx=None, score_function="softmax", expert_bias=None,
                 scaling_factor=None):
    if router_logits.dim() != 2 or not router_logits.is_floating_point():
        raise ValueError("router_logits must be 2-D floating")
    T, E = router_logits.shape
    if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= E:
        raise ValueError("bad top_k")
    if score_function not in ("softmax", "sigmoid"):
        raise ValueError("bad score_function")
    if expert_bias is not None and (score_function != "sigmoid" or expert_bias.shape != (E,)):
        raise ValueError("bad expert_bias")
    if scaling_factor is not None and not (math.isfinite(scaling_factor) and scaling_factor > 0):
        raise ValueError("bad scaling_factor")
    if replay_idx is not None:
        if replay_idx.dtype not in (torch.int32, torch.int64) or replay_idx.shape != (T, top_k):
            raise ValueError("bad replay_idx")
        if T and (replay_idx.min() < 0 or replay_idx.max() >= E):
            raise ValueError("replay_idx out of range")
        s = replay_idx.sort(dim=1).values
        if (s[:, 1:] == s[:, :-1]).any():
            raise ValueError("repeated expert")

    u = router_logits.float() if router_logits.dtype != torch.float64 else router_logits
    if score_function == "softmax":
        probs = torch.softmax(u, dim=-1)
        rank = probs.detach()
    else:
        probs = torch.sigmoid(u)
        rank = probs.detach() + (0 if expert_bias is None else expert_bias.to(u.dtype))
    idx = replay_idx.long() if replay_idx is not None else rank.topk(top_k, dim=-1).indices
    weights = probs.gather(1, idx)
    if score_function == "sigmoid" and top_k > 1:
        weights = weights / (weights.sum(-1, keepdim=True) + 1e-20)
    if scaling_factor is not None:
        weights = weights * scaling_factor
    gates = torch.zeros_like(u).scatter(1, idx, weights)
    routing_map = torch.zeros(T, E, dtype=torch.bool).scatter(1, idx, True)
    return gates.to(router_logits.dtype), routing_map
