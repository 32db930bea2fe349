"""T3 toy experiment for ppo_clip_loss: a ratio sweep, the length bias of the two reductions, the dual clip on a
batch, and epochs of updates on one reused batch, clipped, beside the same updates without clipping.

The judge runs every part of PARTS with `rng`, a generator seeded from the grading seed and the part's
name, and `ppo_clip_loss`, a stand-in that forwards each call to the function being graded and hands back
its (loss, clipfrac); the loss stays differentiable in the arguments that require grad. Each part draws
its inputs from `rng`, so the series of two seeds differ, and returns plain 1-D float64 series. The curves
without clipping come from a private helper, never from the graded function: a fixed baseline that no check
compares. The true expected payoff and the KL divergence to the sampling policy are computed here from the
logits the updates produced, never read from the graded function. This module imports only torch and the
standard library.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from torch import Tensor

DTYPE = torch.float64

SWEEP_POINTS = 72  # per sign: 144 calls, each with its own backward
# One width on both sides and no dual clip, up to a ratio below 3 (where a cap left on would bind): the sweep shows
# the clip window, and the widths, the dual clip and its default are the checks' and the dual-clip batch's to judge.
SWEEP_RANGE = (0.3, 2.5)
SWEEP_EPS = (0.2, 0.2)
KINK_CLEARANCE = 1e-6  # relative distance kept from every kink, where the gradient is a matter of tie rules

SHORT, LONG = 2, 30  # the two response lengths of the length-bias example
LONG_CLIPPED = 2  # tokens of the long response above the interval, and as many below it

DUAL_BATCH = (4, 6)  # [B, L] of the dual-clip batch
DUAL_POINTS = 30
DUAL_RANGE = (1.0, 30.0)  # the runaway token's ratio
DUAL_CAP = 3.0
DUAL_EPS = 0.2

EPOCH_ACTIONS = 4
EPOCH_RESPONSES = 16
EPOCH_MAX_LENGTH = 8
EPOCHS = 40
EPOCH_LR = 1.0
CLIPPED_EPS = (0.2, 0.2)

Loss = Callable[..., Any]


# ---------------------------------------------------------------- what the function returned


def _loss_and_clipfrac(output: object) -> tuple[Tensor, Tensor]:
    """The (loss, clipfrac) pair, checked against the contract before the toy uses it."""
    if not isinstance(output, tuple) or len(output) != 2:
        raise TypeError(f"ppo_clip_loss must return a tuple (loss, clipfrac), got {type(output).__name__}")
    for name, value in zip(("loss", "clipfrac"), output, strict=True):
        if not isinstance(value, Tensor):
            raise TypeError(f"ppo_clip_loss must return {name} as a torch.Tensor, got {type(value).__name__}")
        if value.shape != ():
            raise ValueError(f"ppo_clip_loss must return {name} as a 0-dim tensor, got shape {list(value.shape)}")
        if not value.is_floating_point():
            raise TypeError(f"ppo_clip_loss must return {name} as a floating tensor, got {value.dtype}")
    return output[0], output[1]


def _grad_or_zeros(leaf: Tensor) -> Tensor:
    return torch.zeros_like(leaf) if leaf.grad is None else leaf.grad.detach()


def _backward(loss: Tensor) -> None:
    # A loss with no graph gives no gradient: its leaves keep grad None, read as zero.
    if loss.requires_grad:
        loss.backward()


def _series(values: list[float] | Tensor) -> Tensor:
    return torch.as_tensor(values, dtype=DTYPE).detach().reshape(-1).clone()


def _uniform(rng: torch.Generator, shape: tuple[int, ...], low: float, high: float) -> Tensor:
    return low + (high - low) * torch.rand(shape, generator=rng, dtype=DTYPE)


def _log_cells(rng: torch.Generator, points: int, span: tuple[float, float], kinks: tuple[float, ...]) -> Tensor:
    """`points` values, one drawn at random in each of equal cells of log x over `span`, kept clear of the kinks."""
    low, high = (math.log(v) for v in span)
    cells = torch.arange(points, dtype=DTYPE)
    values = torch.exp(low + (cells + _uniform(rng, (points,), 0.05, 0.95)) * (high - low) / points)  # [N]
    for kink in kinks:
        near = (values / kink - 1.0).abs() < KINK_CLEARANCE
        values = torch.where(near, values * (1.0 + 3 * KINK_CLEARANCE), values)
    return values


# ---------------------------------------------------------------- part 1: one token, r from 0.3 to 2.5


def _sweep_ratios(rng: torch.Generator) -> Tensor:
    """SWEEP_POINTS ratios, one drawn at random in each of equal cells of log r, kept clear of the kinks."""
    return _log_cells(rng, SWEEP_POINTS, SWEEP_RANGE, (1.0 - SWEEP_EPS[0], 1.0 + SWEEP_EPS[1]))


def clip_sweep(rng: torch.Generator, ppo_clip_loss: Loss) -> dict[str, Tensor]:
    """Per-token loss, its gradient in logp and clipfrac against r, for A = +1 and A = -1."""
    ratios = _sweep_ratios(rng)
    old = _uniform(rng, (SWEEP_POINTS,), -3.0, -0.3)  # [N], the old log-probability of each point's token
    seen_ratio = torch.exp((old + torch.log(ratios)) - old)  # [N], the ratio the function actually sees
    out: dict[str, Tensor] = {"sweep_ratio": _series(seen_ratio)}
    for sign, name in ((1.0, "pos"), (-1.0, "neg")):
        losses, grads, clipfracs = [], [], []
        for k in range(SWEEP_POINTS):
            logp = (old[k] + torch.log(ratios[k])).reshape(1, 1).requires_grad_(True)  # [1, 1]
            loss, clipfrac = _loss_and_clipfrac(ppo_clip_loss(
                logp=logp, old_logp=old[k].reshape(1, 1), advantages=torch.tensor([sign], dtype=DTYPE),
                mask=torch.ones(1, 1, dtype=torch.bool), eps_low=SWEEP_EPS[0], eps_high=SWEEP_EPS[1],
                dual_clip=None, reduction="token_mean"))
            _backward(loss)
            losses.append(float(loss.detach()))
            grads.append(float(_grad_or_zeros(logp).reshape(())))
            clipfracs.append(float(clipfrac))
        out[f"sweep_loss_{name}"] = _series(losses)
        out[f"sweep_grad_{name}"] = _series(grads)
        out[f"sweep_clipfrac_{name}"] = _series(clipfracs)
        out[f"sweep_unclipped_{name}"] = -sign * seen_ratio  # the loss without any clipping, for comparison
    return out


# ---------------------------------------------------------------- part 2: length bias of the reductions


def _length_bias_ratios(rng: torch.Generator, cols: int, long_row: int) -> Tensor:
    """[2, L] ratios inside the interval, except LONG_CLIPPED tokens of the long response above it and as many
    below it: clipped for one sign of A, unclipped for the other."""
    ratios = _uniform(rng, (2, cols), 0.9, 1.1)
    where = torch.randperm(LONG, generator=rng)[: 2 * LONG_CLIPPED]
    ratios[long_row, where[:LONG_CLIPPED]] = _uniform(rng, (LONG_CLIPPED,), 1.35, 1.6)
    ratios[long_row, where[LONG_CLIPPED:]] = _uniform(rng, (LONG_CLIPPED,), 0.6, 0.7)
    return ratios


def length_bias(rng: torch.Generator, ppo_clip_loss: Loss) -> dict[str, Tensor]:
    """The signed push each token gets from each reduction, read off the gradient in logp.

    -d loss / d logp_t is the step gradient descent takes on a token's log-probability. On the unclipped
    branch it is A r_t w_t, with w_t the token's weight in the reduction, so dividing by |A| r_t leaves
    sign(A) w_t: +w_t pushes a token of a right answer up, -w_t pushes a token of a wrong one down. A clipped
    token reads 0 (no gradient), although it still counts in the denominators. A response's total is the sum
    of its tokens' pushes.
    """
    cols = LONG + int(torch.randint(0, 5, (), generator=rng))
    short_row = int(torch.randint(0, 2, (), generator=rng))  # which row holds the short response
    lengths = [SHORT, LONG] if short_row == 0 else [LONG, SHORT]
    mask = torch.arange(cols)[None, :] < torch.tensor(lengths)[:, None]  # [2, L]
    old = torch.where(mask, _uniform(rng, (2, cols), -3.0, -0.3), math.nan)  # [2, L], NaN padding
    ratios = _length_bias_ratios(rng, cols, 1 - short_row)  # [2, L]
    size = float(_uniform(rng, (), 0.5, 2.0))
    order = [(short_row, t) for t in range(SHORT)] + [(1 - short_row, t) for t in range(LONG)]  # short first
    rows, cols_index = (torch.tensor(ix) for ix in zip(*order, strict=True))
    out: dict[str, Tensor] = {"lenbias_token": torch.arange(SHORT + LONG, dtype=DTYPE),
                              "lenbias_response": torch.tensor([0.0, 1.0], dtype=DTYPE)}
    for sign, name in ((1.0, "pos"), (-1.0, "neg")):
        advantage = sign * size
        for reduction, short_name in (("token_mean", "token"), ("seq_mean", "seq")):
            logp = torch.where(mask, old + torch.log(ratios), math.nan).requires_grad_(True)  # [2, L]
            _backward(_loss_and_clipfrac(ppo_clip_loss(
                logp=logp, old_logp=old, advantages=torch.full((2,), advantage, dtype=DTYPE), mask=mask,
                eps_low=0.2, eps_high=0.2, dual_clip=None, reduction=reduction))[0])
            seen = torch.exp(torch.where(mask, logp.detach() - old, 0.0))  # [2, L]
            push = (-_grad_or_zeros(logp) / (size * seen))[rows, cols_index] + 0.0  # [32]; + 0.0 turns -0 into 0
            out[f"lenbias_push_{short_name}_{name}"] = _series(push)
            out[f"lenbias_total_{short_name}_{name}"] = _series(torch.stack([push[:SHORT].sum(), push[SHORT:].sum()]))
    return out


# ---------------------------------------------------------------- part 3: the dual clip on a batch


def dual_clip_batch(rng: torch.Generator, ppo_clip_loss: Loss) -> dict[str, Tensor]:
    """One token of a negative-advantage response runs away (ratio rho from 1 to 30) in a batch whose other
    tokens sit inside the interval but one, clipped: its share of the batch's gradient, with the dual clip and
    without it."""
    rows, cols = DUAL_BATCH
    old = _uniform(rng, (rows, cols), -3.0, -0.3)  # [B, L]
    inside = _uniform(rng, (rows, cols), 0.85, 1.15)  # [B, L]
    signs = torch.tensor([1.0, -1.0] * (rows // 2), dtype=DTYPE)[torch.randperm(rows, generator=rng)]  # [B]
    advantages = signs * _uniform(rng, (rows,), 0.5, 2.0)  # [B]
    row = int(torch.nonzero(signs < 0)[0])
    col = int(torch.randint(0, cols, (), generator=rng))
    # one token of a right answer above the interval: clipped, so it gives no gradient, whatever the runaway does
    inside[int(torch.nonzero(signs > 0)[0]), col] = float(_uniform(rng, (), 1.35, 1.6))
    rhos = _log_cells(rng, DUAL_POINTS, DUAL_RANGE, (1.0 + DUAL_EPS, DUAL_CAP))
    mask = torch.ones(rows, cols, dtype=torch.bool)
    out: dict[str, Tensor] = {}
    for cap, name in ((DUAL_CAP, "capped"), (None, "free")):
        shares = []
        for rho in rhos:
            ratios = inside.clone()
            ratios[row, col] = rho
            logp = (old + torch.log(ratios)).requires_grad_(True)  # [B, L]
            _backward(_loss_and_clipfrac(ppo_clip_loss(
                logp=logp, old_logp=old, advantages=advantages, mask=mask, eps_low=DUAL_EPS,
                eps_high=DUAL_EPS, dual_clip=cap, reduction="token_mean"))[0])
            grad = _grad_or_zeros(logp).abs()  # [B, L]
            total = float(grad.sum())
            shares.append(float(grad[row, col]) / total if total > 0 else 0.0)
        out[f"dual_share_{name}"] = _series(shares)
    out["dual_ratio"] = _series(torch.exp((old[row, col] + torch.log(rhos)) - old[row, col]))
    return out


# ---------------------------------------------------------------- part 4: epochs on one reused batch


class EpochBatch(NamedTuple):
    """The reused batch, with what only the toy knows: the initial logits and each action's payoff."""

    theta0: Tensor  # [K]
    actions: Tensor  # [B, L]
    mask: Tensor  # [B, L]
    old: Tensor  # [B, L], NaN padding
    advantages: Tensor  # [B]
    payoff: Tensor  # [K]


