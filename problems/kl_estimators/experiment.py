"""T3 toy experiment for kl_estimators: k1, k2, k3 on a categorical policy drifting away from a fixed reference.

The judge runs `drift_sweep(rng, kl_penalty=..., kl_loss=...)` with the learner's functions (each call answered by
the sandboxed learner) or the reference's; `rng`, seeded by the grading seed, draws pi_ref, the drift direction and
the samples. pi_ref = softmax(phi); pi = softmax(phi + s u). At each drift s, N actions x ~ pi form a [B, L] batch
with logp = log pi(x), ref_logp = log pi_ref(x). Per estimator: value_k, the token mean from kl_penalty; spread_k, the
std of its per-token values; from kl_loss's gradient in logp times the score e_x - pi, each sample's gradient in the
logits, whose mean's distance from grad KL = pi (log(pi / pi_ref) - KL) relative to |grad KL| is grad_bias_k (about 1
for k1, 0 for k2, for k3 that of E[(1 - r)(e_x - pi)] = pi - pi_ref) and whose spread over |grad KL| is grad_spread_k.
The checks compare toy_k1, toy_k2, toy_k3, each estimator's four curves end to end. kl_exact and theory_* (the
expected gradients' distances) are computed privately.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

DTYPE = torch.float64
ACTIONS = 6
ROWS, COLS = 32, 64  # N = 2048 samples per drift
DRIFTS = 12
ESTIMATORS = ("k1", "k2", "k3")


def _tensor(name: str, value: object, shape: tuple[int, ...]) -> Tensor:
    """The learner's answer as a plain float64 tensor of `shape`, or a clear error."""
    if not isinstance(value, Tensor) or not value.is_floating_point():
        raise TypeError(f"{name} must return a floating torch.Tensor, got {type(value).__name__}")
    if tuple(value.shape) != shape:
        raise ValueError(f"{name} must return shape {list(shape)}, got {list(value.shape)}")
    return torch.as_tensor(value, device="cpu").detach().to(DTYPE).clone().as_subclass(Tensor)


def _token_grads(kl_loss: Callable[..., Any], logp: Tensor, ref_logp: Tensor, mask: Tensor, estimator: str) -> Tensor:
    """d loss / d logp per token, [N]; zeros where the loss is not connected to logp."""
    leaf = logp.clone().requires_grad_(True)
    loss = kl_loss(logp=leaf, ref_logp=ref_logp.clone(), mask=mask.clone(), estimator=estimator)
    _tensor("kl_loss", loss, ())
    (grad,) = torch.autograd.grad(loss, leaf, allow_unused=True) if loss.requires_grad else (None,)
    return torch.zeros(logp.numel(), dtype=DTYPE) if grad is None else grad.detach().reshape(-1)


def drift_sweep(rng: torch.Generator, kl_penalty: Callable[..., Any], kl_loss: Callable[..., Any]) -> dict[str, Tensor]:
    phi = torch.randn(ACTIONS, generator=rng, dtype=DTYPE) * 0.5
    direction = torch.randn(ACTIONS, generator=rng, dtype=DTYPE)
    direction = direction / direction.norm()
    drifts = torch.linspace(0.25, 3.0, DRIFTS, dtype=DTYPE)
    log_ref = torch.log_softmax(phi, dim=0)  # [K]
    series: dict[str, list[float]] = {}
    mask = torch.ones(ROWS, COLS, dtype=torch.bool)
    n = ROWS * COLS
    for s in drifts.tolist():
        log_pi = torch.log_softmax(phi + s * direction, dim=0)  # [K]
        pi, ref = log_pi.exp(), log_ref.exp()
        exact = float((pi * (log_pi - log_ref)).sum())
        grad_kl = pi * (log_pi - log_ref - exact)  # [K], d KL(pi || pi_ref) / d theta
        norm = float(grad_kl.norm())
        x = torch.multinomial(pi, n, replacement=True, generator=rng)  # [N]
        score = torch.nn.functional.one_hot(x, ACTIONS).to(DTYPE) - pi  # [N, K], d log pi(x) / d theta
        logp, ref_logp = log_pi[x].reshape(ROWS, COLS), log_ref[x].reshape(ROWS, COLS)
        row = {"kl_exact": exact, "theory_k1": 1.0, "theory_k2": 0.0,
               "theory_k3": float((pi - ref - grad_kl).norm()) / norm}  # |E[grad k] - grad KL| / |grad KL|
        for est in ESTIMATORS:
            args = {"logp": logp.clone(), "ref_logp": ref_logp.clone(), "mask": mask.clone(), "estimator": est}
            values = _tensor("kl_penalty", kl_penalty(**args, reduction="none"), (ROWS, COLS)).reshape(-1)
            per_sample = n * _token_grads(kl_loss, logp, ref_logp, mask, est)[:, None] * score  # [N, K]
            mean = per_sample.mean(dim=0)
            row |= {f"value_{est}": float(_tensor("kl_penalty", kl_penalty(**args, reduction="mean"), ())),
                    f"spread_{est}": float(values.std()), f"grad_bias_{est}": float((mean - grad_kl).norm()) / norm,
                    f"grad_spread_{est}": float(((per_sample - mean) ** 2).sum(dim=1).mean().sqrt()) / norm}
        for name, value in row.items():
            series.setdefault(name, []).append(value)
    out = {"drift": drifts, **{name: torch.tensor(v, dtype=DTYPE) for name, v in series.items()}}
    for est in ESTIMATORS:  # what a check compares: one series per estimator, [value, spread, grad_bias, grad_spread]
        out[f"toy_{est}"] = torch.cat([out[f"{q}_{est}"] for q in ("value", "spread", "grad_bias", "grad_spread")])
    return out


PARTS = (drift_sweep,)
