"""T3 toy experiment for score_centering_loss: how much of the expected gradient centring removes, and whether
the learning signal survives it.

The judge runs every part of PARTS as `part(rng, score_centering_loss=...)`, on the trusted side; each call of
`score_centering_loss` is answered by the function being graded and comes back as a plain detached tensor.
`rng` is seeded by the grading seed: the advantage, the vocabulary's order, a shift of the logits and the
bandit's distributions and rewards change from seed to seed, so no series can be replayed from another seed's run.

The loss comes back per row. Each call is `paired` with the sampler's q as the cotangent of the [V] losses, so
the toy receives sum_y q_y loss(y), differentiable in the prefix's logits through the function's own graph: its
gradient, taken with autograd, is the expected gradient E_q[grad loss] that the curves show. A loss whose values
are right and whose gradient is not (a weight or a residual left attached) gives other curves. The tail
coefficient is read back from the loss values, for its plot only: every row is one sampled token y at the same
prefix, so for a head H and the row's advantage A_y,

    loss(y) = -A_y (w_y log p_y - S_H),   S_H = sum_{v in H} residual_v log p_v.

With an empty head each row gives the weight w_y = -loss(y) / (A_y log p_y); with head H the rows give S_H, and
since residual_v = q_v w_v - alpha' p_v, the tail coefficient alpha' = (sum_H q_v w_v log p_v - S_H) /
sum_H p_v log p_v. Series named ``bandit_q``, ``bandit_on_policy`` and ``sweep_k*`` / ``bandit_step`` are fixed
axes and baselines, never compared.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

DTYPE = torch.float64
FUNCTION = "score_centering_loss"

# The head sweep: the statement's six-token prefix. p = softmax(LOGITS), q is the sampler's distribution; the
# head of size k is the top-k of q, ties broken by the lower token id.
LOGITS = (1.0, 0.3, -0.5, 0.8, -1.2, 0.1)
Q = (0.05, 0.10, 0.05, 0.60, 0.05, 0.15)
SWEEP_MODES = {"none": ("none", None, None), "tis": ("tis", 0.0, 1.5), "mis": ("mis", 0.5, 2.0)}

# The bandit: two actions both rewarded, action 0 by BANDIT_GAP (relative) more, exact expectations under the
# sampler q, plain gradient steps.
BANDIT_STEPS = 30
BANDIT_LR = 1.0
BANDIT_GAP = 0.1

Loss = Callable[..., Any]


# ---------------------------------------------------------------- what the function returned


def _losses(output: object, rows: int) -> Tensor:
    """The learner's per-row losses as a float64 [rows] tensor, or a TypeError/ValueError saying what is wrong."""
    if not isinstance(output, Tensor):
        raise TypeError(f"{FUNCTION} must return a torch.Tensor, got {type(output).__name__}")
    if not output.is_floating_point():
        raise TypeError(f"{FUNCTION} must return a floating tensor, got dtype {output.dtype}")
    if tuple(output.shape) != (rows,):
        raise ValueError(f"{FUNCTION} must return one loss per row, shape [{rows}], got {list(output.shape)}")
    return output.detach().to(DTYPE)


def _call(loss: Loss, logits: Tensor, q: Tensor, head: list[int], advantage: Tensor,
          mode: tuple) -> tuple[Tensor, Tensor]:
    """Every token y of the vocabulary sampled at the prefix `logits` [V], head `head`, row y with the advantage
    advantage[y]: (E_q[grad loss] with respect to the prefix's logits [V], by autograd through the function, and
    the losses [V])."""
    vocab = logits.shape[0]
    name, low, high = mode
    ids = torch.tensor(head, dtype=torch.long)
    log_q = torch.log(q)  # [V]
    prefix = logits.detach().clone().requires_grad_(True)  # [V], shared by every row
    expected, output = loss.paired(
        q,  # the cotangent of the [V] losses: row y weighted by its probability under the sampler
        logits=prefix[None, :].expand(vocab, vocab).clone(),
        tokens=torch.arange(vocab),
        rollout_logp=log_q.clone(),
        head_ids=ids[None, :].expand(vocab, len(head)).clone(),
        rollout_head_logp=log_q[ids][None, :].expand(vocab, len(head)).clone(),
        advantages=advantage.clone(),
        mask=torch.ones(vocab, dtype=torch.bool),
        mode=name, low=low, high=high,
    )
    losses = _losses(output, vocab)
    (gradient,) = torch.autograd.grad(expected, prefix, materialize_grads=True)  # [V]; 0 if cut from the graph
    return gradient, losses


def _weights(losses: Tensor, logits: Tensor, advantage: Tensor) -> Tensor:
    """w_y for every token [V], from the losses of an empty head: loss(y) = -A w_y log p_y."""
    return -losses / (advantage * torch.log_softmax(logits, dim=0))


def _tail_coefficient(losses: Tensor, logits: Tensor, q: Tensor, head: list[int], advantage: Tensor,
                      weights: Tensor) -> float:
    """alpha' from the losses of head `head`: S_H averaged over the sampled tokens with weights q, then solved."""
    logp = torch.log_softmax(logits, dim=0)
    head_sum = float((q * (losses / advantage + weights * logp)).sum())
    weighted_q = q[head] * weights[head]  # [k]
    return (float((weighted_q * logp[head]).sum()) - head_sum) / float((logp[head].exp() * logp[head]).sum())


