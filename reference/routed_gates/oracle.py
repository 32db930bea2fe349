"""Scalar-loop oracle for routed_gates, written apart from the reference: one token at a time, in Python floats."""

from __future__ import annotations

import math

import torch
from torch import Tensor

FLOATING = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _check(router_logits: Tensor, top_k: int, replay_idx: Tensor | None, score_function: str,
           expert_bias: Tensor | None, scaling_factor: float | None) -> None:
    if not isinstance(router_logits, Tensor) or len(router_logits.shape) != 2 or router_logits.dtype not in FLOATING:
        raise ValueError("router_logits must be a 2-D floating tensor")
    tokens, experts = router_logits.shape
    if type(top_k) is not int or top_k < 1 or top_k > experts:
        raise ValueError("top_k must be an int between 1 and E")
    if score_function not in ("softmax", "sigmoid"):
        raise ValueError("unknown score_function")
    if expert_bias is not None and (score_function == "softmax" or list(expert_bias.shape) != [experts]):
        raise ValueError("expert_bias must be [E] and comes only with sigmoid")
    if replay_idx is not None:
        if replay_idx.dtype not in (torch.int32, torch.int64) or list(replay_idx.shape) != [tokens, top_k]:
            raise ValueError("replay_idx must be an int32/int64 tensor of shape [T, top_k]")
        for row in replay_idx.tolist():
            if len(set(row)) != len(row) or any(i < 0 or i >= experts for i in row):
                raise ValueError("replay_idx rows must hold distinct experts in [0, E)")
    if scaling_factor is not None:
        if type(scaling_factor) not in (int, float) or math.isnan(scaling_factor) or math.isinf(scaling_factor) \
                or scaling_factor <= 0:
            raise ValueError("scaling_factor must be finite and positive")


def _sigmoid(x: float) -> float:
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    z = math.exp(x)  # never overflows for x < 0
    return z / (1.0 + z)


def _token_gates(logits: list[float], chosen: list[int] | None, top_k: int, sigmoid: bool,
                 bias: list[float]) -> tuple[list[float], list[bool]]:
    """The gates and the route of one token, both over all E experts."""
    experts = len(logits)
    scores = [_sigmoid(v) if sigmoid else v for v in logits]
    if chosen is None:
        ranking = [scores[i] + bias[i] for i in range(experts)]
        chosen = sorted(range(experts), key=lambda i: ranking[i], reverse=True)[:top_k]
    on_route = [i in chosen for i in range(experts)]
    gates = [0.0] * experts
    if sigmoid:
        total = math.fsum(scores[i] for i in chosen)
        for i in chosen:
            gates[i] = scores[i] / (total + 1e-20) if top_k > 1 else scores[i]
    else:
        peak = max(logits[i] for i in chosen)
        weights = {i: math.exp(logits[i] - peak) for i in chosen}
        total = math.fsum(weights.values())
        for i in chosen:
            gates[i] = weights[i] / total
    return gates, on_route


def routed_gates(router_logits, top_k, replay_idx=None, score_function="softmax", expert_bias=None,
                 scaling_factor=None):
    _check(router_logits, top_k, replay_idx, score_function, expert_bias, scaling_factor)
    experts = router_logits.shape[1]
    bias = [0.0] * experts if expert_bias is None else [float(b) for b in expert_bias.detach().tolist()]
    rows = router_logits.detach().to(torch.float64).tolist()
    replayed = None if replay_idx is None else replay_idx.tolist()
    gates, route = [], []
    for t, logits in enumerate(rows):
        token_gates, on_route = _token_gates(logits, None if replayed is None else replayed[t], top_k,
                                             score_function == "sigmoid", bias)
        scale = 1.0 if scaling_factor is None else float(scaling_factor)
        gates.append([g * scale for g in token_gates])
        route.append(on_route)
    # Computed in float64 and rounded once to the input dtype.
    shape = tuple(router_logits.shape)
    return (torch.tensor(gates, dtype=torch.float64).reshape(shape).to(router_logits.dtype),
            torch.tensor(route, dtype=torch.bool).reshape(shape))
