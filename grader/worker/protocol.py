"""Wire format between judge and worker, and the observation of one call, shared by both sides.

Frames are an 8-byte big-endian length followed by a `torch.save` payload of plain data (dicts, lists,
str, int, float, bool, None and plain tensors), read back with `weights_only=True` on either side.
The judge runs the reference through the same `observe_call` so both are measured the same way.
"""

from __future__ import annotations

import io
import os
import traceback
from collections.abc import Callable, Mapping
from typing import Any

import torch

from .framing import HEADER as HEADER  # re-exported: the worker speaks through this module alone
from .framing import ProtocolError as ProtocolError

PYTHON_SCALARS = (bool, int, float, str, type(None))


def encode(message: Mapping[str, Any]) -> bytes:
    buffer = io.BytesIO()
    torch.save(dict(message), buffer)
    payload = buffer.getvalue()
    return HEADER.pack(len(payload)) + payload


def decode(payload: bytes) -> dict[str, Any]:
    try:
        message = torch.load(io.BytesIO(payload), weights_only=True)
    except Exception as exc:  # weights_only refuses anything but plain data
        raise ProtocolError(f"unreadable frame: {type(exc).__name__}: {exc}"[:300]) from None
    if not isinstance(message, dict):
        raise ProtocolError("frame is not a dict")
    return message


def write_frame(fd: int, message: Mapping[str, Any]) -> None:
    data = memoryview(encode(message))
    while data:
        written = os.write(fd, data)
        data = data[written:]


def read_exact(fd: int, size: int) -> bytes:
    chunks, remaining = [], size
    while remaining:
        chunk = os.read(fd, min(remaining, 1 << 20))
        if not chunk:
            raise ProtocolError("stream closed mid-frame")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def read_frame(fd: int, max_bytes: int) -> dict[str, Any]:
    (size,) = HEADER.unpack(read_exact(fd, HEADER.size))
    if size > max_bytes:
        raise ProtocolError(f"frame of {size} bytes exceeds the {max_bytes}-byte limit")
    return decode(read_exact(fd, size))


# ----------------------------------------------------------------------------- observations


def describe(value: Any) -> dict[str, Any]:
    """Plain-data description of a returned value; tensors are copied out of any autograd graph."""
    if type(value) is torch.Tensor:
        return {
            "kind": "tensor",
            "value": value.detach().clone(),  # clone keeps dtype, shape and device
            "requires_grad": bool(value.requires_grad),
            "has_grad_fn": value.grad_fn is not None,
            "device": str(value.device),
        }
    if isinstance(value, torch.Tensor):
        return {"kind": "other", "type": f"Tensor subclass {type(value).__qualname__}"}
    if isinstance(value, (tuple, list)):
        return {"kind": "sequence", "type": type(value).__name__, "items": [describe(v) for v in value]}
    if isinstance(value, PYTHON_SCALARS):
        return {"kind": "python", "type": type(value).__name__, "value": value}
    return {"kind": "other", "type": type(value).__qualname__}


def describe_exception(exc: BaseException, source: str | None = None) -> dict[str, Any]:
    """Type, base classes, message and, when `source` is given, the learner's own frames: where in their
    file the exception passed, innermost last (frames of torch or the standard library are left out)."""
    names = [cls.__name__ for cls in type(exc).__mro__]
    described: dict[str, Any] = {"type": type(exc).__name__, "bases": names, "message": str(exc)[:500]}
    if source is not None:
        try:
            frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == source]
        except Exception:  # a traceback the learner tampered with is left out, not fatal
            frames = []
        described["where"] = "; ".join(
            f"line {f.lineno} in {f.name}: {(f.line or '').strip()[:120]}" for f in frames[-3:]
        )[:600]
    return described


def own_copy(tensor: torch.Tensor) -> torch.Tensor:
    """A copy with a storage of its own and the same size, strides and offset (a non-contiguous view stays one).

    The calls of one request arrive in one frame, where tensors two calls share also share storage: without a
    copy, a function that modifies an input in place would change what a later call sees.
    """
    copy = torch.empty(0, dtype=tensor.dtype, device=tensor.device)
    copy.set_(tensor.untyped_storage().clone(), tensor.storage_offset(), tensor.size(), tensor.stride())
    return copy


def _prepare_inputs(kwargs: Mapping[str, Any], requires_grad: list[str]) -> dict[str, Any]:
    inputs = {name: own_copy(value) if type(value) is torch.Tensor else value for name, value in kwargs.items()}
    for name in requires_grad:
        inputs[name] = inputs[name].detach().requires_grad_(True)
    return inputs


def _backward(output: Any, inputs: Mapping[str, Any], requires_grad: list[str]) -> dict[str, Any]:
    """Backward from the output, or from the first item of a returned tuple (a loss returned with statistics)."""
    if isinstance(output, (tuple, list)) and output and type(output[0]) is torch.Tensor:
        output = output[0]
    if type(output) is not torch.Tensor:
        return {"backward_error": {"type": "TypeError", "bases": ["TypeError"], "message": "output is not a Tensor"}}
    try:
        (output if output.dim() == 0 else output.sum()).backward()
    except BaseException as exc:  # any failure of backward is an observation
        return {"backward_error": describe_exception(exc)}
    grads = {}
    for name in requires_grad:
        grad = inputs[name].grad
        grads[name] = None if grad is None else grad.detach().clone()
    return {"grads": grads}


def observe_call(
    function: Callable[..., Any],
    kwargs: Mapping[str, Any],
    requires_grad: list[str],
    backward: bool,
    source: str | None = None,
) -> dict[str, Any]:
    """Call `function(**kwargs)` and record what came back, what backward gave, and the inputs after.

    `source` names the learner's file, whose frames an exception's description then lists."""
    inputs = _prepare_inputs(kwargs, requires_grad)
    observation: dict[str, Any] = {}
    try:
        output = function(**inputs)
    except BaseException as exc:  # SystemExit from learner code is an observation too
        observation["raised"] = describe_exception(exc, source)
    else:
        observation["output"] = describe(output)
        if backward:
            observation.update(_backward(output, inputs, requires_grad))
    observation["inputs_after"] = {
        name: value.detach() for name, value in inputs.items() if type(value) is torch.Tensor
    }
    return observation
