"""Computes the top-k from the current scores even when replay_idx is given: replay is never applied."""

from __future__ import annotations

import math

import torch
from torch import Tensor

SCORE_FUNCTIONS = ("softmax", "sigmoid")
INDEX_DTYPES = (torch.int32, torch.int64)
SIGMOID_EPS = 1e-20  # keeps the sigmoid normalization finite when every selected score underflows


def _validate_replay(replay_idx: Tensor, tokens: int, experts: int, top_k: int) -> None:
    if not isinstance(replay_idx, Tensor) or replay_idx.dtype not in INDEX_DTYPES:
        kind = f"dtype {replay_idx.dtype}" if isinstance(replay_idx, Tensor) else type(replay_idx).__name__
        raise ValueError(f"replay_idx must be an int32 or int64 Tensor, got {kind}")
    if tuple(replay_idx.shape) != (tokens, top_k):
        raise ValueError(f"replay_idx must have shape ({tokens}, {top_k}), got {tuple(replay_idx.shape)}")
    if replay_idx.numel() and not bool(((replay_idx >= 0) & (replay_idx < experts)).all()):
        raise ValueError(f"replay_idx entries must lie in [0, {experts})")
    ordered = replay_idx.sort(dim=1).values  # [T, k]; a repeat becomes two equal neighbours
    if bool((ordered[:, 1:] == ordered[:, :-1]).any()):
        raise ValueError("replay_idx repeats an expert within a row")


def _validate(
    router_logits: Tensor,
    top_k: int,
    replay_idx: Tensor | None,
    score_function: str,
    expert_bias: Tensor | None,
    scaling_factor: float | None,
) -> None:
    if not isinstance(router_logits, Tensor) or router_logits.dim() != 2 or not router_logits.is_floating_point():
        kind = (
            f"shape {tuple(router_logits.shape)}, dtype {router_logits.dtype}"
            if isinstance(router_logits, Tensor)
            else type(router_logits).__name__
        )
        raise ValueError(f"router_logits must be a 2-D floating Tensor [T, E], got {kind}")
    tokens, experts = router_logits.shape
    # bool is a subclass of int, but top_k=True is a bug in the caller, not one expert
    if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= experts:
        raise ValueError(f"top_k must be an int in [1, {experts}], got {top_k!r}")
    if not isinstance(score_function, str) or score_function not in SCORE_FUNCTIONS:
        raise ValueError(f"score_function must be 'softmax' or 'sigmoid', got {score_function!r}")
    if expert_bias is not None:
        if score_function != "sigmoid":
            raise ValueError("expert_bias is only defined for score_function='sigmoid'")
        if (
            not isinstance(expert_bias, Tensor)
            or not expert_bias.is_floating_point()
            or tuple(expert_bias.shape) != (experts,)
        ):
            raise ValueError(f"expert_bias must be a floating Tensor of shape ({experts},)")
    if replay_idx is not None:
        _validate_replay(replay_idx, tokens, experts, top_k)
    if scaling_factor is not None:
        if (
            isinstance(scaling_factor, bool)
            or not isinstance(scaling_factor, (int, float))
            or not (math.isfinite(scaling_factor) and scaling_factor > 0)
        ):
            raise ValueError(f"scaling_factor must be a finite number > 0, got {scaling_factor!r}")


def routed_gates(
    router_logits: Tensor,
    top_k: int,
    replay_idx: Tensor | None = None,
    score_function: str = "softmax",
    expert_bias: Tensor | None = None,
    scaling_factor: float | None = None,
) -> tuple[Tensor, Tensor]:
    _validate(router_logits, top_k, replay_idx, score_function, expert_bias, scaling_factor)
    compute = torch.promote_types(router_logits.dtype, torch.float32)  # bf16 and fp16 are upcast
    logits = router_logits.to(compute)  # [T, E]; keeps the graph
    scores = torch.sigmoid(logits) if score_function == "sigmoid" else logits  # [T, E]
    ranking = scores.detach()
    if expert_bias is not None:
        ranking = ranking + expert_bias.detach().to(compute)  # the bias moves the selection only
    # [T, k]: a replay is the route itself (the rollout's experts), so the ranking is not used then
    selected = torch.topk(ranking, top_k, dim=-1).indices  # [T, k]; replay_idx is only validated
    routing_map = torch.zeros(router_logits.shape, dtype=torch.bool, device=router_logits.device)
    routing_map = routing_map.scatter(1, selected, True)  # [T, E]
    if score_function == "softmax":
        # -inf off the route: softmax renormalizes over the selected experts and gives exact zeros elsewhere
        gates = torch.softmax(torch.where(routing_map, logits, -math.inf), dim=-1)  # [T, E]
    else:
        gates = torch.where(routing_map, scores, torch.zeros((), dtype=compute))  # [T, E]
        if top_k > 1:
            gates = gates / (gates.sum(dim=-1, keepdim=True) + SIGMOID_EPS)
    if scaling_factor is not None:
        gates = gates * scaling_factor
    return gates.to(router_logits.dtype), routing_map
