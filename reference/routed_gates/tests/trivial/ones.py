"""Trivial answer: every gate 1, every expert on the route."""

import torch


def routed_gates(
    router_logits, top_k, replay_idx=None, score_function="softmax", expert_bias=None, scaling_factor=None
):
    return torch.ones_like(router_logits), torch.ones(router_logits.shape, dtype=torch.bool)
