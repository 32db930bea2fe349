"""Wire format between judge and worker, and the observation of one call, shared by both sides.

A frame is an 8-byte big-endian length, then a payload: a 4-byte magic, the 4-byte length of a JSON header,
the header, and the raw bytes of every tensor's storage, one after another in header order. The header holds
the message as JSON, in which each object is a tag of one key: `D` a dict (its items as pairs, so keys keep
their type), `T` a tuple, `F` a float JSON cannot write (NaN, infinities), `X` a dense CPU tensor (dtype,
size, stride, storage offset, storage bytes), `E` a tensor that cannot cross (sparse, meta, quantized, ...).
Decoding runs no code of the sender's choosing: JSON, then `torch.empty(...).set_()` over a copy of the bytes,
each tensor with a storage of its own whose size the frame itself accounts for. A frame from the other side
of the trust boundary is bounded before it is parsed: one pass over its header's tokens counts values, nesting
and the length of every string and number, and refuses the header at the first bound it crosses, so a header of
millions of empty lists costs a fraction of a second and no memory. Plain data only: dicts,
lists, tuples, str, int, float, bool, None and tensors. What decoding says of a bad frame quotes none of its
text or numbers: a worker that has seen a hidden case could otherwise pass it on in the judge's own message.
The judge runs the reference through the same `observe_call` so both are measured the same way.
"""

from __future__ import annotations

import ctypes
import json
import math
import os
import re
import struct
import time
import traceback
from collections.abc import Callable, Mapping
from typing import Any

import torch

from .framing import HEADER as HEADER  # re-exported: the worker speaks through this module alone
from .framing import FrameOverdue
from .framing import ProtocolError as ProtocolError

PYTHON_SCALARS = (bool, int, float, str, type(None))
MAGIC = b"PLF1"
HEAD = struct.Struct(">I")  # the JSON header's length
MAX_TENSORS = 4096  # tensors in one frame: one per input, output and gradient, and no message holds thousands
MAX_DIMS = 64  # of one tensor; the judge accepts far fewer in an answer
MAX_INT_BITS = 4096  # a larger int crosses as an infinity: its digits would cost the reader time, and none is valid
MAX_NESTING = 64  # JSON levels of a bounded header; an answer's descriptions nest a few levels of four each
# of one JSON string of a bounded header, as written: above the text one answer may carry (an 8 MiB exception
# type is the learner's malformed answer, read and refused by the judge), well under a frame
MAX_STRING_BYTES = 16 << 20
MAX_NUMBER_BYTES = len(str(-(1 << MAX_INT_BITS)))  # the longest number `encode` writes
DTYPES = {str(v).removeprefix("torch."): v for v in vars(torch).values() if isinstance(v, torch.dtype)}
FLOATS = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


# what a frame holds as itself, read and written without a visit: an int or float is checked first (its size, its
# finiteness), a list, dict or tagged object is visited
_AS_IS = frozenset({type(None), bool, str})
_VISITED = frozenset({list, dict})


def encode(message: Mapping[str, Any]) -> bytes:
    blobs: list[bytes] = []
    head = json.dumps(_pack(dict(message), blobs), separators=(",", ":"), allow_nan=False).encode()
    payload = b"".join([MAGIC, HEAD.pack(len(head)), head, *blobs])
    return HEADER.pack(len(payload)) + payload


def _pack(value: Any, blobs: list[bytes]) -> Any:
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return value if value.bit_length() <= MAX_INT_BITS else {"F": "inf" if value > 0 else "-inf"}
    if isinstance(value, float):
        return value if math.isfinite(value) else {"F": repr(float(value))}
    if isinstance(value, list):
        return [v if type(v) in _AS_IS else _pack(v, blobs) for v in value]
    if isinstance(value, tuple):
        return {"T": [_pack(v, blobs) for v in value]}
    if isinstance(value, dict):
        return {"D": [[k if type(k) is str else _pack(k, blobs), _pack(v, blobs)] for k, v in value.items()]}
    if isinstance(value, torch.Tensor):
        return _pack_tensor(value, blobs)
    raise TypeError(f"a {type(value).__qualname__} cannot cross between judge and worker")


def _pack_tensor(tensor: torch.Tensor, blobs: list[bytes]) -> dict[str, Any]:
    if tensor.layout != torch.strided or tensor.is_quantized or tensor.is_nested or tensor.device.type != "cpu":
        return {"E": None}
    tensor = tensor.detach().resolve_conj().resolve_neg()
    storage = tensor.untyped_storage()
    size = storage.nbytes()
    blobs.append(ctypes.string_at(storage.data_ptr(), size) if size else b"")
    dtype = str(tensor.dtype).removeprefix("torch.")
    return {"X": [dtype, list(tensor.shape), list(tensor.stride()), tensor.storage_offset(), size]}


