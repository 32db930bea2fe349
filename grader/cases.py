"""The unit of a differential check: one call of one contract function, built by a problem's generators."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass(frozen=True)
class Call:
    """Call `function(**kwargs)`; make `requires_grad` inputs leaves that require grad; then maybe backward.

    `label` names the case for the learner ("float32 B=3 L=5, ratio exactly on 1 - clip_low").
    `hidden` marks a case whose inputs a learner-facing view must not show.
    """

    function: str
    kwargs: Mapping[str, Any]
    label: str
    requires_grad: tuple[str, ...] = ()
    backward: bool = False
    hidden: bool = field(default=False, compare=False)

    def request(self) -> dict[str, Any]:
        return {
            "op": "call",
            "function": self.function,
            "kwargs": dict(self.kwargs),
            "requires_grad": list(self.requires_grad),
            "backward": self.backward,
        }


CaseGenerator = Callable[[torch.Generator], list[Call]]


def generator_for(seed: int, name: str) -> torch.Generator:
    """A torch RNG seeded from (seed, name), stable across runs, platforms and Python hash seeds."""
    digest = hashlib.sha256(f"{seed}:{name}".encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "big") & ((1 << 63) - 1))
