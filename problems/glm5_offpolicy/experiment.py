"""T3 toy experiment for glm5_offpolicy: a ratio sweep and a stale two-action bandit.

The judge runs each part of `PARTS` as `part(rng, masked_is_weights=..., offpolicy_loss=...)`, with either
the learner's functions (each call answered by the sandboxed learner process) or the reference's, and
compares the float64 series the parts return. `rng` is seeded by the grading seed: the sweep's ratios and
rollout log-probabilities and the bandit's starting policy change from seed to seed, so no series can be
replayed from another seed's run.

The sweep's clamped and PPO-clip curves and the bandit curves labelled uncorrected, clamped and on-policy use
private helpers below, never the given functions, so they are identical for every submission and serve as fixed
baselines.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Literal, NamedTuple

import torch
from torch import Tensor

DTYPE = torch.float64
CLIP_LOW = 0.2
CLIP_HIGH = 0.2

SWEEP_POINTS = 401

BANDIT_RESPONSES = 64
BANDIT_UPDATES = 50
BANDIT_LR = 0.5
STALE_REFRESH_EVERY = 5  # the rollout snapshot is reused for this many updates

FixedRule = Literal["uncorrected", "clamped", "strict"]


# ---------------------------------------------------------------- output hygiene


def _as_series(name: str, value: object, numel: int) -> Tensor:
    """Turn a returned tensor into a plain, detached, contiguous 1-D float64 series."""
    if not isinstance(value, Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(value).__name__}")
    if value.is_complex():
        raise TypeError(f"{name}: expected a real floating Tensor, got dtype {value.dtype}")
    if value.numel() != numel:
        raise ValueError(f"{name}: expected {numel} elements, got shape {tuple(value.shape)}")
    series = torch.as_tensor(value, dtype=DTYPE, device="cpu").detach().clone().reshape(-1)
    # A learner's Tensor subclass must not cross the boundary; keep only the data.
    return series.as_subclass(Tensor).contiguous()


def _checked_weights(value: object, shape: tuple[int, ...]) -> Tensor:
    if not isinstance(value, Tensor):
        raise TypeError(f"masked_is_weights must return a torch.Tensor, got {type(value).__name__}")
    if tuple(value.shape) != shape:
        raise ValueError(f"masked_is_weights must return shape {list(shape)}, got {list(value.shape)}")
    return value


def _checked_loss(value: object) -> Tensor:
    if not isinstance(value, Tensor):
        raise TypeError(f"offpolicy_loss must return a torch.Tensor, got {type(value).__name__}")
    if value.shape != ():
        raise ValueError(f"offpolicy_loss must return a 0-dim Tensor, got shape {list(value.shape)}")
    return value


def _backward(loss: Tensor) -> None:
    # A detached loss has no gradient to give; its leaves keep grad None and read as zero.
    if loss.requires_grad:
        loss.backward()


def _grad_or_zeros(leaf: Tensor) -> Tensor:
    return torch.zeros_like(leaf) if leaf.grad is None else leaf.grad.detach()


# ---------------------------------------------------------------- ratio sweep


def _sweep_ratios(rng: torch.Generator, n: int) -> Tensor:
    """n sorted ratios over [0.5, 1.5] at random places, two of them exactly on the bounds 0.8 and 1.2."""
    inner = torch.rand(n - 2, generator=rng, dtype=DTYPE) * 1.0 + 0.5  # [N - 2]
    bounds = torch.tensor([1.0 - CLIP_LOW, 1.0 + CLIP_HIGH], dtype=DTYPE)
    return torch.cat([inner, bounds]).sort().values  # [N]


def _ppo_clip_weight(logp: Tensor, rollout_logp: Tensor, advantage: float) -> Tensor:
    """PPO-clip's effective weight -d loss / d logp / A per token of the sweep, for one advantage sign.

    Private, never the given functions: the loss is -min(r A, clip(r, 1 - eps, 1 + eps) A) with the ratio taken
    against rollout_logp, so the curve shows where PPO-clip zeroes a token's gradient: above 1 + eps for A > 0,
    below 1 - eps for A < 0, and nowhere else.
    """
    leaf = logp.detach().clone().requires_grad_(True)  # [N, 1]
    ratio = torch.exp(leaf - rollout_logp)  # [N, 1]
    clipped = ratio.clamp(1.0 - CLIP_LOW, 1.0 + CLIP_HIGH)
    (grad,) = torch.autograd.grad(-torch.minimum(ratio * advantage, clipped * advantage).sum(), leaf)
    return -grad / advantage  # [N, 1]


def _gaps_at(values: Tensor, ratio: Tensor) -> Tensor:
    """values with NaN where the ratio sits exactly on a bound: a plotted line breaks there, never joining the two
    sides of a jump."""
    on_bound = (ratio == 1.0 - CLIP_LOW) | (ratio == 1.0 + CLIP_HIGH)
    return torch.where(on_bound, torch.full_like(values, math.nan), values)


def ratio_sweep(rng: torch.Generator, masked_is_weights: Callable[..., Any],
                offpolicy_loss: Callable[..., Any]) -> dict[str, Tensor]:
    """Weights and the loss's gradient for one token per row, across ratios on both sides of the interval."""
    n = SWEEP_POINTS
    target_ratio = _sweep_ratios(rng, n)  # [N]
    rollout_logp = -(torch.rand((n, 1), generator=rng, dtype=DTYPE) * 3 + 0.1)  # [N, 1]
    # The two bound rows get rollout_logp = 0: exp(log(b) - 0) == b exactly in float64, so the functions see both
    # endpoints at every seed (a random rollout_logp can miss a bound by an ulp in the round trip).
    on_bound = (target_ratio == 1.0 - CLIP_LOW) | (target_ratio == 1.0 + CLIP_HIGH)  # [N]
    rollout_logp = torch.where(on_bound.reshape(n, 1), torch.zeros((), dtype=DTYPE), rollout_logp)
    logp = (rollout_logp + torch.log(target_ratio).reshape(n, 1)).requires_grad_(True)  # [N, 1]
    advantages = torch.ones(n, dtype=DTYPE)  # [N]
    mask = torch.ones((n, 1), dtype=torch.bool)  # [N, 1]

    # The plotted x is the ratio the functions actually see, not the grid it was built from.
    ratio = torch.exp(logp.detach() - rollout_logp)  # [N, 1]
    weights = masked_is_weights(logp=logp, rollout_logp=rollout_logp, mask=mask, clip_low=CLIP_LOW, clip_high=CLIP_HIGH)
    weights = _checked_weights(weights, (n, 1))
    loss = offpolicy_loss(
        logp=logp,
        rollout_logp=rollout_logp,
        advantages=advantages,
        mask=mask,
        clip_low=CLIP_LOW,
        clip_high=CLIP_HIGH,
    )
    _backward(_checked_loss(loss))
    # One token per row and a 1/N mean: -N * dL/dlogp recovers each token's effective weight * A.
    gradient = -n * _grad_or_zeros(logp)  # [N, 1]
    return {
        "sweep_ratio": _as_series("sweep_ratio", ratio, n),
        "sweep_weights": _as_series("sweep_weights", weights, n),
        "sweep_clamped": _as_series("sweep_clamped", ratio.clamp(1.0 - CLIP_LOW, 1.0 + CLIP_HIGH), n),
        "sweep_gradient": _as_series("sweep_gradient", gradient, n),
        # What the rejection_window checks judge: every row but the two exactly on a bound, whose rejection is the
        # strict_interval clause's (T2 exact_endpoints), so a kept endpoint is not charged twice.
        "sweep_weights_off_bounds": _as_series("sweep_weights", weights, n)[~on_bound],
        "sweep_gradient_off_bounds": _as_series("sweep_gradient", gradient, n)[~on_bound],
        "sweep_ppo_positive": _gaps_at(_ppo_clip_weight(logp, rollout_logp, 1.0), ratio).reshape(-1),
        "sweep_ppo_negative": _gaps_at(_ppo_clip_weight(logp, rollout_logp, -1.0), ratio).reshape(-1),
    }


