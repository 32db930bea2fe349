"""routed_gates as Hugging Face transformers routes its MoE models: softmax gates as Mixtral's sparse MoE block
(huggingface/transformers@00d4b3d2142cb4ced2f51b90614b5d26bc045015,
`src/transformers/models/mixtral/modeling_mixtral.py`, `MixtralSparseMoeBlock.forward`), sigmoid gates as
DeepSeek-V3's router (huggingface/transformers@00b676f8f0489b88652a31d70751cc540dd06305,
`src/transformers/models/deepseek_v3/modeling_deepseek_v3.py`, `DeepseekV3TopkRouter`, one group, `norm_topk_prob`).

Reproduced: Mixtral takes a softmax over all E experts in float32 (`dtype=torch.float`), keeps the top-k
probabilities and divides them by their sum, then casts to the logits' dtype; DeepSeek-V3 evaluates its router in
float32, ranks `sigmoid(u) + bias` (the bias added as given), gathers the sigmoids without the bias, divides them by
their sum plus 1e-20 whatever k is, and multiplies by `routed_scaling_factor` (1 here when `scaling_factor` is None).
transformers has no route replay: a replayed route is taken in place of the top-k, as the indices the gather reads.
Nothing is validated; Mixtral has no bias, so a bias passed with softmax is ignored.
"""

from __future__ import annotations

import torch
from torch import Tensor


def _mixtral(router_logits: Tensor, top_k: int, replay_idx: Tensor | None) -> tuple[Tensor, Tensor]:
    weights = torch.softmax(router_logits, dim=1, dtype=torch.float)  # [T, E] over every expert, float32
    if replay_idx is None:
        picked, selected = torch.topk(weights, top_k, dim=-1)
    else:
        selected = replay_idx.long()
        picked = weights.gather(1, selected)
    return picked / picked.sum(dim=-1, keepdim=True), selected


def _deepseek_v3(
    router_logits: Tensor, top_k: int, replay_idx: Tensor | None, expert_bias: Tensor | None, scale: float
) -> tuple[Tensor, Tensor]:
    scores = router_logits.to(torch.float32).sigmoid()  # [T, E]; the router's linear layer runs in float32
    if replay_idx is None:
        bias = expert_bias if expert_bias is not None else torch.zeros(scores.shape[-1])
        with torch.no_grad():
            selected = torch.topk(scores + bias.unsqueeze(0), k=top_k, dim=-1, sorted=False).indices
    else:
        selected = replay_idx.long()
    picked = scores.gather(1, selected)
    picked = picked / (picked.sum(dim=-1, keepdim=True) + 1e-20)  # norm_topk_prob, for every k
    return picked * scale, selected


def routed_gates(
    router_logits: Tensor,
    top_k: int,
    replay_idx: Tensor | None = None,
    score_function: str = "softmax",
    expert_bias: Tensor | None = None,
    scaling_factor: float | None = None,
) -> tuple[Tensor, Tensor]:
    if score_function == "sigmoid":
        scale = 1.0 if scaling_factor is None else scaling_factor
        picked, selected = _deepseek_v3(router_logits, top_k, replay_idx, expert_bias, scale)
    else:
        picked, selected = _mixtral(router_logits, top_k, replay_idx)
        if scaling_factor is not None:
            picked = picked * scaling_factor
    picked = picked.to(router_logits.dtype)
    gates = torch.zeros_like(router_logits).scatter(1, selected, picked)  # [T, E]
    routing_map = torch.zeros(router_logits.shape, dtype=torch.bool, device=router_logits.device)
    return gates, routing_map.scatter(1, selected, True)
