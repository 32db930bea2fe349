"""T3 toy experiment for routed_gates: a one-dimensional mixture of experts whose router the rollout sees slightly
perturbed, with and without Rollout Routing Replay (R3).

The judge runs each part of `PARTS` as `part(rng, routed_gates=...)`, with either the learner's function (each
call answered by the sandboxed learner process) or the reference's, and compares the float64 series the parts
return. `rng` is seeded by the grading seed: the input points are jittered around an even grid, the experts
appear in a random column order, the replayed indices in a random order within each token, and the scales of
the sweep are jittered, so no call can be answered from another seed's run.

The layer: x in [-2, 2], four linear experts E_i(x) = c_i x + e_i, router logits u_i(x) = a_i x + b_i, top-2
softmax gates, F(x) = sum over the selected experts of g_i(x) E_i(x). The rollout's router sees its logits
shifted by s * DIRECTION (s = 0.02 gives (0.02, -0.02, 0.01, -0.01)); the trainer's router sees them unshifted,
and its experts see x + 1e-3, a small same-route numerical difference. Without replay the trainer picks its own
top-2, which differs from the rollout's near the points where two logits cross, and F jumps there; replaying
the rollout's experts (the trainer's gates computed from its own logits on them) leaves only the same-route
difference. The third part takes dF/du with autograd through the learner's own gates: the function is called
with `paired`, which runs `gates.backward(experts)` next to the call, so a gate rule whose values are right and
whose graph is cut, or reaches logits it should not, gives other curves. The analytic gradient curves are
computed privately and are the same for every submission.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

DTYPE = torch.float64
EXPERT_SLOPE = (1.0, -1.0, 2.0, 0.5)  # c
EXPERT_OFFSET = (0.0, 1.0, -0.5, 0.3)  # e
ROUTER_SLOPE = (1.0, -0.5, 0.3, 0.0)  # a
ROUTER_OFFSET = (0.0, 0.2, 0.1, 0.15)  # b
DIRECTION = (1.0, -1.0, 0.5, -0.5)  # the rollout's logit shift per unit of scale
BASE_SCALE = 0.02  # the shift of the first part: (0.02, -0.02, 0.01, -0.01)
INPUT_SHIFT = 1e-3  # what the trainer's experts see beyond the rollout's x
TOP_K = 2
EXPERTS = 4
PROFILE_POINTS = 1001
SWEEP_POINTS = 2001
SWEEP_DECADES = (-4.0, -1.0)  # the sweep's scales run from 1e-4 to 1e-1
SWEEP_STEPS = 30  # ten per decade, plus BASE_SCALE itself
GRADIENT_POINTS = 41
TIE_GAP = 1e-9  # a point whose 2nd and 3rd logits are closer than this is moved: no ties at the k-th place

Gates = Callable[..., Any]


def _vector(values: tuple[float, ...]) -> Tensor:
    return torch.tensor(values, dtype=DTYPE)


def _grid(rng: torch.Generator, points: int) -> Tensor:
    """[N] points on [-2, 2]: an even grid, each point jittered by up to 0.45 of a step, in increasing order."""
    jitter = (torch.rand(points, generator=rng, dtype=DTYPE) - 0.5) * 0.9
    x = -2.0 + 4.0 * (torch.arange(points, dtype=DTYPE) + jitter) / (points - 1)
    return _untied(x.clamp(-2.0, 2.0))


def router_logits(x: Tensor, scale: float) -> Tensor:
    """[N, 4] logits a x + b + scale * DIRECTION, experts in their canonical order."""
    return x[:, None] * _vector(ROUTER_SLOPE) + _vector(ROUTER_OFFSET) + scale * _vector(DIRECTION)


def expert_outputs(x: Tensor) -> Tensor:
    """[N, 4] outputs c x + e of the four experts."""
    return x[:, None] * _vector(EXPERT_SLOPE) + _vector(EXPERT_OFFSET)


def _kth_gap(logits: Tensor) -> Tensor:
    top = logits.topk(TOP_K + 1, dim=1).values  # [N, 3]
    return top[:, TOP_K - 1] - top[:, TOP_K]


def _untied(x: Tensor) -> Tensor:
    """x with every point where the trainer's or the rollout's 2nd and 3rd logits (nearly) tie moved a little."""
    for _ in range(10):
        near = torch.zeros_like(x, dtype=torch.bool)
        for scale in (0.0, BASE_SCALE):
            near |= _kth_gap(router_logits(x, scale)) < TIE_GAP
        if not bool(near.any()):
            return x
        x = torch.where(near, x + 1e-7, x)
    return x


# ---------------------------------------------------------------- the learner's answers, checked


def _checked(output: object, tokens: int) -> tuple[Tensor, Tensor]:
    """(gates as float64 [T, 4], routing_map as bool [T, 4]), or a clear error naming routed_gates."""
    if not isinstance(output, tuple) or len(output) != 2:
        raise TypeError(f"routed_gates must return a tuple (gates, routing_map), got {type(output).__name__}")
    gates, routing_map = output
    for name, value in (("gates", gates), ("routing_map", routing_map)):
        if not isinstance(value, Tensor):
            raise TypeError(f"routed_gates must return {name} as a torch.Tensor, got {type(value).__name__}")
        if tuple(value.shape) != (tokens, EXPERTS):
            raise ValueError(f"routed_gates must return {name} of shape [{tokens}, {EXPERTS}], "
                             f"got {list(value.shape)}")
    if gates.is_complex() or not gates.is_floating_point():
        raise TypeError(f"routed_gates must return floating gates, got dtype {gates.dtype}")
    if routing_map.dtype != torch.bool:
        raise TypeError(f"routed_gates must return a bool routing_map, got dtype {routing_map.dtype}")
    # A learner's Tensor subclass must not cross the boundary; keep only the data.
    plain_gates = torch.as_tensor(gates, device="cpu").detach().to(DTYPE).clone().as_subclass(Tensor)
    plain_map = torch.as_tensor(routing_map, device="cpu").detach().clone().as_subclass(Tensor)
    return plain_gates, plain_map


def _route(routed_gates: Gates, logits: Tensor, replay: Tensor | None = None) -> tuple[Tensor, Tensor]:
    kwargs: dict[str, Any] = {"router_logits": logits.clone(), "top_k": TOP_K, "score_function": "softmax"}
    if replay is not None:
        kwargs["replay_idx"] = replay.clone()
    return _checked(routed_gates(**kwargs), logits.shape[0])


def replay_of(routing_map: Tensor, rng: torch.Generator) -> Tensor:
    """[T, 2] int64 indices of the experts a routing map selects, each row in an order drawn from `rng`."""
    counts = routing_map.sum(dim=1)
    if bool((counts != TOP_K).any()):
        bad = int((counts != TOP_K).nonzero()[0])
        raise ValueError(f"routed_gates returned a routing_map with {int(counts[bad])} experts in row {bad}; "
                         f"top_k={TOP_K} selects exactly {TOP_K}")
    chosen = routing_map.nonzero()[:, 1].reshape(-1, TOP_K)  # [T, 2], ascending within a row
    order = torch.rand(chosen.shape, generator=rng).argsort(dim=1)
    return chosen.gather(1, order)


def layer_output(gates: Tensor, experts: Tensor) -> Tensor:
    """[T] F = sum_i g_i E_i; gates off the route are zero, so the sum runs over all experts."""
    return (gates * experts).sum(dim=1)


def mixture(routed_gates: Gates, x: Tensor, scales: list[float], order: Tensor,
            rng: torch.Generator) -> list[dict[str, Tensor]]:
    """For each scale: |F_train - F_rollout| without and with replay, and which points change route.

    The learner sees the experts' columns in `order` (column j holds canonical expert order[j])."""
    train_experts = expert_outputs(x + INPUT_SHIFT)[:, order]  # [N, 4]
    rollout_experts = expert_outputs(x)[:, order]
    train_logits = router_logits(x, 0.0)[:, order]
    train_gates, train_map = _route(routed_gates, train_logits)
    train_free = layer_output(train_gates, train_experts)
    results = []
    for scale in scales:
        rollout_gates, rollout_map = _route(routed_gates, router_logits(x, scale)[:, order])
        rollout = layer_output(rollout_gates, rollout_experts)
        replayed_gates, _ = _route(routed_gates, train_logits, replay_of(rollout_map, rng))
        results.append({
            "diff_no_replay": (train_free - rollout).abs(),
            "diff_replay": (layer_output(replayed_gates, train_experts) - rollout).abs(),
            "mismatch": (train_map != rollout_map).any(dim=1).to(DTYPE),
        })
    return results