# ---------------------------------------------------------------- stale bandit


# A NamedTuple, not a dataclass: the worker may exec this file without registering it in
# sys.modules, and dataclasses then fail on postponed annotations.
class _Rollout(NamedTuple):
    """One frozen batch of single-token responses, padded to length 2."""

    actions: Tensor  # [B] long
    advantages: Tensor  # [B]
    rollout_logp: Tensor  # [B, 2]; column 1 is NaN padding
    mask: Tensor  # [B, 2] bool; column 1 is False


def _collect_rollout(theta: Tensor) -> _Rollout:
    """Sample deterministically from the snapshot policy: quantiles replace random draws."""
    b = BANDIT_RESPONSES
    snapshot_logp = torch.log_softmax(theta.detach(), dim=0)  # [2]
    pi0 = torch.softmax(theta.detach(), dim=0)[0]
    quantiles = (torch.arange(b, dtype=DTYPE) + 0.5) / b  # [B]
    actions = torch.where(quantiles < pi0, 0, 1).to(torch.long)  # [B]
    rewards = (actions == 0).to(DTYPE)  # [B]
    padding = torch.full((b, 1), float("nan"), dtype=DTYPE)  # [B, 1]; must never reach arithmetic
    rollout_logp = torch.cat([snapshot_logp[actions].reshape(b, 1), padding], dim=1)  # [B, 2]
    mask = torch.cat([torch.ones((b, 1), dtype=torch.bool), torch.zeros((b, 1), dtype=torch.bool)], dim=1)
    return _Rollout(actions=actions, advantages=rewards - rewards.mean(), rollout_logp=rollout_logp, mask=mask)