# ---------------------------------------------------------------- part 1: the head sweep


def head_sweep(rng: torch.Generator, score_centering_loss: Loss) -> dict[str, Tensor]:
    """|E_q grad loss| for heads of size k = 0..6 (top-k of q) in each mode, and the tail coefficient read back."""
    vocab = len(LOGITS)
    order = torch.randperm(vocab, generator=rng)  # where each of the statement's tokens sits in this vocabulary
    shift = float(torch.rand(1, generator=rng, dtype=DTYPE)) * 4 - 2  # log_softmax ignores it
    size = 0.5 + float(torch.rand(1, generator=rng, dtype=DTYPE))
    sign = 1.0 if float(torch.rand(1, generator=rng)) < 0.5 else -1.0
    advantage = torch.full((vocab,), sign * size, dtype=DTYPE)  # one advantage A for every sampled token
    logits, q = torch.zeros(vocab, dtype=DTYPE), torch.zeros(vocab, dtype=DTYPE)
    logits[order] = torch.tensor(LOGITS, dtype=DTYPE) + shift
    q[order] = torch.tensor(Q, dtype=DTYPE)
    ranked = [int(order[v]) for v in sorted(range(vocab), key=lambda v: (-Q[v], v))]
    series: dict[str, Tensor] = {"sweep_k": torch.arange(vocab + 1, dtype=DTYPE),
                                 "sweep_k_head": torch.arange(1, vocab + 1, dtype=DTYPE)}
    for name, mode in SWEEP_MODES.items():
        gradient, losses = _call(score_centering_loss, logits, q, [], advantage, mode)
        weights = _weights(losses, logits, advantage)
        norms, alphas = [float(gradient.norm())], []
        for k in range(1, vocab + 1):
            gradient, losses = _call(score_centering_loss, logits, q, ranked[:k], advantage, mode)
            norms.append(float(gradient.norm()))
            alphas.append(_tail_coefficient(losses, logits, q, ranked[:k], advantage, weights))
        series[f"sweep_{name}"] = torch.tensor(norms, dtype=DTYPE) / size  # per unit of |A|, as the statement's table
        series[f"alpha_{name}"] = torch.tensor(alphas, dtype=DTYPE)
    return series


# ---------------------------------------------------------------- part 2: the learning signal kept


def _bandit_step(loss: Loss, logits: Tensor, q: Tensor, rewards: Tensor, centred: bool) -> Tensor:
    """One exact expected gradient step on the two logits, action y rewarded rewards[y]; the centred loss uses the
    head {action 0}, a one-token tail, so its reconstruction of q is exact."""
    gradient, _ = _call(loss, logits, q, [0] if centred else [], rewards, ("none", None, None))
    return logits - BANDIT_LR * gradient


def _on_policy_step(logits: Tensor, rewards: Tensor) -> Tensor:
    """The exact policy-gradient ascent step E_p[A s], samples from p itself: the baseline no check compares."""
    p = torch.softmax(logits, dim=0)
    scores = torch.eye(2, dtype=DTYPE) - p[None, :]  # [2, 2]: row y is s_y = e_y - p
    return logits + BANDIT_LR * (p * rewards) @ scores


def bandit(rng: torch.Generator, score_centering_loss: Loss) -> dict[str, Tensor]:
    """p(action 0) over plain gradient steps on the expected loss, samples from q, both actions rewarded and
    action 0 a little more: the uncentred loss (empty head) drifts toward q against the rewards; the centred one
    (head {action 0}) moves toward the better action, as the on-policy gradient does."""
    p0 = 0.55 + 0.25 * float(torch.rand(1, generator=rng, dtype=DTYPE))
    q0 = 0.25 + 0.2 * float(torch.rand(1, generator=rng, dtype=DTYPE))
    better = 0.8 + 0.4 * float(torch.rand(1, generator=rng, dtype=DTYPE))
    rewards = torch.tensor([better, better * (1.0 - BANDIT_GAP)], dtype=DTYPE)  # an easy prompt: both rewarded
    q = torch.tensor([q0, 1.0 - q0], dtype=DTYPE)
    start = torch.tensor([math.log(p0), math.log(1.0 - p0)], dtype=DTYPE)
    trajectories = {}
    for name, centred in (("uncentered", False), ("centered", True)):
        logits, probs = start.clone(), [p0]
        for _ in range(BANDIT_STEPS):
            logits = _bandit_step(score_centering_loss, logits, q, rewards, centred)
            probs.append(float(torch.softmax(logits, dim=0)[0]))
        trajectories[name] = torch.tensor(probs, dtype=DTYPE)
    logits, on_policy = start.clone(), [p0]
    for _ in range(BANDIT_STEPS):
        logits = _on_policy_step(logits, rewards)
        on_policy.append(float(torch.softmax(logits, dim=0)[0]))
    return {
        "bandit_step": torch.arange(BANDIT_STEPS + 1, dtype=DTYPE),
        "bandit_uncentered": trajectories["uncentered"],
        "bandit_centered": trajectories["centered"],
        "bandit_trajectories": torch.cat([trajectories["uncentered"], trajectories["centered"]]),
        "bandit_on_policy": torch.tensor(on_policy, dtype=DTYPE),
        "bandit_q": torch.full((BANDIT_STEPS + 1,), q0, dtype=DTYPE),
    }


PARTS = (head_sweep, bandit)
