"""routed_gates as Megatron-Core computes them: NVIDIA/Megatron-LM@d98e8a64ddf34856e74b24714e3bedb2f5a39553,
`megatron/core/transformer/moe/moe_utils.py` lines 766-957 (`topk_routing_with_score_function`, unfused, no groups,
post-softmax), with the replayed route of `megatron/core/transformer/moe/router_replay.py` lines 137-173
(`get_replay_topk`, REPLAY_FORWARD: the recorded indices, the current scores gathered there).

Reproduced: softmax ranks the logits in their own dtype and takes `torch.softmax(..., dtype=torch.float32)` of the
selected ones; sigmoid takes `torch.sigmoid(logits.float())`, ranks it plus `expert_bias.float()` and gathers the
sigmoids without the bias, then divides by their sum plus 1e-20 when top_k > 1; `if scaling_factor:` multiplies; the
gates are cast with `type_as(logits)` and scattered into `zeros_like(logits)`, the map is an int scatter made bool.
Every intermediate is float32, float64 logits included. The only checks are the 2-D assertion and the unknown score
function; the bias is unused with softmax, and replayed indices are trusted.
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
        probs = torch.softmax(picked, dim=-1, dtype=torch.float32)  # float32 even for float64 logits
    elif score_function == "sigmoid":
        scores = torch.sigmoid(router_logits.float())  # [T, E] float32
        if replay_idx is not None:
            top_indices = replay_idx
            picked = scores.gather(1, top_indices)
        elif expert_bias is not None:
            _, top_indices = torch.topk(scores + expert_bias.float(), k=top_k, dim=1)
            picked = scores.gather(1, top_indices)
        else:
            picked, top_indices = torch.topk(scores, k=top_k, dim=1)
        probs = picked / (picked.sum(dim=-1, keepdim=True) + 1e-20) if top_k > 1 else picked
    else:
        raise ValueError(f"Invalid score_function: {score_function}")
    if scaling_factor:  # 0 and None both mean no scaling
        probs = probs * scaling_factor
    probs = probs.type_as(router_logits)
    gates = torch.zeros_like(router_logits).scatter(1, top_indices, probs)  # [T, E]
    routing_map = torch.zeros_like(router_logits).int().scatter(1, top_indices, 1).bool()  # [T, E]
    return gates, routing_map
