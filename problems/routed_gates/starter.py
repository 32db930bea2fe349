"""Starter for routed_gates: top-k gates of a mixture-of-experts router, with Rollout Routing Replay (R3).

Implement the function below. Use `torch` and the standard library: numpy and torch's other dependencies
import too, but answers must be torch tensors and no check needs them. Read the statement for the formulas;
the docstring below is the exact contract the grader checks.
"""

from __future__ import annotations

import torch  # noqa: F401 - you will need it
from torch import Tensor


def routed_gates(
    router_logits: Tensor,
    top_k: int,
    replay_idx: Tensor | None = None,
    score_function: str = "softmax",
    expert_bias: Tensor | None = None,
    scaling_factor: float | None = None,
) -> tuple[Tensor, Tensor]:
    """Dense gates and the routing map of T tokens over E experts, each token routed to top_k of them.

    Args:
        router_logits: [T, E] floating (float32, float64, bfloat16 or float16), the router's logit u of each
            token for each expert. It may require grad.
        top_k: k, an int with 1 <= k <= E (a bool is refused).
        replay_idx: None, or [T, k] int32/int64, the experts a rollout selected for each token: distinct
            within a row, each in [0, E), in any order. When given, it IS the selected set I of every token.
        score_function: exactly "softmax" or "sigmoid".
        expert_bias: None, or a floating [E] tensor, allowed only with "sigmoid". It moves the selection
            only (see below) and receives no gradient.
        scaling_factor: None, or a finite number > 0 that multiplies every gate at the end.

    Selection (when replay_idx is None): I = the top_k experts of
        "softmax": u;   "sigmoid": sigmoid(u) + expert_bias (a bias of zeros when None).
    With replay_idx, I = replay_idx's row: no top-k, and the bias plays no part.

    Gates, for i in I (0 for every expert outside I):
        "softmax": g_i = exp(u_i) / sum_{j in I} exp(u_j)      (renormalized over I only)
        "sigmoid": g_i = sigmoid(u_i) / (sum_{j in I} sigmoid(u_j) + 1e-20)   when k > 1
                   g_i = sigmoid(u_i)                                          when k = 1
        then g_i *= scaling_factor when it is given. The bias never enters a gate value.

    Returns:
        (gates, routing_map):
        gates: [T, E] in router_logits' dtype and device, computed in float32 at least (float32 and
            float64 logits in their own dtype; bfloat16 and float16 logits upcast to float32 for the
            arithmetic, the gates rounded back once at the end), and
            connected to router_logits' graph: gradient flows through the selected gates, none to
            expert_bias, none through the selection itself.
        routing_map: [T, E] bool, True exactly on I, also where a selected gate underflows to 0.

    Raises:
        ValueError, before computing anything, when: router_logits is not a 2-D floating tensor; top_k is not
            an int in [1, E] (a bool included); replay_idx is given and is not an int32/int64 tensor of shape
            [T, top_k], holds an index outside [0, E), or repeats an expert within a row; score_function is
            neither "softmax" nor "sigmoid"; expert_bias is given with "softmax" or is not [E]; scaling_factor
            is given and is not finite or not > 0. Every argument is checked, whether or not a replay is given.

    Inputs are never modified in place; non-contiguous inputs must work; T may be 0.
    """
    raise NotImplementedError
