"""score_centering_loss, one row at a time."""

from __future__ import annotations

import math

import torch


def weight(x, mode, low, high):
    if mode == "tis":
        return x.clamp(low, high)
    if mode == "mis":
        return torch.where((x >= low) & (x <= high), x, torch.zeros_like(x))
    return torch.ones_like(x)


def score_centering_loss(logits, tokens, rollout_logp, head_ids, rollout_head_logp, advantages, mask,
                         mode="none", low=None, high=None, eps=1e-6):
    if logits.dim() != 2:
        raise ValueError("logits must be [N, V]")
    n, vocab = logits.shape
    if head_ids.dim() != 2 or head_ids.shape[0] != n or rollout_head_logp.shape != head_ids.shape:
        raise ValueError("bad head shapes")
    for t in (tokens, rollout_logp, advantages, mask):
        if t.shape != (n,):
            raise ValueError("bad row shapes")
    if tokens.is_floating_point() or head_ids.is_floating_point() or not logits.is_floating_point():
        raise ValueError("bad dtypes")
    if not (rollout_logp.is_floating_point() and rollout_head_logp.is_floating_point()
            and advantages.is_floating_point()):
        raise ValueError("bad dtypes")
    if mode not in ("none", "tis", "mis"):
        raise ValueError("bad mode")
    defaults = {"none": (0.0, 0.0), "tis": (0.0, 2.0), "mis": (0.5, 5.0)}[mode]
    low = defaults[0] if low is None else low
    high = defaults[1] if high is None else high
    if mode != "none" and not (math.isfinite(low) and math.isfinite(high) and 0 <= low <= high and high > 0):
        raise ValueError("bad bounds")
    if (tokens < 0).any() or (tokens >= vocab).any() or (head_ids < 0).any() or (head_ids >= vocab).any():
        raise ValueError("id out of range")

    dtype = torch.float64 if logits.dtype == torch.float64 else torch.float32
    losses = []
    for i in range(n):
        row_head = head_ids[i].long()
        if len(set(row_head.tolist())) != len(row_head):
            raise ValueError("repeated head id")
        if not mask[i]:
            # a zero that stays on logits' graph, so backward works even when every row is padding
            zero = torch.where(torch.tensor(False), logits[i].to(dtype).sum(), torch.zeros((), dtype=dtype))
            losses.append(zero)
            continue
        values = (logits[i], rollout_logp[i], rollout_head_logp[i], advantages[i])
        if any(torch.isnan(x.detach()).any() for x in values):
            raise ValueError("NaN")
        logp = torch.log_softmax(logits[i].to(dtype), dim=0)
        log_q_head = rollout_head_logp[i].detach().to(dtype)
        q_head = log_q_head.exp()
        if q_head.sum() > 1 + 1e-4:
            raise ValueError("head mass above 1")
        logp_head = logp[row_head]
        p_head = logp_head.detach().exp()
        alpha = torch.clamp(1 - q_head.sum(), min=eps) / torch.clamp(1 - p_head.sum(), min=eps)
        # the tail is alpha * p, so its share of the mean is alpha times the tail's p
        tail = alpha
        head_part = torch.where(q_head > 0, q_head * weight((logp_head.detach() - log_q_head).exp(), mode, low, high),
                                torch.zeros_like(q_head))
        residual = head_part - tail * p_head
        y = int(tokens[i])
        w = weight((logp[y].detach() - rollout_logp[i].detach().to(dtype)).exp(), mode, low, high)
        a = advantages[i].detach().to(dtype)
        losses.append(-a * (w * logp[y] - (residual * logp_head).sum()))
    if not losses:
        return logits.sum(dim=-1)  # no rows: an empty loss, still on logits' graph
    return torch.stack(losses).to(logits.dtype)