def decode(
    payload: bytes, max_tensors: int | None = MAX_TENSORS, max_values: int | None = None, deadline: float | None = None
) -> dict[str, Any]:
    """The message a frame's payload holds; ProtocolError for anything but a well-formed frame of plain data.
    `max_tensors` None: no limit (a file the judge wrote itself). `max_values`: the header is checked against it,
    `MAX_NESTING` and the string and number bounds before it is parsed. FrameOverdue once `deadline` (of
    `time.monotonic`) has passed, checked while the header is scanned and when the message is whole."""
    try:
        view = memoryview(payload)
        if view[: len(MAGIC)] != MAGIC:
            raise ProtocolError("not a frame of this protocol")
        start = len(MAGIC) + HEAD.size
        (head_size,) = HEAD.unpack(view[len(MAGIC) : start])
        if max_values is not None:
            _check_header(view[start : start + head_size], max_values, deadline)
        head = json.loads(bytes(view[start : start + head_size]), parse_constant=_no_constant)
        blobs = _Blobs(view[start + head_size :], max_tensors)
        message = _unpack(head, blobs)
        blobs.finish()
        _check_deadline(deadline)
    except ProtocolError:
        raise
    except json.JSONDecodeError:  # its message gives a position in the header, which the sender chose
        raise ProtocolError("unreadable frame: its header is not JSON") from None
    except (ValueError, TypeError, KeyError, IndexError, RecursionError, RuntimeError, OverflowError) as exc:
        # the error's text may quote the header's numbers and shapes, the sender's choice: its kind alone is said
        raise ProtocolError(f"unreadable frame: {type(exc).__name__}") from None
    if not isinstance(message, dict):
        raise ProtocolError("frame is not a dict")
    return message


# One token of a JSON text per match, and every byte belongs to one: a string that does not end matches as a lone
# quote and the scan stops there, so no position is tried twice and a pass is linear in the header's length.
_STRING = re.compile(rb'"[^"\\]*+(?:\\.[^"\\]*+)*+"', re.DOTALL)
_SCALAR_CHAR = rb'[^ \t\n\r"\[\]{},:]'
_TOKEN = re.compile(
    rb"(?P<space>[ \t\n\r]++)|(?P<string>" + _STRING.pattern + rb")|(?P<open>[\[{])|(?P<close>[\]}])"
    rb"|(?P<separator>[,:])|(?P<scalar>" + _SCALAR_CHAR + rb'++)|(?P<unended>")',
    re.DOTALL,
)
_DEADLINE_EVERY = 1 << 12  # tokens between two looks at the clock
# A header up to this size is counted whole by a handful of passes in C (`_count_header`), instead of token by token
# in Python: every honest header is far smaller, and the copies those passes make stay small.
WHOLE_COUNT_BYTES = 1 << 20
# every quote opens a string that ends, read left to right in one linear pass: searching for strings alone would try
# every later quote again after one that does not end, and a header of escaped quotes would cost its length squared
_WELL_QUOTED = re.compile(b'(?:[^"]++|' + _STRING.pattern + b")*+", re.DOTALL)
_SCALAR = re.compile(_SCALAR_CHAR + b"++")
# a scalar run longer than the bound, tried only where a run starts, so a pass stays linear
_LONG_SCALAR = re.compile(b"(?<!" + _SCALAR_CHAR + b")" + _SCALAR_CHAR + b"{%d}" % (MAX_NUMBER_BYTES + 1))
_NOT_BRACKET = bytes(sorted(set(range(256)) - set(b"[]{}")))
_BRACKET_STEP = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")  # +1 and -1, read as int8
assert WHOLE_COUNT_BYTES < MAX_STRING_BYTES  # a string of a header counted whole never reaches its bound


def _check_header(head: memoryview, max_values: int, deadline: float | None) -> None:
    """Refuse a JSON header that holds more than `max_values` values (each list, object, string and number
    counts, at any depth), nests deeper than `MAX_NESTING` or holds a string or number longer than its bound,
    before anything parses it. A token that is not a value (a separator, a closing bracket) follows at most one
    value, so a header may have three times as many tokens as values and no more."""
    if len(head) <= WHOLE_COUNT_BYTES:
        _check_deadline(deadline)
        _count_header(bytes(head), max_values)
    else:
        _scan_header(head, max_values, deadline)