def _epoch_batch(rng: torch.Generator) -> EpochBatch:
    """Initial logits, then one batch sampled from their softmax: actions, mask, old_logp and advantages."""
    theta0 = 0.5 * torch.randn(EPOCH_ACTIONS, generator=rng, dtype=DTYPE)  # [K]
    policy = torch.softmax(theta0, dim=0)
    shape = (EPOCH_RESPONSES, EPOCH_MAX_LENGTH)
    actions = torch.multinomial(policy, shape[0] * shape[1], replacement=True, generator=rng).reshape(shape)
    lengths = torch.randint(1, EPOCH_MAX_LENGTH + 1, (EPOCH_RESPONSES,), generator=rng)  # [B]
    mask = torch.arange(EPOCH_MAX_LENGTH)[None, :] < lengths[:, None]  # [B, L]
    payoff = torch.randn(EPOCH_ACTIONS, generator=rng, dtype=DTYPE)  # [K], reward of each action
    reward = torch.where(mask, payoff[actions], 0.0).sum(dim=1) / lengths.to(DTYPE)  # [B], mean payoff
    advantages = (reward - reward.mean()) / (reward.std(correction=0) + 1e-6)  # [B], one group
    old = torch.where(mask, torch.log_softmax(theta0, dim=0)[actions], math.nan)  # [B, L], NaN padding
    return EpochBatch(theta0, actions, mask, old, advantages, payoff)


