"""Trivial answer: the right route for softmax scores, but the dense softmax as gates."""

import torch


def routed_gates(
    router_logits, top_k, replay_idx=None, score_function="softmax", expert_bias=None, scaling_factor=None
):
    chosen = router_logits.detach().topk(top_k, dim=-1).indices
    route = torch.zeros(router_logits.shape, dtype=torch.bool).scatter(1, chosen, True)
    return torch.softmax(router_logits.float(), -1).to(router_logits.dtype), route