def _log10(values: Tensor) -> Tensor:
    return torch.log10(values)  # an exact zero becomes -inf, a gap in the plot


# ---------------------------------------------------------------- the parts


def route_profile(rng: torch.Generator, routed_gates: Gates) -> dict[str, Tensor]:
    """|F_train - F_rollout| along x for the base shift, with and without replay, and the points that switch."""
    x = _grid(rng, PROFILE_POINTS)
    (result,) = mixture(routed_gates, x, [BASE_SCALE], torch.randperm(EXPERTS, generator=rng), rng)
    no_replay = result["diff_no_replay"]
    switched = result["mismatch"].bool()
    return {
        "x": x,
        "diff_no_replay": no_replay,
        "diff_replay": result["diff_replay"],
        "route_mismatch": result["mismatch"],
        "log_diff_no_replay": _log10(no_replay),
        "log_diff_replay": _log10(result["diff_replay"]),
        "log_mismatch_marker": torch.where(switched, _log10(no_replay), torch.full_like(no_replay, math.nan)),
    }


def sweep_scales(rng: torch.Generator) -> list[float]:
    """Ten scales per decade from 1e-4 to 1e-1, each jittered by up to a third of a step, and BASE_SCALE."""
    low, high = SWEEP_DECADES
    steps = torch.arange(SWEEP_STEPS + 1, dtype=DTYPE)
    jitter = (torch.rand(SWEEP_STEPS + 1, generator=rng, dtype=DTYPE) - 0.5) * (2.0 / 3.0)
    exponents = (low + (high - low) * (steps + jitter) / SWEEP_STEPS).clamp(low, high)
    return sorted([*(10.0 ** exponents).tolist(), BASE_SCALE])