def _unclipped_loss(**kwargs: Any) -> tuple[Tensor, Tensor]:
    """Private baseline: the token mean of -A r with no clipping at all (its clipfrac is 0 by definition)."""
    logp, old, advantages, mask = kwargs["logp"], kwargs["old_logp"], kwargs["advantages"], kwargs["mask"]
    ratio = torch.exp(torch.where(mask, logp - old, 0.0))  # [B, L]
    per_token = torch.where(mask, -advantages[:, None] * ratio, 0.0)  # [B, L]
    return per_token.sum() / mask.sum().clamp(min=1), torch.zeros((), dtype=DTYPE)


def _run_epochs(loss_fn: Loss, batch: EpochBatch) -> dict[str, list[float]]:
    """EPOCHS gradient steps of the logits on the same batch. Before each step: the largest and smallest ratio,
    the true expected payoff sum_a pi(a) payoff(a), KL(pi_old || pi), and the step's clipfrac."""
    theta = batch.theta0.clone().requires_grad_(True)
    old_policy = torch.log_softmax(batch.theta0, dim=0)  # [K]
    seen: dict[str, list[float]] = {"max_ratio": [], "min_ratio": [], "payoff": [], "kl": [], "clipfrac": []}
    for _ in range(EPOCHS):
        policy = torch.log_softmax(theta, dim=0)  # [K]
        logp = torch.where(batch.mask, policy[batch.actions], math.nan)  # [B, L]
        ratio = torch.exp(logp.detach() - batch.old)[batch.mask]  # [valid tokens]
        seen["max_ratio"].append(float(ratio.max()))
        seen["min_ratio"].append(float(ratio.min()))
        seen["payoff"].append(float((policy.detach().exp() * batch.payoff).sum()))
        seen["kl"].append(float((old_policy.exp() * (old_policy - policy.detach())).sum()))
        loss, clipfrac = _loss_and_clipfrac(loss_fn(
            logp=logp, old_logp=batch.old, advantages=batch.advantages, mask=batch.mask, eps_low=CLIPPED_EPS[0],
            eps_high=CLIPPED_EPS[1], dual_clip=None, reduction="token_mean"))
        seen["clipfrac"].append(float(clipfrac))
        theta.grad = None
        _backward(loss)
        with torch.no_grad():
            theta -= EPOCH_LR * _grad_or_zeros(theta)
    return seen


def reuse_epochs(rng: torch.Generator, ppo_clip_loss: Loss) -> dict[str, Tensor]:
    """EPOCHS gradient steps on the same batch with the clipped loss, beside the same steps without clipping."""
    batch = _epoch_batch(rng)
    clipped = _run_epochs(ppo_clip_loss, batch)
    free = _run_epochs(_unclipped_loss, batch)  # fixed baseline: never the graded function
    out = {"epoch": torch.arange(EPOCHS, dtype=DTYPE),
           "epochs_best_payoff": torch.full((EPOCHS,), float(batch.payoff.max()), dtype=DTYPE)}
    for name in ("max_ratio", "min_ratio", "payoff", "kl"):
        out[f"epochs_{name}_clip"] = _series(clipped[name])
        out[f"epochs_{name}_free"] = _series(free[name])
    out["epochs_clipfrac_clip"] = _series(clipped["clipfrac"])
    return out


PARTS = (clip_sweep, length_bias, dual_clip_batch, reuse_epochs)
