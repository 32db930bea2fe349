"""The unit of a differential check: one call of one contract function, built by a problem's generators."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, cast, get_args

import torch

from grader.model.spec import Aspect
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
    `compare`, when set, narrows the aspects its check judges on this call to those it names: a partner call,
    there only so that a constant answer cannot pass its group, is judged on answering as the statement's
    function does (it returns, in the right type and shape, and responds to its inputs), never on values, so a
    group loses its points only for the partner's failure on the check's own clause.
    """

    function: str
    kwargs: Mapping[str, Any]
    label: str
    requires_grad: tuple[str, ...] = ()
    backward: bool | torch.Tensor = False
    hidden: bool = field(default=False, compare=False)
    group: str | None = field(default=None, compare=False)
    compare: tuple[Aspect, ...] | None = field(default=None, compare=False)

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
        narrowed = None if self.compare is None else list(self.compare)
        return {**self.request(), "label": self.label, "hidden": self.hidden, "group": self.group, "compare": narrowed}

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
            _aspects(data.get("compare")),
        )

    def aspects(self, check: Sequence[Aspect]) -> list[Aspect]:
        """The aspects a check comparing `check` judges on this call: all of them, or those `compare` keeps."""
        return list(check) if self.compare is None else [a for a in check if a in self.compare]

    def as_partner(self) -> Call:
        """This call judged as a partner: on `PARTNER_ASPECTS` only."""
        return replace(self, compare=PARTNER_ASPECTS)


# What a partner call is judged on: it answers as the statement's function does, whatever its values.
PARTNER_ASPECTS: tuple[Aspect, ...] = (
    "type",
    "shape",
    "dtype",
    "device",
    "requires_grad",
    "backward",
    "connected",
    "responds",
)


def _aspects(data: Any) -> tuple[Aspect, ...] | None:
    """A call's narrowed aspects read back from plain data: a list of aspect names, or None."""
    if data is None:
        return None
    known = get_args(Aspect)
    if not isinstance(data, (list, tuple)) or not all(isinstance(a, str) and a in known for a in data):
        raise ValueError("a call's compare must be a list of aspect names")
    return tuple(cast(Aspect, a) for a in data)


CaseGenerator = Callable[[torch.Generator], list[Call]]


def generator_for(seed: int, name: str) -> torch.Generator:
    """A torch RNG seeded from (seed, name), stable across runs, platforms and Python hash seeds."""
    digest = hashlib.sha256(f"{seed}:{name}".encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "big") & ((1 << 63) - 1))