def _current_logp(theta: Tensor, actions: Tensor) -> Tensor:
    """Current log-probabilities, graph-connected to theta in the real column only."""
    b = actions.shape[0]
    real = torch.log_softmax(theta, dim=0)[actions].reshape(b, 1)  # [B, 1]
    padding = torch.full((b, 1), float("nan"), dtype=DTYPE)  # [B, 1]
    return torch.cat([real, padding], dim=1)  # [B, 2]


StepLoss = Callable[[Tensor, _Rollout], Tensor]
Observer = Callable[[Tensor, _Rollout], float]


def _run_bandit(theta0: Tensor, step_loss: StepLoss, refresh_every: int,
                observe: Observer | None = None) -> tuple[Tensor, Tensor]:
    """SGD on theta from theta0; returns pi(action 0) per step [U + 1] and observations [U]."""
    theta = theta0.clone().requires_grad_(True)
    pi0_trace: list[float] = []
    observations: list[float] = []
    rollout = _collect_rollout(theta)
    for update in range(BANDIT_UPDATES):
        if update > 0 and update % refresh_every == 0:
            rollout = _collect_rollout(theta)
        pi0_trace.append(float(torch.softmax(theta.detach(), dim=0)[0]))
        logp = _current_logp(theta, rollout.actions)  # [B, 2]
        if observe is not None:
            observations.append(observe(logp, rollout))
        loss = step_loss(logp, rollout)
        theta.grad = None
        _backward(loss)
        with torch.no_grad():
            theta -= BANDIT_LR * _grad_or_zeros(theta)
    pi0_trace.append(float(torch.softmax(theta.detach(), dim=0)[0]))
    return torch.tensor(pi0_trace, dtype=DTYPE), torch.tensor(observations, dtype=DTYPE)