def _scan_header(head: memoryview | bytes, max_values: int, deadline: float | None) -> None:
    """`_check_header`'s bounds token by token, looking at the clock as it goes and stopping at the first bound
    broken: for a header too large to copy."""
    values = tokens = depth = 0
    for count, token in enumerate(_TOKEN.finditer(head)):
        if count % _DEADLINE_EVERY == 0:
            _check_deadline(deadline)
        kind = token.lastgroup
        if kind == "space":
            continue
        tokens += 1
        if kind == "open":
            depth += 1
            if depth > MAX_NESTING:
                raise ProtocolError(f"a frame's header nests deeper than {MAX_NESTING} levels")
        elif kind == "close":
            depth -= 1
        elif kind == "unended":
            raise ProtocolError("unreadable frame: a string of its header does not end")
        elif kind == "string" and token.end() - token.start() > MAX_STRING_BYTES:
            raise ProtocolError(f"a string in a frame's header is longer than {MAX_STRING_BYTES} bytes")
        elif kind == "scalar" and token.end() - token.start() > MAX_NUMBER_BYTES:
            raise ProtocolError(f"a number in a frame's header is longer than {MAX_NUMBER_BYTES} characters")
        values += kind != "separator" and kind != "close"
        if values > max_values or tokens > 3 * max_values:
            raise ProtocolError(f"more than {max_values} values in one frame")


def _count_header(head: bytes, max_values: int) -> None:
    """`_check_header`'s bounds for a header of at most `WHOLE_COUNT_BYTES`, counted in whole passes: the strings
    are taken out first (what is left holds no quote, unless a string does not end), then scalars, brackets and
    separators are counted in what is left, and the deepest nesting is the largest running sum of the brackets."""
    if not _WELL_QUOTED.fullmatch(head):
        raise ProtocolError("unreadable frame: a string of its header does not end")
    rest, strings = _STRING.subn(b" ", head)
    brackets = rest.translate(None, _NOT_BRACKET)
    opens = brackets.count(b"[") + brackets.count(b"{")
    if opens > MAX_NESTING:  # fewer opening brackets cannot nest deeper
        steps = torch.frombuffer(bytearray(brackets.translate(_BRACKET_STEP)), dtype=torch.int8)
        if int(steps.cumsum(0).max()) > MAX_NESTING:
            raise ProtocolError(f"a frame's header nests deeper than {MAX_NESTING} levels")
    if _LONG_SCALAR.search(rest):
        raise ProtocolError(f"a number in a frame's header is longer than {MAX_NUMBER_BYTES} characters")
    values = strings + _SCALAR.subn(b"", rest)[1] + opens
    tokens = values + len(brackets) - opens + rest.count(b",") + rest.count(b":")
    if values > max_values or tokens > 3 * max_values:
        raise ProtocolError(f"more than {max_values} values in one frame")


def _check_deadline(deadline: float | None) -> None:
    if deadline is not None and time.monotonic() > deadline:
        raise FrameOverdue("the frame was not read within its call's time limit")


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


class _Blobs:
    """The tensors' bytes, handed out in order: every byte belongs to exactly one tensor, so the tensors of a
    frame never hold more memory than the frame itself."""

    def __init__(self, data: memoryview, max_tensors: int | None) -> None:
        self.data, self.used, self.tensors, self.max_tensors = data, 0, 0, max_tensors

    def take(self, size: int) -> torch.Tensor:
        self.tensors += 1
        if self.max_tensors is not None and self.tensors > self.max_tensors:
            raise ProtocolError(f"more than {self.max_tensors} tensors in one frame")
        if size > len(self.data) - self.used:
            raise ProtocolError("a tensor claims more bytes than the frame holds")
        chunk = bytearray(self.data[self.used : self.used + size])
        self.used += size
        return torch.frombuffer(chunk, dtype=torch.uint8) if size else torch.empty(0, dtype=torch.uint8)

    def finish(self) -> None:
        if self.used != len(self.data):
            raise ProtocolError("bytes at the end of the frame belong to no tensor")


