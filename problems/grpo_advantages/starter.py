"""Starter for grpo_advantages: group-relative advantages (DeepSeekMath, section 4.1.2).

Implement the function below. Use `torch` and the standard library: numpy and torch's other dependencies
import too, but answers must be torch tensors and no check needs them. Read the statement for the formulas;
the docstring below is the exact contract the grader checks.
"""

from __future__ import annotations

import torch  # noqa: F401 - you will need it
from torch import Tensor


def grpo_advantages(
    rewards: Tensor, group_size: int, std_normalize: bool = True, eps: float = 1e-6, unbiased: bool = False
) -> Tensor:
    """Advantages of N responses whose rewards come in contiguous groups of `group_size`.

    Args:
        rewards: [N] floating (float32, float64, bfloat16 or float16), finite. Group g is
            rewards[g * G:(g + 1) * G] with G = group_size. It may require grad; the result must not.
        group_size: G, an int >= 1 (a bool or a float is rejected) that divides N.
        std_normalize: divide the centred rewards by sigma + eps when True; only centre them when False.
        eps: added to sigma, outside the square root; finite and >= 0 (0 is allowed).
        unbiased: sigma divides the summed squared deviations by G - 1 when True, by G when False.

    Returns:
        advantages: [N], rewards' dtype and device, detached (requires_grad False). Within each group:
            A_i = (R_i - mean) / (sigma + eps)   if std_normalize
            A_i = R_i - mean                     otherwise
        with sigma = sqrt(sum_j (R_j - mean)^2 / (G - ddof)), ddof = 1 if unbiased else 0.
        A group whose rewards are all equal gives exactly 0.0 for each of its members -- detect it from the
        rewards, since the rounded mean of equal values may differ from them. So G = 1 gives all zeros,
        never NaN, even with unbiased=True or eps=0. Empty rewards give an empty result.

    Raises:
        ValueError: rewards not a 1-D floating tensor, or holding NaN/inf; group_size not an int >= 1
            (bools rejected); N not a multiple of group_size; eps negative, NaN or infinite.

    rewards is never modified in place; non-contiguous rewards must work.
    """
    raise NotImplementedError
