"""TIS and ICE-POP weights as slime's `vanilla_tis_function` and `icepop_function` compute them, adapted to this
exercise's signature.

Reproduces THUDM/slime at commit 624b824a898ab0ec1fcb4d373004c7f3852bf515:
- slime/backends/megatron_utils/loss.py lines 884-905 (`vanilla_tis_function`): `clamp(ratio, min=low, max=high)`
  and the clipped indicator `(weights != ratio).float()`, over every position (the loss mask acts only in the
  reducer);
- loss.py lines 908-931 (`icepop_function`): the ratio kept where `low <= ratio <= high`, 0 elsewhere, and the same
  float32 indicator;
- loss.py lines 987-989: the train log-probs the correction sees are detached;
- slime/utils/arguments.py lines 1066-1077: `--tis-clip` 2.0 and `--tis-clip-low` 0, shared by both functions;
- loss.py lines 1155-1163 with slime/backends/megatron_utils/cp_utils.py lines 67-81: the clipped fraction reduced
  with the default per-sample mean, `(x * mask).sum() / clamp_min(n_i, 1)` summed over samples, then divided by
  their number (loss.py lines 1353-1359).
The mode picks the function by name, as slime's `--custom-tis-function-path` does; slime validates no bound.
"""

from __future__ import annotations

import torch
from torch import Tensor

TIS_CLIP = 2.0  # --tis-clip
TIS_CLIP_LOW = 0.0  # --tis-clip-low, read by both functions


def _truncate(ratio: Tensor, low: float, high: float) -> Tensor:
    return torch.clamp(ratio, min=low, max=high)


def _icepop(ratio: Tensor, low: float, high: float) -> Tensor:
    return torch.where((ratio >= low) & (ratio <= high), ratio, torch.zeros_like(ratio))


RULES = {"tis": _truncate, "icepop": _icepop}


def behavior_weights(
    train_logp: Tensor,
    rollout_logp: Tensor,
    mask: Tensor,
    mode: str,
    low: float | None = None,
    high: float | None = None,
) -> tuple[Tensor, Tensor]:
    rule = RULES[mode]
    lo = TIS_CLIP_LOW if low is None else low
    hi = TIS_CLIP if high is None else high
    ratio = torch.exp(train_logp.detach() - rollout_logp)  # [B, L], every position
    weights = rule(ratio, lo, hi)
    changed = (weights != ratio).float()  # float32 whatever the input dtype
    counts = torch.clamp_min(mask.sum(dim=1), 1)  # [B]
    share = ((changed * mask).sum(dim=1) / counts).sum() / train_logp.shape[0]
    return weights, share.to(train_logp.dtype)
