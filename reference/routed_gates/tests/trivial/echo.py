"""Trivial answer: the logits echoed back as gates, the positive ones as the route."""


def routed_gates(
    router_logits, top_k, replay_idx=None, score_function="softmax", expert_bias=None, scaling_factor=None
):
    return router_logits.detach().clone(), router_logits.detach() > 0
