"""Generic misreadings: departures any problem's solution can make, each a transform of its functions with a stock
explanation that a problem's declaration of the misreading may specialise.

A transform wraps a contract function, so it composes with any known-wrong solution's edits: float32 arithmetic
held together with constant groups left unhandled is the constant-groups solution, run in float32. A problem says
which generic misreadings apply to it and which clauses own each (see `model.misconceptions`).

The transforms name nothing outside this module but torch, so that `variant_source` can write the reference with
one of them applied as a file a learner could have written: the generic-only variant graded like any submission.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch

Function = Callable[..., Any]
GenericName = Literal[
    "float32_arithmetic",
    "outputs_detached",
    "input_mutated",
    "output_dtype_changed",
    "padding_multiplied_by_mask",
    "mask_dtype_promoted",
    "empty_selection_zero_over_zero",
    "validation_skipped",
]


@dataclass(frozen=True)
class Generic:
    """One problem-independent misreading: its stock explanation and the transform that makes it.

    `combined_unseen`: it is combined with other misreadings even where it explains no failing case alone (float32
    arithmetic shows only through another misreading's answers); the others join a combination only when they
    explain something alone."""

    name: GenericName
    explanation: str
    transform: Callable[[Function], Function]
    combined_unseen: bool = False


def _map_tensors(value: Any, change: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """`value` with every tensor in it changed, through tuples and lists, their type kept."""
    if type(value) is torch.Tensor:
        return change(value)
    if isinstance(value, (tuple, list)):
        return type(value)(_map_tensors(item, change) for item in value)
    return value


def _masked(kwargs: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The first floating tensor input and the positions a mask input leaves out of it (True where left out), the
    mask's shape being the input's leading dimensions; None when the call has no such pair."""
    tensors = [v for v in kwargs.values() if type(v) is torch.Tensor]
    masks = [v for k, v in kwargs.items() if type(v) is torch.Tensor and "mask" in k]
    for value in tensors:
        if not value.is_floating_point():
            continue
        for mask in masks:
            if mask.dim() >= 1 and value.shape[: mask.dim()] == mask.shape:
                left_out = mask == 0  # [*mask.shape]
                return value, left_out.reshape(*left_out.shape, *[1] * (value.dim() - mask.dim()))
    return None


def in_float32(function: Function) -> Function:
    """Float64 tensor inputs computed in float32, and float32 results handed back in the first floating input's
    dtype: the `.float()` at the top and the `.to(x.dtype)` at the bottom of a port written for float32 training (a
    float64 mask beside float32 values gives float32 results, as such a port's do)."""

    @functools.wraps(function)
    def wrapped(**kwargs: Any) -> Any:
        if not any(type(v) is torch.Tensor and v.dtype == torch.float64 for v in kwargs.values()):
            return function(**kwargs)
        lowered = {
            name: value.to(torch.float32) if type(value) is torch.Tensor and value.dtype == torch.float64 else value
            for name, value in kwargs.items()
        }
        result = function(**lowered)
        first = next((v for v in kwargs.values() if type(v) is torch.Tensor and v.is_floating_point()), None)
        if first is None or first.dtype != torch.float64:
            return result
        return _map_tensors(result, lambda t: t.to(torch.float64) if t.dtype == torch.float32 else t)

    return wrapped


def detached(function: Function) -> Function:
    """Every tensor of the result cut from the graph."""

    @functools.wraps(function)
    def wrapped(**kwargs: Any) -> Any:
        return _map_tensors(function(**kwargs), torch.Tensor.detach)

    return wrapped


def mutating(function: Function) -> Function:
    """The first floating tensor input overwritten with 0 where a mask leaves it out (the padding cleaned in place),
    or everywhere when no mask comes with it: the results are the function's own."""

    @functools.wraps(function)
    def wrapped(**kwargs: Any) -> Any:
        result = function(**kwargs)
        found = _masked(kwargs)
        if found is not None:
            value, left_out = found
            value.data.masked_fill_(left_out, 0.0)  # through .data: a later backward sees no version change
        else:
            first = [v for v in kwargs.values() if type(v) is torch.Tensor and v.is_floating_point()]
            if first:
                first[0].data.zero_()
        return result

    return wrapped


def _other_dtype(tensor: torch.Tensor) -> torch.Tensor:
    """A bool result as uint8, an integer one in the other integer width; floating ones unchanged."""
    if tensor.dtype == torch.bool:
        return tensor.to(torch.uint8)
    if tensor.dtype == torch.int64:
        return tensor.to(torch.int32)
    if tensor.dtype == torch.int32:
        return tensor.to(torch.int64)
    return tensor


def retyped(function: Function) -> Function:
    """Bool results handed back as uint8, integer ones in the other integer width."""

    @functools.wraps(function)
    def wrapped(**kwargs: Any) -> Any:
        return _map_tensors(function(**kwargs), _other_dtype)

    return wrapped


def multiplied_by_mask(function: Function) -> Function:
    """Padding removed by multiplying with the mask instead of selecting: a NaN or infinite value where the mask is
    0 gives 0 * NaN = NaN in each result that covers it (the same position, its row, or a 0-dim total)."""

    @functools.wraps(function)
    def wrapped(**kwargs: Any) -> Any:
        result = function(**kwargs)
        found = _masked(kwargs)
        if found is None:
            return result
        value, left_out = found
        poison = torch.where(left_out & ~torch.isfinite(value.detach()), float("nan"), 0.0)  # [*value.shape]

        def spoil(tensor: torch.Tensor) -> torch.Tensor:
            if not tensor.is_floating_point():
                return tensor
            if tensor.dim() == 0:
                return tensor + poison.sum().to(tensor.dtype)
            if tensor.shape == value.shape[: tensor.dim()]:
                trailing = list(range(tensor.dim(), value.dim()))
                return tensor + (poison.sum(trailing) if trailing else poison).to(tensor.dtype)
            return tensor

        return _map_tensors(result, spoil)

    return wrapped


def promoted_by_mask(function: Function) -> Function:
    """A floating mask's dtype carried into the results, as `x * mask` carries it: a float32 input under a float64
    mask gives float64 results (computed in float32 and widened); bool and integer masks change nothing."""

    @functools.wraps(function)
    def wrapped(**kwargs: Any) -> Any:
        result = function(**kwargs)
        masks = [v for k, v in kwargs.items() if type(v) is torch.Tensor and "mask" in k and v.is_floating_point()]
        if not masks:
            return result
        wide = masks[0].dtype
        return _map_tensors(result, lambda t: t.to(torch.promote_types(t.dtype, wide)) if t.is_floating_point() else t)

    return wrapped


def unguarded_mean(function: Function) -> Function:
    """A mean over an empty selection left as 0 / 0: where the mask selects nothing, each 0-dim floating result is
    NaN, and so is its gradient."""

    @functools.wraps(function)
    def wrapped(**kwargs: Any) -> Any:
        result = function(**kwargs)
        found = _masked(kwargs)
        if found is None or bool((~found[1]).any()):
            return result
        return _map_tensors(
            result, lambda t: t * float("nan") if t.dim() == 0 and t.is_floating_point() else t
        )  # x * NaN keeps the graph, and its gradient is NaN as 1 / 0's is

    return wrapped


def unvalidated(function: Function) -> Function:
    """No argument checked: where the function raises ValueError, it returns None instead of refusing."""

    @functools.wraps(function)
    def wrapped(**kwargs: Any) -> Any:
        try:
            return function(**kwargs)
        except ValueError:
            return None

    return wrapped


CATALOGUE: dict[GenericName, Generic] = {
    generic.name: generic
    for generic in (
        Generic(
            "float32_arithmetic",
            "Float64 inputs must be computed in float64. Converting them to float32 first, as code written for "
            "float32 training does, loses about nine digits that the result cannot get back.",
            in_float32,
            combined_unseen=True,
        ),
        Generic(
            "outputs_detached",
            "The results must stay connected to the inputs' graph where the statement says gradients flow. "
            "Detaching them, or computing them under no_grad, stops every gradient through them.",
            detached,
            combined_unseen=True,
        ),
        Generic(
            "input_mutated",
            "No input may be modified: the caller still holds it. Cleaning padding in place, or any `x[...] = v` "
            "or `x.op_()` on an input or a view of it, changes the caller's tensor too.",
            mutating,
        ),
        Generic(
            "output_dtype_changed",
            "A result keeps the dtype the contract names: a bool mask stays bool and integer indices keep their "
            "width. Returning uint8, float or the other integer width breaks code that indexes with it.",
            retyped,
        ),
        Generic(
            "padding_multiplied_by_mask",
            "Padding must be selected away with torch.where, not multiplied by the mask: 0 * NaN and 0 * inf are "
            "NaN, so NaN or infinite padding spoils every result it is summed into.",
            multiplied_by_mask,
        ),
        Generic(
            "mask_dtype_promoted",
            "A mask of another floating dtype must not change the result's dtype, which follows the inputs'. "
            "Multiplying by a float64 mask promotes float32 values to float64; convert the mask to bool first.",
            promoted_by_mask,
        ),
        Generic(
            "empty_selection_zero_over_zero",
            "A mean over an empty selection is 0, as the statement asks. Dividing by the count without max(1, n) "
            "gives 0 / 0 = NaN, and NaN gradients, when the mask selects nothing.",
            unguarded_mean,
        ),
        Generic(
            "validation_skipped",
            "Invalid arguments must raise ValueError before anything is computed. Leaving the checks out lets a "
            "bad argument through silently, and the caller gets a result that means nothing.",
            unvalidated,
        ),
    )
}

# What the generated variant needs besides the transform itself, in order.
_HELPERS: tuple[Callable[..., Any], ...] = (_map_tensors, _masked, _other_dtype)
_PREAMBLE = (
    "import functools\nimport types\nfrom collections.abc import Callable\nfrom typing import Any\n\nimport torch\n\n"
    "Function = Callable[..., Any]\n"
)
# Each function's own copy, reading the module's names as they were before any was wrapped: one contract function
# calling another calls the reference's, as the transform applied to each function alone does on the trusted side.
_UNWRAPPED = (
    "_UNWRAPPED = {{name: types.FunctionType(f.__code__, dict(globals()), name, f.__defaults__, f.__closure__) "
    "for name, f in ((n, globals()[n]) for n in {names!r})}}\n"
    "for _function in _UNWRAPPED.values():\n"
    "    _function.__kwdefaults__ = globals()[_function.__name__].__kwdefaults__\n"
)


def variant_source(reference: str, name: GenericName, functions: Sequence[str]) -> str:
    """`reference` (a solution's source) with generic misreading `name` applied to each of `functions`: a file that
    holds that misreading and nothing else, graded as a learner's file is."""
    transform = CATALOGUE[name].transform
    parts = [reference.rstrip(), "", "", f"# The generic misreading {name}, applied to every contract function.", ""]
    parts.append(_PREAMBLE)
    parts += [inspect.getsource(helper) for helper in _HELPERS]
    parts.append(inspect.getsource(transform))
    parts.append(_UNWRAPPED.format(names=list(functions)))
    parts += [f"{function} = {transform.__name__}(_UNWRAPPED[{function!r}])" for function in functions]
    return "\n".join(parts) + "\n"