def scale_sweep(rng: torch.Generator, routed_gates: Gates) -> dict[str, Tensor]:
    """The largest |F_train - F_rollout| over 2001 points and the number of switched points, per shift scale."""
    x = _grid(rng, SWEEP_POINTS)
    scales = sweep_scales(rng)
    results = mixture(routed_gates, x, scales, torch.randperm(EXPERTS, generator=rng), rng)
    no_replay = torch.stack([r["diff_no_replay"].max() for r in results])
    replay = torch.stack([r["diff_replay"].max() for r in results])
    scale = torch.tensor(scales, dtype=DTYPE)
    return {
        "scale": scale,
        "log_scale": torch.log10(scale),
        "max_diff_no_replay": no_replay,
        "max_diff_replay": replay,
        "mismatch_count": torch.stack([r["mismatch"].sum() for r in results]),
        "log_max_diff_no_replay": _log10(no_replay),
        "log_max_diff_replay": _log10(replay),
        # the same-route term alone: the experts' shift weighted by the trainer's gates, at most 1e-3 * max |c|
        "log_input_shift_bound": torch.full_like(scale, math.log10(INPUT_SHIFT * max(map(abs, EXPERT_SLOPE)))),
    }


def analytic_gradient(x: Tensor, replay: Tensor) -> Tensor:
    """[N, 4] dF/du_j = g_j (E_j - F) on the replayed experts and 0 elsewhere, from a private softmax."""
    logits = router_logits(x, 0.0)
    on_route = torch.zeros_like(logits, dtype=torch.bool).scatter(1, replay, True)
    gates = torch.softmax(torch.where(on_route, logits, -math.inf), dim=1)
    experts = expert_outputs(x + INPUT_SHIFT)
    output = layer_output(gates, experts)[:, None]
    return gates * (experts - output)


def replay_gradient(rng: torch.Generator, routed_gates: Gates) -> dict[str, Tensor]:
    """dF_train/du_j under replay, by autograd through the learner's gates, at a few points."""
    x = _grid(rng, GRADIENT_POINTS)
    order = torch.randperm(EXPERTS, generator=rng)
    _, rollout_map = _route(routed_gates, router_logits(x, BASE_SCALE)[:, order])
    replay = replay_of(rollout_map, rng)  # [N, 2] in the learner's column order
    logits = router_logits(x, 0.0)[:, order].requires_grad_(True)  # [N, 4]
    experts = expert_outputs(x + INPUT_SHIFT)[:, order]  # [N, 4]: dF/dg, the cotangent of the gates
    # the sum over tokens of F = sum_i g_i E_i: each token's F depends on its own logits only
    total, output = routed_gates.paired(experts, router_logits=logits.clone(), top_k=TOP_K,
                                        score_function="softmax", replay_idx=replay.clone())
    _checked(output, x.shape[0])
    (grad,) = torch.autograd.grad(total, logits, materialize_grads=True)  # [N, 4], learner's columns; 0 if unused
    canonical = torch.empty_like(grad)
    canonical[:, order] = grad  # back to the canonical expert order
    exact = analytic_gradient(x, order[replay])
    series = {"grad_x": x, "grad_all": canonical.reshape(-1)}  # [N * 4], the tokens' rows one after another
    for j in range(EXPERTS):
        series[f"grad_e{j}"] = canonical[:, j]
        series[f"analytic_e{j}"] = exact[:, j]
    return series


PARTS = (route_profile, scale_sweep, replay_gradient)
