"""Generic misreadings: departures any problem's solution can make, each a transform of its functions with a stock
explanation that a problem's declaration of the misreading may specialise.

A transform wraps a contract function, so it composes with any known-wrong solution's edits: float32 arithmetic
held together with constant groups left unhandled is the constant-groups solution, run in float32. A problem says
which generic misreadings apply to it and which clauses own each (see `model.misconceptions`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import torch

Function = Callable[..., Any]
GenericName = Literal["float32_arithmetic", "outputs_detached"]


@dataclass(frozen=True)
class Generic:
    """One problem-independent misreading: its stock explanation and the transform that makes it."""

    name: GenericName
    explanation: str
    transform: Callable[[Function], Function]


def _map_tensors(value: Any, change: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """`value` with every tensor in it changed, through tuples and lists, their type kept."""
    if type(value) is torch.Tensor:
        return change(value)
    if isinstance(value, (tuple, list)):
        return type(value)(_map_tensors(item, change) for item in value)
    return value


def in_float32(function: Function) -> Function:
    """Float64 tensor inputs computed in float32, and float32 results handed back in float64: the `.float()` at
    the top and the `.to(x.dtype)` at the bottom of a port written for float32 training."""

    @functools.wraps(function)
    def wrapped(**kwargs: Any) -> Any:
        widened = any(type(v) is torch.Tensor and v.dtype == torch.float64 for v in kwargs.values())
        if not widened:
            return function(**kwargs)
        lowered = {
            name: value.to(torch.float32) if type(value) is torch.Tensor and value.dtype == torch.float64 else value
            for name, value in kwargs.items()
        }
        return _map_tensors(function(**lowered), lambda t: t.to(torch.float64) if t.dtype == torch.float32 else t)

    return wrapped


def detached(function: Function) -> Function:
    """Every tensor of the result cut from the graph."""

    @functools.wraps(function)
    def wrapped(**kwargs: Any) -> Any:
        return _map_tensors(function(**kwargs), torch.Tensor.detach)

    return wrapped


CATALOGUE: dict[GenericName, Generic] = {
    generic.name: generic
    for generic in (
        Generic(
            "float32_arithmetic",
            "Float64 inputs must be computed in float64. Converting them to float32 first, as code written for "
            "float32 training does, loses about nine digits that the result cannot get back.",
            in_float32,
        ),
        Generic(
            "outputs_detached",
            "The results must stay connected to the inputs' graph where the statement says gradients flow. "
            "Detaching them, or computing them under no_grad, stops every gradient through them.",
            detached,
        ),
    )
}
