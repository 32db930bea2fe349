"""T3 toy experiment for gspo_sequence_ratio: token-level noise around a small sequence-level shift.

The judge runs each part of PARTS with `rng` (seeded from the grading seed) and stand-ins that forward each call to
the functions graded, differentiable in the inputs that require grad (`paired` for a non-scalar output's
vector-Jacobian product, see grader/judge/experiment.py), so the toy reads the learner's own gradients.

Part 1: responses of 4, 16 and 64 tokens with token log-ratios delta + sigma * z_t (a true sequence-level shift and
independent token noise, such as a mixture-of-experts router flip, see routed_gates), advantages +-1, the window
[0.8, 1.2]. Per sigma: the distance of log s_i to delta; the share of tokens gspo_loss clips, beside gspo_loss on
the tokens of every fourth response, each a response of its own (PPO/GRPO's token ratio); the coefficient of
variation of the per-token gradient weights |d loss / d logp_t| * B * |y_i|, for both.
Part 2: GSPO-token with token-level advantages under (1/B) sum_i (1/|y_i|) sum_t -A_i,t s_i,t: token t's gradient is
-A_i,t s_i / (B |y_i|), so the credit series reads A_i,t back.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

DTYPE = torch.float64
LENGTHS = (4, 16, 64)
PER_LENGTH = 40
# the token-level comparison takes the tokens of every TOKEN_STRIDE-th response as responses of their own (840 of
# 3,360): a solution that loops over responses calls its loop once per token there, and stays within the toy's time
TOKEN_STRIDE = 4
SIGMAS = [0.025 * k for k in range(1, 25)]  # token noise scales, 0.025 to 0.6
WINDOW = 0.2
CREDIT_LENGTHS = (3, 5, 8, 12)
Fn = Callable[..., Any]


def _tensor(value: object, name: str, shape: tuple[int, ...]) -> Tensor:
    if not isinstance(value, Tensor) or not value.is_floating_point() or tuple(value.shape) != shape:
        raise TypeError(f"{name} must return a floating torch.Tensor of shape {list(shape)}")
    return value


def _pair(value: object) -> tuple[Tensor, Tensor]:
    if not isinstance(value, tuple) or len(value) != 2:
        raise TypeError("gspo_loss must return a tuple (loss, clipfrac)")
    return _tensor(value[0], "gspo_loss", ()), _tensor(value[1], "gspo_loss", ())


def _grad(leaf: Tensor, loss: Tensor) -> Tensor:
    if loss.requires_grad:
        loss.backward()
    return torch.zeros_like(leaf) if leaf.grad is None else leaf.grad.detach()


def _cv(weights: Tensor) -> float:
    """Coefficient of variation of the weights (population standard deviation over the mean)."""
    return float(weights.std(correction=0) / weights.mean()) if float(weights.mean()) > 0 else 0.0


def noise_sweep(rng: torch.Generator, sequence_ratio: Fn, gspo_loss: Fn, gspo_token_ratio: Fn) -> dict[str, Tensor]:
    lengths = torch.tensor([n for n in LENGTHS for _ in range(PER_LENGTH)])  # [B]
    rows, cols = lengths.numel(), max(LENGTHS)
    mask = torch.arange(cols)[None, :] < lengths[:, None]  # [B, L]
    delta = 0.02 + 0.03 * float(torch.rand((), generator=rng, dtype=DTYPE))
    signs = torch.where(torch.rand(rows, generator=rng) < 0.5, 1.0, -1.0).to(DTYPE)  # [B]
    names = ("seq_log_ratio_error", "seq_log_ratio_theory", "seq_clipfrac", "token_clipfrac", "seq_weight_cv")
    out: dict[str, list[float]] = {k: [] for k in (*names, "token_weight_cv")}
    for sigma in SIGMAS:
        old = -0.2 - 3.0 * torch.rand(rows, cols, generator=rng, dtype=DTYPE)  # [B, L]
        noise = torch.randn(rows, cols, generator=rng, dtype=DTYPE)
        # finite padding: what NaN padding does is padding_nan_inf's to judge, and a toy's series is never carried
        logp = torch.where(mask, old + delta + sigma * noise, old + 1.0).requires_grad_(True)  # [B, L]
        s = _tensor(sequence_ratio(logp=logp, old_logp=old, mask=mask), "sequence_ratio", (rows,)).detach()
        out["seq_log_ratio_error"].append(float((torch.log(s) - delta).abs().mean()))
        out["seq_log_ratio_theory"].append(sigma * math.sqrt(2 / math.pi) * float((1 / lengths.to(DTYPE).sqrt()).mean()))
        loss, clipfrac = _pair(gspo_loss(logp=logp, old_logp=old, advantages=signs, mask=mask, eps_low=WINDOW,
                                         eps_high=WINDOW))
        weights = (_grad(logp, loss).abs() * rows * lengths[:, None])[mask]  # [N]
        out["seq_clipfrac"].append(float(clipfrac))
        out["seq_weight_cv"].append(_cv(weights))
        # the picked tokens each a response of its own: the sequence ratio of one token is PPO/GRPO's token ratio
        picked = mask & (torch.arange(rows) % TOKEN_STRIDE == 0)[:, None]  # [B, L]
        tokens = logp.detach()[picked][:, None].clone().requires_grad_(True)  # [N, 1]
        token_signs = signs[:, None].expand(rows, cols)[picked]  # [N]
        loss, clipfrac = _pair(gspo_loss(logp=tokens, old_logp=old[picked][:, None], advantages=token_signs,
                                         mask=torch.ones_like(tokens, dtype=torch.bool), eps_low=WINDOW,
                                         eps_high=WINDOW))
        out["token_clipfrac"].append(float(clipfrac))
        out["token_weight_cv"].append(_cv(_grad(tokens, loss).abs().reshape(-1) * tokens.shape[0]))
    series = {k: torch.tensor(v, dtype=DTYPE) for k, v in out.items()}
    return {"noise_sigma": torch.tensor(SIGMAS, dtype=DTYPE), **series}


def token_credit(rng: torch.Generator, sequence_ratio: Fn, gspo_loss: Fn, gspo_token_ratio: Fn) -> dict[str, Tensor]:
    lengths = torch.tensor(CREDIT_LENGTHS)
    rows, cols = len(CREDIT_LENGTHS), max(CREDIT_LENGTHS) + 2
    mask = torch.arange(cols)[None, :] < lengths[:, None]  # [B, L]
    old = -0.2 - 3.0 * torch.rand(rows, cols, generator=rng, dtype=DTYPE)
    logp = torch.where(mask, old + 0.3 * torch.randn(rows, cols, generator=rng, dtype=DTYPE), old - 1.0)
    logp.requires_grad_(True)
    advantages = torch.where(mask, torch.randn(rows, cols, generator=rng, dtype=DTYPE), 0.0)  # [B, L]
    n = lengths.to(DTYPE)[:, None]
    # the loss is sum(ratio * cotangent): the stand-in runs that backward on the function's side
    cotangent = torch.where(mask, -advantages / (n * rows), 0.0)  # [B, L]
    loss, ratio = gspo_token_ratio.paired(cotangent, logp=logp, old_logp=old, mask=mask)
    ratio = _tensor(ratio, "gspo_token_ratio", (rows, cols))
    s = torch.exp(torch.where(mask, logp.detach() - old, 0.0).sum(1) / lengths)[:, None]  # [B, 1], private
    credit = -_grad(logp, loss) * rows * n / s
    return {"token_index": torch.arange(int(mask.sum()), dtype=DTYPE), "token_advantage": advantages[mask],
            "token_credit": credit[mask], "token_ratio_over_s": (ratio.detach() / s)[mask].to(DTYPE)}


PARTS = (noise_sweep, token_credit)
