"""Trivial answer: every call refused."""


def routed_gates(
    router_logits, top_k, replay_idx=None, score_function="softmax", expert_bias=None, scaling_factor=None
):
    raise ValueError("every call is invalid")
