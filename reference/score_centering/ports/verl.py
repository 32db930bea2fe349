"""score_centering_loss as verl computes it: verl-project/verl@c6236f515b81792e476e75377947519f3ca00666,
`verl/trainer/ppo/score_centering.py` (`topk_log_probs_from_logits`, `score_centering_weight_fn`,
`score_centering_correction`), with the thresholds of `_parse_rollout_is_threshold`
(verl-project/verl@1dda039b9c6311889a9c9a26040677e1254814f9, `verl/trainer/ppo/rollout_corr_helper.py` lines
93-129) and the loss masked by multiplication as verl's `agg_loss` does.

Reproduced: the head and sampled log-probabilities from logits cast to float32 (the returned correction is
float32); under no_grad, the tail masses floored at eps, alpha' = rho f(1/rho), the residual q f(p/q) - alpha' p;
one weight rule shared by the head and the sampled token: none is 1, TIS (`rollout_is="token"` with one threshold)
clamps the ratio from above only, MIS (a "lower_upper" threshold) keeps ratios inside the inclusive band. The
thresholds must be positive, the lower at most the upper; verl has no MIS default, so a missing MIS bound takes the
exercise's (0.5, 5); the TIS default is `rollout_is_threshold`'s 2.0. Heads, ids, masses and NaN are not checked.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor


def _weight_fn(mode: str, low: float | None, high: float | None) -> Callable[[Tensor], Tensor]:
    if mode == "none":
        return torch.ones_like
    if mode not in ("tis", "mis"):
        raise ValueError(f"score centering composes with token-level IS only, got rollout_is={mode!r}")
    upper = float(high) if high is not None else (2.0 if mode == "tis" else 5.0)
    if upper <= 0:
        raise ValueError(f"rollout_is_threshold upper bound must be positive, got {upper}.")
    if mode == "tis":
        return lambda ratio: ratio.clamp(max=upper)  # a single threshold: no lower clamp
    lower = float(low) if low is not None else 0.5
    if lower <= 0:
        raise ValueError(f"rollout_is_threshold lower bound must be positive, got {lower}.")
    if lower > upper:
        raise ValueError("rollout_is_threshold lower bound must be <= upper bound.")
    return lambda ratio: torch.where((ratio >= lower) & (ratio <= upper), ratio, torch.zeros_like(ratio))


def score_centering_loss(
    logits: Tensor, tokens: Tensor, rollout_logp: Tensor, head_ids: Tensor, rollout_head_logp: Tensor,
    advantages: Tensor, mask: Tensor, mode: str = "none", low: float | None = None, high: float | None = None,
    eps: float = 1e-6,
) -> Tensor:
    weight_fn = _weight_fn(mode, low, high)
    logp = torch.log_softmax(logits.to(torch.float32), dim=-1)  # [N, V]
    train_head = logp.gather(1, head_ids.long())  # [N, k] float32
    logp_y = logp.gather(1, tokens.long()[:, None]).squeeze(1)  # [N]
    with torch.no_grad():
        p = train_head.exp()
        q = rollout_head_logp.float().exp()
        rho = (1 - q.sum(-1)).clamp_min(eps) / (1 - p.sum(-1)).clamp_min(eps)
        alpha = rho * weight_fn(1.0 / rho)
        residual = q * weight_fn((train_head - rollout_head_logp.float()).exp()) - alpha.unsqueeze(-1) * p
        sampled = weight_fn((logp_y - rollout_logp.float()).exp())
    correction = (residual * train_head).sum(-1)  # [N]
    adv = advantages.detach().float()
    loss = -adv * (sampled * logp_y - correction)
    return (loss * mask).to(logits.dtype)  # agg_loss multiplies by the response mask
