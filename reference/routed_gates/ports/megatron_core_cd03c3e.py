"""routed_gates as Megatron-Core computed them before its float32-intermediates change (eb80b74912):
NVIDIA/Megatron-LM@cd03c3e28e6ab6a1af9441a786355a301f62f30b, `megatron/core/transformer/moe/moe_utils.py` lines
675-827 (`topk_routing_with_score_function`, unfused, no groups, post-softmax), with forward route replay as
`router_replay.get_replay_topk` does it (the recorded indices, the current scores gathered there).

Reproduced: softmax of the selected logits in float32, rounded at once to the logits' dtype (`type_as`); the sigmoid
computed from `logits.float()` and rounded to the logits' dtype *before* the bias is added for ranking, so the
normalization, its 1e-20 and the scaling run in the logits' dtype (bfloat16 arithmetic for bfloat16 logits, and the
bias, in its own dtype, promotes the ranking). `if scaling_factor:` multiplies; gates scattered into
`zeros_like(logits)`, the map an int scatter made bool. Nothing else is validated.
"""

from __future__ import annotations

import torch
from torch import Tensor


def routed_gates(
    router_logits: Tensor,
    top_k: int,
    replay_idx: Tensor | None = None,
    score_function: str = "softmax",
    expert_bias: Tensor | None = None,
    scaling_factor: float | None = None,
) -> tuple[Tensor, Tensor]:
    assert router_logits.dim() == 2, f"expected 2-D logits [tokens, experts], got {router_logits.dim()}"
    if score_function == "softmax":
        if replay_idx is not None:
            top_indices = replay_idx
            picked = router_logits.gather(1, top_indices)  # [T, k]
        else:
            picked, top_indices = torch.topk(router_logits, k=top_k, dim=1)
        probs = torch.softmax(picked, dim=-1, dtype=torch.float32).type_as(router_logits)
    elif score_function == "sigmoid":
        scores = torch.sigmoid(router_logits.float()).type_as(router_logits)  # rounded before the bias
        if replay_idx is not None:
            top_indices = replay_idx
            picked = scores.gather(1, top_indices)
        elif expert_bias is not None:
            _, top_indices = torch.topk(scores + expert_bias, k=top_k, dim=1)
            picked = scores.gather(1, top_indices).type_as(router_logits)
        else:
            picked, top_indices = torch.topk(scores, k=top_k, dim=1)
        probs = picked / (picked.sum(dim=-1, keepdim=True) + 1e-20) if top_k > 1 else picked
    else:
        raise ValueError(f"Invalid score_function: {score_function}")
    if scaling_factor:
        probs = probs * scaling_factor
    gates = torch.zeros_like(router_logits).scatter(1, top_indices, probs)  # [T, E]
    routing_map = torch.zeros_like(router_logits).int().scatter(1, top_indices, 1).bool()  # [T, E]
    return gates, routing_map
