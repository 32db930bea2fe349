"""The unit of a differential check: one call of one contract function, built by a problem's generators."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from grader.worker.messages import CallRequest, read_call


@dataclass(frozen=True)
class Call:
    """Call `function(**kwargs)`; make `requires_grad` inputs leaves that require grad; then maybe backward.

    `backward` is False, True (backward from the output, its sum when it is not 0-dim), or a tensor of the
    output's shape, its cotangent (backward from the sum of output * cotangent: the vector-Jacobian product).

    `label` names the case for the learner ("float32 B=3 L=5, ratio exactly on 1 - clip_low").
    `hidden` marks a case whose inputs a learner-facing view must not show.
    `group` ties calls that only count together: a check scores a group as passed only when every call in it
    passes. A call whose right answer is the same whatever its inputs (it must raise, its loss is zero, its
    inputs stay unchanged) is grouped with a call whose answer depends on them, so a constant answer earns
    nothing. Calls without a group count alone.
    """

    function: str
    kwargs: Mapping[str, Any]
    label: str
    requires_grad: tuple[str, ...] = ()
    backward: bool | torch.Tensor = False
    hidden: bool = field(default=False, compare=False)
    group: str | None = field(default=None, compare=False)

    def request(self) -> CallRequest:
        """What the worker needs to make the call: never the label, the group or whether it is hidden."""
        return {
            "function": self.function,
            "kwargs": dict(self.kwargs),
            "requires_grad": list(self.requires_grad),
            "backward": self.backward if isinstance(self.backward, torch.Tensor) else bool(self.backward),
        }

    def to_data(self) -> dict[str, Any]:
        """Plain data for the expectations cache and the learner pack (read back with `weights_only=True`): the
        request and what only the judge knows of the case."""
        return {**self.request(), "label": self.label, "hidden": self.hidden, "group": self.group}

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> Call:
        request = read_call(data)
        return cls(
            request["function"],
            dict(request["kwargs"]),
            str(data["label"]),
            tuple(request["requires_grad"]),
            request["backward"],
            bool(data.get("hidden", False)),
            data.get("group"),
        )


CaseGenerator = Callable[[torch.Generator], list[Call]]


def generator_for(seed: int, name: str) -> torch.Generator:
    """A torch RNG seeded from (seed, name), stable across runs, platforms and Python hash seeds."""
    digest = hashlib.sha256(f"{seed}:{name}".encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "big") & ((1 << 63) - 1))
