"""score_centering_loss as slime computes it: THUDM/slime@2e5cd7cd5a90311c65d19ba44965bc8053c52aba,
`slime/utils/score_centering.py` lines 41-55 (`score_centering_correction`) and lines 116-124
(`_validate_head_arrays`), with the token-wise weights of `importance_weights` and the REINFORCE loss and reducer
it feeds, read at the fork imvladikon/slime@2890b29318b96b47aff5be901f13fbf9adbdc30a (the upstream commit stores
neither file): `slime/utils/ppo_utils.py` lines 25-35, `slime/backends/megatron_utils/loss.py` (the `reinforce`
branch of `policy_loss_function`, `-A * log p_y`, weighted by the IS rule, plus `A * sc_correction`) and
`slime/backends/megatron_utils/cp_utils.py` (`get_sum_of_sample_mean`, the loss multiplied by the loss mask).

Reproduced: log-probabilities of the whole vocabulary in float32 (`calculate_topk_log_probs` casts each row chunk to
float32); under no_grad, p and q of the head in float32, the tail masses floored at eps, alpha' = rho f(1/rho) and
the residual q f(p/q) - alpha' p; the sampled weight f(p_y / q_y) by the same rule with `importance_weights`' own
defaults (TIS 0 and 2, MIS 0.5 and 5); the per-row loss multiplied by the mask. A recorded head is refused unless its
log-probabilities are finite and at most 0 and its mass at most 1.0001, and its ids distinct and non-negative (on
the rows that have a head, the masked ones here). An unknown mode raises; the bounds are not validated.
"""

from __future__ import annotations

import torch
from torch import Tensor


def _importance_weights(ratio: Tensor, mode: str, low: float | None, high: float | None) -> Tensor:
    if mode == "none":
        return torch.ones_like(ratio)
    if mode == "tis":
        return ratio.clamp(min=0.0 if low is None else low, max=2.0 if high is None else high)
    if mode == "mis":
        low = 0.5 if low is None else low
        high = 5.0 if high is None else high
        return torch.where((ratio >= low) & (ratio <= high), ratio, 0.0)
    raise ValueError(f"Unknown importance sampling mode: {mode}")


def _validate_heads(head_ids: Tensor, rollout_head_logp: Tensor) -> None:
    ids = head_ids.detach()
    distinct = ids.shape[1] < 2 or not bool((ids.sort(dim=-1).values.diff(dim=-1) == 0).any())
    if bool((ids < 0).any()) or not distinct:
        raise ValueError("Sampler top-k token ids must be distinct and nonnegative integers.")
    logp = rollout_head_logp.detach().double()
    if not bool(torch.isfinite(logp).all()) or bool((logp > 0).any()) or bool((logp.exp().sum(-1) > 1.0001).any()):
        raise ValueError("Sampler top-k logprobs must describe a finite, normalized probability subdistribution.")


def score_centering_loss(
    logits: Tensor, tokens: Tensor, rollout_logp: Tensor, head_ids: Tensor, rollout_head_logp: Tensor,
    advantages: Tensor, mask: Tensor, mode: str = "none", low: float | None = None, high: float | None = None,
    eps: float = 1e-6,
) -> Tensor:
    active = mask != 0
    _validate_heads(head_ids[active], rollout_head_logp[active])
    logp = torch.log_softmax(logits.float(), dim=-1)  # [N, V] float32, as slime's log-prob kernels return
    train_head = logp.gather(1, head_ids.long())  # [N, k]
    logp_y = logp.gather(1, tokens.long()[:, None]).squeeze(1)  # [N]
    with torch.no_grad():
        p, q = train_head.exp(), rollout_head_logp.float().exp()
        rho = (1 - q.sum(-1)).clamp_min(eps) / (1 - p.sum(-1)).clamp_min(eps)
        alpha = rho * _importance_weights(rho.reciprocal(), mode, low, high)
        weights = _importance_weights((train_head - rollout_head_logp.float()).exp(), mode, low, high)
        residual = q * weights - alpha.unsqueeze(-1) * p
        sampled = _importance_weights((logp_y - rollout_logp.float()).exp(), mode, low, high)
    correction = (residual * train_head).sum(-1)  # [N]
    adv = advantages.detach().float()
    loss = -adv * logp_y * sampled + adv * correction  # the IS weight scales the sampled term only
    return (loss * mask).to(logits.dtype)  # the reducer masks by multiplication