def _unpack(value: Any, blobs: _Blobs) -> Any:
    if isinstance(value, list):  # JSON gives plain lists and dicts; a scalar element is itself, unvisited
        return [_unpack(v, blobs) if type(v) in _VISITED else v for v in value]
    if not isinstance(value, dict):
        return value
    if len(value) != 1:
        raise ProtocolError("a JSON object that is not a tag")
    ((tag, body),) = value.items()
    if tag == "D":
        return {
            k if type(k) is str else _unpack(k, blobs): _unpack(v, blobs) if type(v) in _VISITED else v for k, v in body
        }
    if tag == "T":
        return tuple(_unpack(v, blobs) for v in body)
    if tag == "F":
        if body not in FLOATS:
            raise ValueError("a float that is neither NaN nor an infinity")
        return FLOATS[body]
    if tag == "X":
        return _unpack_tensor(body, blobs)
    if tag == "E":
        raise ProtocolError("a sparse, meta, quantized or nested tensor; only dense tensors cross to the judge")
    raise ProtocolError("unknown tag")


def _unpack_tensor(body: list[Any], blobs: _Blobs) -> torch.Tensor:
    dtype, size, stride, offset, nbytes = body
    counts = [*size, *stride, offset, nbytes]
    if len(size) != len(stride) or len(size) > MAX_DIMS or any(type(n) is not int or n < 0 for n in counts):
        raise ProtocolError("a tensor's size, stride or offset is not a list of counts")
    if not isinstance(dtype, str) or dtype not in DTYPES:
        raise ValueError("a tensor of a dtype torch does not have")
    storage = blobs.take(nbytes).untyped_storage()
    try:
        return torch.empty(0, dtype=DTYPES[dtype]).set_(storage, offset, size, stride)
    except RuntimeError:  # torch's message quotes the sizes, which the sender chose
        raise ValueError("a tensor's size, stride and offset reach past its bytes") from None


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
        raise ProtocolError(f"a frame exceeds the {max_bytes}-byte limit")  # its size is the sender's choice
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


def _backward(
    output: Any, inputs: Mapping[str, Any], requires_grad: list[str], backward: bool | torch.Tensor
) -> dict[str, Any]:
    """Backward from the output, or from the first item of a returned tuple (a loss returned with statistics):
    from its sum, or with `backward` a cotangent, from the sum of output * cotangent (`output.backward(cotangent)`),
    which gives the vector-Jacobian product of a non-scalar output."""
    if isinstance(output, (tuple, list)) and output and type(output[0]) is torch.Tensor:
        output = output[0]
    if type(output) is not torch.Tensor:
        return {"backward_error": {"type": "TypeError", "bases": ["TypeError"], "message": "output is not a Tensor"}}
    try:
        if type(backward) is torch.Tensor:
            if output.shape != backward.shape:
                raise ValueError(f"the output has shape {list(output.shape)}, its cotangent {list(backward.shape)}")
            output.backward(backward.to(output.dtype))
        else:
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
    backward: bool | torch.Tensor,
    source: str | None = None,
) -> dict[str, Any]:
    """Call `function(**kwargs)` and record what came back, what backward gave, and the inputs it changed.

    `backward`: False, True (backward from the output), or the output's cotangent (backward from output *
    cotangent). `source` names the learner's file, whose frames an exception's description then lists."""
    inputs = _prepare_inputs(kwargs, requires_grad)
    observation: dict[str, Any] = {}
    try:
        output = function(**inputs)
    except BaseException as exc:  # SystemExit from learner code is an observation too
        observation["raised"] = describe_exception(exc, source)
    else:
        observation["output"] = describe(output)
        if backward is not False:
            observation.update(_backward(output, inputs, requires_grad, backward))
    observation["inputs_after"] = changed_inputs(kwargs, inputs)
    return observation


def changed_inputs(sent: Mapping[str, Any], inputs: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    """The tensor inputs that a call left different from what was sent: in dtype, size, strides or any bit. An
    input left out came back as it was sent, so the inputs nobody modifies cost the frame nothing."""
    return {
        name: value.detach()
        for name, value in inputs.items()
        if type(value) is torch.Tensor and not same_bits(value.detach(), sent[name])
    }


def same_bits(now: torch.Tensor, before: Any) -> bool:
    """Bytes, not values: NaN equals itself here and -0.0 differs from 0.0; the judge decides what counts as a
    change."""
    return type(before) is torch.Tensor and _layout(now) == _layout(before) and torch.equal(_bytes(now), _bytes(before))


def _layout(tensor: torch.Tensor) -> tuple[torch.dtype, torch.Size, tuple[int, ...]]:
    return tensor.dtype, tensor.size(), tensor.stride()


def _bytes(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.contiguous().view(-1).view(torch.uint8)