def _fixed_loss(logp: Tensor, rollout: _Rollout, rule: FixedRule) -> Tensor:
    """Private baseline loss: -sum(m * w * A * logp) / max(1, sum m) with a fixed weight rule."""
    valid = rollout.mask  # [B, 2]
    zero = torch.zeros((), dtype=DTYPE)
    # Padding holds NaN: select it away before any arithmetic, in the gradient path too.
    ratio = torch.exp(torch.where(valid, logp.detach() - rollout.rollout_logp, zero))  # [B, 2]
    if rule == "uncorrected":
        weights = torch.ones_like(ratio)
    elif rule == "clamped":
        weights = ratio.clamp(1.0 - CLIP_LOW, 1.0 + CLIP_HIGH)
    else:
        inside = (ratio > 1.0 - CLIP_LOW) & (ratio < 1.0 + CLIP_HIGH)
        weights = torch.where(inside, ratio, zero)
    coeff = torch.where(valid, weights * rollout.advantages[:, None], zero)  # [B, 2], detached
    safe_logp = torch.where(valid, logp, zero)  # [B, 2]
    return -(coeff * safe_logp).sum() / valid.sum().clamp(min=1).to(DTYPE)


def _fixed_trajectory(theta0: Tensor, rule: FixedRule, refresh_every: int) -> Tensor:
    pi0, _ = _run_bandit(theta0, lambda logp, rollout: _fixed_loss(logp, rollout, rule), refresh_every)
    return pi0


def _learner_bandit(theta0: Tensor, masked_is_weights: Callable[..., Any],
                    offpolicy_loss: Callable[..., Any]) -> tuple[Tensor, Tensor]:
    def step_loss(logp: Tensor, rollout: _Rollout) -> Tensor:
        loss = offpolicy_loss(
            logp=logp,
            rollout_logp=rollout.rollout_logp,
            advantages=rollout.advantages,
            mask=rollout.mask,
            clip_low=CLIP_LOW,
            clip_high=CLIP_HIGH,
        )
        return _checked_loss(loss)

    def rejected_fraction(logp: Tensor, rollout: _Rollout) -> float:
        weights = masked_is_weights(
            logp=logp, rollout_logp=rollout.rollout_logp, mask=rollout.mask, clip_low=CLIP_LOW, clip_high=CLIP_HIGH
        )
        weights = _checked_weights(weights, tuple(rollout.mask.shape))  # [B, 2]
        valid = rollout.mask
        rejected = int((weights.detach()[valid] == 0).sum())
        return rejected / int(valid.sum())

    return _run_bandit(theta0, step_loss, STALE_REFRESH_EVERY, observe=rejected_fraction)


def stale_bandit(rng: torch.Generator, masked_is_weights: Callable[..., Any],
                 offpolicy_loss: Callable[..., Any]) -> dict[str, Tensor]:
    """SGD on a two-action bandit whose rollouts are refreshed every few updates, from a random start."""
    steps = BANDIT_UPDATES + 1
    theta0 = torch.randn(2, generator=rng, dtype=DTYPE) * 0.5  # [2]
    learner_pi0, rejected = _learner_bandit(theta0, masked_is_weights, offpolicy_loss)
    return {
        "bandit_step": torch.arange(steps, dtype=DTYPE),
        "bandit_update": torch.arange(BANDIT_UPDATES, dtype=DTYPE),
        "bandit_pi_learner": _as_series("bandit_pi_learner", learner_pi0, steps),
        "bandit_rejected_fraction": _as_series("bandit_rejected_fraction", rejected, BANDIT_UPDATES),
        "bandit_pi_uncorrected": _fixed_trajectory(theta0, "uncorrected", STALE_REFRESH_EVERY),
        "bandit_pi_clamped": _fixed_trajectory(theta0, "clamped", STALE_REFRESH_EVERY),
        # Refreshing before every update makes rollout = current policy, so every ratio is 1.
        "bandit_pi_onpolicy": _fixed_trajectory(theta0, "strict", 1),
    }


# ---------------------------------------------------------------- entry point

PARTS = (ratio_sweep, stale_bandit)
