"""T3 toy experiment for ppo_clip_loss: a ratio sweep, the length bias of the two reductions, and epochs of
updates on one reused batch, clipped, beside the same updates without clipping.

The judge runs every part of PARTS with `rng`, a generator seeded from the grading seed and the part's
name, and `ppo_clip_loss`, a stand-in that forwards each call to the function being graded and hands back
its (loss, clipfrac); the loss stays differentiable in the arguments that require grad. Each part draws
its inputs from `rng`, so the series of two seeds differ, and returns plain 1-D float64 series. The curves
without clipping come from a private helper, never from the graded function: a fixed baseline that no check
compares. This module imports only torch and the standard library.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

DTYPE = torch.float64

SWEEP_POINTS = 72  # per sign: 144 calls, each with its own backward
SWEEP_RANGE = (0.3, 4.0)
SWEEP_EPS = (0.2, 0.28)
SWEEP_DUAL_CLIP = 3.0
KINK_CLEARANCE = 1e-6  # relative distance kept from every kink, where the gradient is a matter of tie rules

SHORT, LONG = 2, 30  # the two response lengths of the length-bias example
LONG_CLIPPED = 2  # tokens of the long response above the interval, and as many below it

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


# ---------------------------------------------------------------- part 1: one token, r from 0.3 to 4


def _sweep_ratios(rng: torch.Generator) -> Tensor:
    """SWEEP_POINTS ratios, one drawn at random in each of equal cells of log r, kept clear of the kinks."""
    low, high = (math.log(v) for v in SWEEP_RANGE)
    cells = torch.arange(SWEEP_POINTS, dtype=DTYPE)
    log_r = low + (cells + _uniform(rng, (SWEEP_POINTS,), 0.05, 0.95)) * (high - low) / SWEEP_POINTS  # [N]
    ratios = torch.exp(log_r)
    for kink in (1.0 - SWEEP_EPS[0], 1.0 + SWEEP_EPS[1], SWEEP_DUAL_CLIP):
        near = (ratios / kink - 1.0).abs() < KINK_CLEARANCE
        ratios = torch.where(near, ratios * (1.0 + 3 * KINK_CLEARANCE), ratios)
    return ratios


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
                dual_clip=SWEEP_DUAL_CLIP, reduction="token_mean"))
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
    """The weight d loss / d l_t each token gets from each reduction, read off the gradient in logp.

    Where a token is on the unclipped branch, l_t = -A r_t and d l_t / d logp_t = -A r_t, so the gradient
    divided by -A r_t is the token's weight in the loss; a clipped token reads as weight 0 (no gradient),
    although it still counts in the denominators.
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
    out: dict[str, Tensor] = {"lenbias_token": torch.arange(SHORT + LONG, dtype=DTYPE)}
    losses = []
    for sign, name in ((1.0, "pos"), (-1.0, "neg")):
        advantage = sign * size
        for reduction, short_name in (("token_mean", "token"), ("seq_mean", "seq")):
            logp = torch.where(mask, old + torch.log(ratios), math.nan).requires_grad_(True)  # [2, L]
            loss, _ = _loss_and_clipfrac(ppo_clip_loss(
                logp=logp, old_logp=old, advantages=torch.full((2,), advantage, dtype=DTYPE), mask=mask,
                eps_low=0.2, eps_high=0.2, dual_clip=None, reduction=reduction))
            _backward(loss)
            seen = torch.exp(torch.where(mask, logp.detach() - old, 0.0))  # [2, L]
            weight = _grad_or_zeros(logp) / (-advantage * seen) + 0.0  # [2, L]; + 0.0 turns -0 into 0
            out[f"lenbias_weight_{short_name}_{name}"] = _series(weight[rows, cols_index])
            losses.append(float(loss.detach()))
    out["lenbias_loss"] = _series(losses)  # token_mean and seq_mean, for A > 0 then A < 0
    return out


# ---------------------------------------------------------------- part 3: epochs on one reused batch


def _epoch_batch(rng: torch.Generator) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
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
    return theta0, actions, mask, old, advantages


def _unclipped_loss(**kwargs: Any) -> tuple[Tensor, Tensor]:
    """Private baseline: the token mean of -A r with no clipping at all (its clipfrac is 0 by definition)."""
    logp, old, advantages, mask = kwargs["logp"], kwargs["old_logp"], kwargs["advantages"], kwargs["mask"]
    ratio = torch.exp(torch.where(mask, logp - old, 0.0))  # [B, L]
    per_token = torch.where(mask, -advantages[:, None] * ratio, 0.0)  # [B, L]
    return per_token.sum() / mask.sum().clamp(min=1), torch.zeros((), dtype=DTYPE)


def _run_epochs(loss_fn: Loss, batch: tuple[Tensor, ...]) -> tuple[list[float], list[float], list[float]]:
    """EPOCHS gradient steps of the logits on the same batch; the largest and smallest ratio and clipfrac each time."""
    theta0, actions, mask, old, advantages = batch
    theta = theta0.clone().requires_grad_(True)
    largest, smallest, clipfracs = [], [], []
    for _ in range(EPOCHS):
        logp = torch.where(mask, torch.log_softmax(theta, dim=0)[actions], math.nan)  # [B, L]
        ratio = torch.exp(logp.detach() - old)[mask]  # [valid tokens]
        largest.append(float(ratio.max()))
        smallest.append(float(ratio.min()))
        loss, clipfrac = _loss_and_clipfrac(loss_fn(
            logp=logp, old_logp=old, advantages=advantages, mask=mask, eps_low=CLIPPED_EPS[0],
            eps_high=CLIPPED_EPS[1], dual_clip=None, reduction="token_mean"))
        clipfracs.append(float(clipfrac))
        theta.grad = None
        _backward(loss)
        with torch.no_grad():
            theta -= EPOCH_LR * _grad_or_zeros(theta)
    return largest, smallest, clipfracs


def reuse_epochs(rng: torch.Generator, ppo_clip_loss: Loss) -> dict[str, Tensor]:
    """EPOCHS gradient steps on the same batch with the clipped loss, beside the same steps without clipping."""
    batch = _epoch_batch(rng)
    largest, smallest, clipfracs = _run_epochs(ppo_clip_loss, batch)
    free_largest, free_smallest, _ = _run_epochs(_unclipped_loss, batch)
    return {
        "epoch": torch.arange(EPOCHS, dtype=DTYPE),
        "epochs_max_ratio_clip": _series(largest),
        "epochs_min_ratio_clip": _series(smallest),
        "epochs_clipfrac_clip": _series(clipfracs),
        "epochs_max_ratio_free": _series(free_largest),  # fixed baseline: never the graded function
        "epochs_min_ratio_free": _series(free_smallest),
    }


PARTS = (clip_sweep, length_bias, reuse_epochs)
