"""T3 toy experiment for grpo_advantages: the expected policy-gradient scale of a two-action bandit.

The judge runs each part of `PARTS` as `part(rng, grpo_advantages=...)`, with either the learner's function
(each call answered by the sandboxed learner process) or the reference's, and compares the float64 series the
parts return. `rng` is seeded by the grading seed: the reward values (an affine map of success and failure) and
the order of the samples in each group change from seed to seed, so no call can be answered from another
seed's run; S(p) does not depend on either.

One prompt, two actions: action 1 succeeds (reward 1) with probability p, action 0 fails (reward 0).
With theta the logit of action 1, the score of a sample is s = d log pi / d theta = 1 - p for a success
and -p for a failure, and the true gradient of the expected reward is p (1 - p). The GRPO estimate from
G samples is (1/G) sum_i A_i s_i; its expectation is computed exactly by enumerating the number of
successes k = 0..G (one ordering per k, weighted by C(G, k) p^k (1 - p)^(G - k); the groups with k >= 1 are
passed twice, so the batch is not symmetric), and reported relative to the true gradient:

    S(p) = E[(1/G) sum_i A_i s_i] / (p (1 - p)).

Centring alone gives the flat line 1 - 1/G; std normalization rescales each group by 1 / sigma, so S
depends on p. The curves labelled theory are computed privately and are the same for every submission.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

DTYPE = torch.float64
GROUP_SIZES = (2, 4, 8, 16)
EPS = 1e-6
P_STEPS = 100  # p = 0.01, 0.02, ..., 0.99


def _success_p() -> Tensor:
    return torch.arange(1, P_STEPS, dtype=DTYPE) / P_STEPS  # [P]; division keeps k / 100 correctly rounded


def _outcomes(group_size: int, rng: torch.Generator) -> Tensor:
    """[G + 1, G]: row k holds k successes (1) and G - k failures (0), in a random order."""
    k = torch.arange(group_size + 1)[:, None]  # [G + 1, 1]
    order = torch.rand((group_size + 1, group_size), generator=rng).argsort(dim=1)  # [G + 1, G]
    return (order < k).to(DTYPE)


REWARD_GRID = 256  # rewards are multiples of 1/256: every group sum and mean is exact, in float32 as in float64


def _reward_map(rng: torch.Generator) -> tuple[float, float]:
    """(failure reward, success - failure gap): advantages are the same up to the gap's scale.

    On a 1/256 grid, so an all-failed or all-solved group's mean is its reward in any precision: a solution
    without the constant-group case draws the same curves, that convention being another check's clause."""
    failure = round(float(torch.rand((), generator=rng, dtype=DTYPE)) * REWARD_GRID) / REWARD_GRID - 1.0  # [-1, 0]
    gap = 0.5 + round(1.5 * float(torch.rand((), generator=rng, dtype=DTYPE)) * REWARD_GRID) / REWARD_GRID  # [0.5, 2]
    return failure, gap


def _checked(value: object, numel: int) -> Tensor:
    """The learner's advantages as a plain float64 [N] tensor, or a clear error."""
    if not isinstance(value, Tensor):
        raise TypeError(f"grpo_advantages must return a torch.Tensor, got {type(value).__name__}")
    if value.is_complex() or not value.is_floating_point():
        raise TypeError(f"grpo_advantages must return a real floating Tensor, got dtype {value.dtype}")
    if tuple(value.shape) != (numel,):
        raise ValueError(f"grpo_advantages must return shape [{numel}], got {list(value.shape)}")
    # A learner's Tensor subclass must not cross the boundary; keep only the data.
    return torch.as_tensor(value, device="cpu").detach().to(DTYPE).clone().as_subclass(Tensor)


def _scale_curve(advantages: Tensor, outcomes: Tensor, p: Tensor) -> Tensor:
    """S(p) for every p: advantages and outcomes are [G + 1, G], p is [P]; returns [P]."""
    group_size = outcomes.shape[1]
    k = torch.arange(group_size + 1, dtype=DTYPE)  # [G + 1]
    comb = torch.tensor([math.comb(group_size, j) for j in range(group_size + 1)], dtype=DTYPE)  # [G + 1]
    weights = comb * p[:, None] ** k * (1 - p[:, None]) ** (group_size - k)  # [P, G + 1]
    # sum_i A_i s_i with s_i = success_i - p; the p * sum_i A_i term vanishes only if A is centred.
    hits = (advantages * outcomes).sum(dim=1)  # [G + 1]
    total = advantages.sum(dim=1)  # [G + 1]
    estimate = (hits[None, :] - p[:, None] * total[None, :]) / group_size  # [P, G + 1]
    return (weights * estimate).sum(dim=1) / (p * (1 - p))  # [P]


def _learner_curve(grpo_advantages: Callable[..., Any], group_size: int, std_normalize: bool, p: Tensor,
                   rng: torch.Generator) -> Tensor:
    outcomes = _outcomes(group_size, rng)  # [G + 1, G]
    failure, gap = _reward_map(rng)
    # the groups with a success come twice, the copies' advantages unused: a batch whose mean and spread are not
    # those of any one group, as a real batch's are not, so statistics taken over the batch bend every curve
    batch = torch.cat([outcomes, outcomes[1:]])  # [2G + 1, G]
    rewards = (failure + gap * batch).reshape(-1)  # [(2G + 1) * G], groups laid out contiguously
    advantages = grpo_advantages(rewards=rewards.clone(), group_size=group_size, std_normalize=std_normalize,
                                 eps=EPS, unbiased=False)
    advantages = _checked(advantages, rewards.numel()).reshape(-1, group_size)[: group_size + 1]  # [G + 1, G]
    # centred advantages carry the reward gap; dividing it out keeps S(p) in units of a 0/1 reward
    return _scale_curve(advantages if std_normalize else advantages / gap, outcomes, p)


def scale_curves(rng: torch.Generator, grpo_advantages: Callable[..., Any]) -> dict[str, Tensor]:
    """Return p, S(p) with and without std normalization for each G, and the flat line 1 - 1/G."""
    p = _success_p()
    series = {"success_p": p}
    for group_size in GROUP_SIZES:
        series[f"scale_std_g{group_size}"] = _learner_curve(grpo_advantages, group_size, True, p, rng)
        series[f"scale_centred_g{group_size}"] = _learner_curve(grpo_advantages, group_size, False, p, rng)
        series[f"scale_theory_g{group_size}"] = torch.full_like(p, 1.0 - 1.0 / group_size)
    return series


PARTS = (scale_curves,)
