"""Accepting what crosses from the learner's side: every frame, answer, observation and series, checked against
the shapes `grader.worker` produces, bounded, its text made safe; anything else is refused.

A worker runs the learner's code and can send any bytes: each accepting function returns a fresh copy holding
only what it checked (no extra key, no deeper nesting), or raises. A frame that cannot be read is a crash of the
worker (`ProtocolError`); an answer of the wrong form is the learner's malformed result (`Malformed`); a
function the worker could not find is `FunctionMissing`. The toy's series, made in the judge from the
learner's results, are accepted here too. Nothing else in the judge looks at raw worker data.
"""

from __future__ import annotations

from typing import Any

import torch

from grader.judge.compare import MAX_ELEMENTS
from grader.text import LINE_CHARS, MESSAGE_CHARS, clean, clean_line
from grader.worker import protocol
from grader.worker.framing import ProtocolError
from grader.worker.messages import Op

MAX_FRAME_VALUES = 1 << 16  # JSON values in a frame's header; the largest hello accepted holds 50 000
MAX_SERIES_POINTS = 4096  # a part's series longer than this is refused: it would only cost the judge


# ----------------------------------------------------------------------------- frames


def accept_frame(payload: bytes, deadline: float | None = None) -> dict[str, Any]:
    """A frame's payload decoded (plain data only: JSON and raw tensor bytes, no code run, no memory beyond
    the frame's own) and checked; ProtocolError otherwise, FrameOverdue once `deadline` has passed. Its header
    is bounded in values, nesting and lengths before it is parsed, so refusing a frame costs little whatever
    its shape."""
    return check_tensors(protocol.decode(payload, max_values=MAX_FRAME_VALUES, deadline=deadline))


def check_tensors(message: dict[str, Any]) -> dict[str, Any]:
    """Let only plain dense tensors through: a sparse, meta or quantized tensor would fail inside the judge's
    comparisons and read as the judge's own error."""
    stack: list[Any] = [message]
    seen = 0
    while stack:
        value = stack.pop()
        seen += 1
        if seen > MAX_FRAME_VALUES:
            raise ProtocolError(f"more than {MAX_FRAME_VALUES} values in one frame")
        if isinstance(value, dict):
            stack += value.values()
        elif isinstance(value, (list, tuple)):
            stack += value
        elif isinstance(value, torch.Tensor):
            exotic = value.layout != torch.strided or value.is_quantized or value.is_nested
            if type(value) is not torch.Tensor or exotic or value.device.type not in ("cpu", "cuda"):
                raise ProtocolError("a tensor that is not a dense CPU tensor; only dense tensors cross to the judge")
    return message


# ----------------------------------------------------------------------------- answers and observations


class Malformed(Exception):
    """The worker's answer is not plain data of the expected form (a forged or corrupted frame)."""


# Only these dtypes cross to the judge: the real types its comparisons and messages are written for. Complex
# numbers are left out on purpose: no contract returns them, and ordering, float() and tolerance formulas the
# evidence uses are undefined for them. float8, bits, quantized and unsigned types beyond uint8 are the
# learner's malformed answer too.
ALLOWED_DTYPES = frozenset(
    {
        torch.bool,
        torch.uint8,
        torch.int8,
        torch.int16,
        torch.int32,
        torch.int64,
        torch.float16,
        torch.bfloat16,
        torch.float32,
        torch.float64,
    }
)
MAX_DIMS = 16
MAX_DEPTH = 4  # nesting of sequences in one output: a tuple of tuples is already unusual
MAX_ITEMS = 64  # items of one sequence, and names in `grads` or `inputs_after`
MAX_NODES = 1024  # descriptions in one answer, all levels together
MAX_TEXT = 1 << 20  # characters of text one answer may carry in all, before any is cut to size


class _Budget:
    """What one answer may still carry: descriptions and characters. A forged answer runs out, never the judge."""

    def __init__(self) -> None:
        self.nodes, self.text = MAX_NODES, MAX_TEXT

    def node(self, where: str) -> None:
        self.nodes -= 1
        if self.nodes < 0:
            raise Malformed(f"{where}: the answer holds more than {MAX_NODES} values")

    def string(self, value: Any, where: str, limit: int = LINE_CHARS, multiline: bool = False) -> str:
        if type(value) is not str:
            raise Malformed(f"{where} is not a string")
        self.text -= len(value)
        if self.text < 0:
            raise Malformed(f"{where}: the answer carries more than {MAX_TEXT} characters of text")
        return clean(value, limit, multiline)


def _tensor(value: Any, where: str) -> torch.Tensor:
    if type(value) is not torch.Tensor:
        raise Malformed(f"{where} is not a plain tensor")
    if value.layout != torch.strided or value.is_nested:
        raise Malformed(f"{where} is a {value.layout} tensor; return a dense (strided) tensor")
    if value.dtype not in ALLOWED_DTYPES:
        raise Malformed(
            f"{where} has dtype {value.dtype}; results must be bool, integer or "
            "float16/bfloat16/float32/float64 tensors"
        )
    if value.device.type != "cpu":
        raise Malformed(f"{where} is on the {value.device.type} device; return a CPU tensor")
    if value.dim() > MAX_DIMS:
        raise Malformed(f"{where} has {value.dim()} dimensions, more than {MAX_DIMS}")
    if value.numel() > MAX_ELEMENTS:
        raise Malformed(f"{where} has {value.numel()} elements, more than {MAX_ELEMENTS}")
    return value.detach()


def _python(value: Any, where: str, budget: _Budget) -> Any:
    if type(value) is int and value.bit_length() > 64:
        raise Malformed(f"{where} is an integer of {value.bit_length()} bits; the judge accepts 64 at most")
    if type(value) is str:
        if len(value) > MESSAGE_CHARS:
            raise Malformed(f"{where} is a string of {len(value)} characters, more than {MESSAGE_CHARS}")
        return budget.string(value, where, MESSAGE_CHARS, multiline=True)
    if value is not None and type(value) not in (bool, int, float):
        raise Malformed(f"{where} claims a Python scalar but holds something else")
    return value


def _described(value: Any, where: str, budget: _Budget, depth: int = 0) -> dict[str, Any]:
    """A fresh copy of one output description holding only what `protocol.describe` puts there, each checked."""
    budget.node(where)
    if type(value) is not dict or depth > MAX_DEPTH:
        raise Malformed(f"{where} is not a description" + (" (nested too deeply)" if depth > MAX_DEPTH else ""))
    kind = value.get("kind")
    if kind == "tensor":
        flags = {flag: value.get(flag) for flag in ("requires_grad", "has_grad_fn")}
        for flag, held in flags.items():
            if type(held) is not bool:
                raise Malformed(f"{where}.{flag} is not a bool")
        return {
            "kind": kind,
            "value": _tensor(value.get("value"), where),
            **flags,
            "device": budget.string(value.get("device", "cpu"), f"{where}.device"),
        }
    described = {"kind": kind, "type": budget.string(value.get("type", ""), f"{where}.type")}
    if kind == "sequence":
        items = value.get("items")
        if type(items) is not list or len(items) > MAX_ITEMS:
            raise Malformed(f"{where} has no item list of at most {MAX_ITEMS} items")
        described["items"] = [_described(item, f"{where}[{i}]", budget, depth + 1) for i, item in enumerate(items)]
    elif kind == "python":
        described["value"] = _python(value.get("value"), f"{where}.value", budget)
    elif kind != "other":
        raise Malformed(f"{where} has unknown kind {clean_line(kind, 40)!r}")
    return described


def _exception(value: Any, where: str, budget: _Budget) -> dict[str, Any]:
    """A fresh copy of one exception description: type and base names, message and the learner's frames."""
    if type(value) is not dict:
        raise Malformed(f"{where} is not an exception description")
    bases = value.get("bases", [])
    if type(bases) is not list or len(bases) > MAX_ITEMS:
        raise Malformed(f"{where} is not an exception description: bases is not a list of at most {MAX_ITEMS} names")
    described = {
        "type": budget.string(value.get("type"), f"{where}.type"),
        "bases": [budget.string(name, f"{where}.bases[{i}]") for i, name in enumerate(bases)],
        "message": budget.string(value.get("message", ""), f"{where}.message", MESSAGE_CHARS, multiline=True),
    }
    if "where" in value:
        described["where"] = budget.string(value["where"], f"{where}.where", MESSAGE_CHARS, multiline=True)
    return described


def _named_tensors(value: Any, where: str, budget: _Budget, optional: bool) -> dict[str, torch.Tensor | None]:
    if type(value) is not dict or len(value) > MAX_ITEMS:
        raise Malformed(f"{where} is not a dict of at most {MAX_ITEMS} tensors")
    named: dict[str, torch.Tensor | None] = {}
    for name, tensor in value.items():
        key = budget.string(name, f"a name in {where}")
        label = f"grad of {key}" if where == "grads" else f"input {key} after the call"
        named[key] = None if optional and tensor is None else _tensor(tensor, label)
    return named


def accept_observation(obs: Any) -> dict[str, Any]:
    """A fresh copy of an answer holding only the shapes `protocol.observe_call` produces, its text made safe
    and bounded; Malformed otherwise. Nothing unchecked (no extra key, no deeper nesting) reaches the judge."""
    if type(obs) is not dict:
        raise Malformed("observation is not a dict")
    budget = _Budget()
    accepted: dict[str, Any] = {}
    if "raised" in obs:
        accepted["raised"] = _exception(obs["raised"], "raised", budget)
    else:
        accepted["output"] = _described(obs.get("output"), "output", budget)
    if "backward_error" in obs:
        accepted["backward_error"] = _exception(obs["backward_error"], "backward_error", budget)
    if "grads" in obs:
        accepted["grads"] = _named_tensors(obs["grads"], "grads", budget, optional=True)
    accepted["inputs_after"] = _named_tensors(obs.get("inputs_after", {}), "inputs_after", budget, optional=False)
    return accepted


class FunctionMissing(Exception):
    """The worker answered a call with MISSING: the learner's file does not define the function."""


def accept_answer(answer: dict[str, Any]) -> dict[str, Any]:
    """The observation an answer to one call carries; FunctionMissing or Malformed when it carries none."""
    if answer.get("op") == Op.MISSING:
        raise FunctionMissing()
    if answer.get("op") != Op.OBSERVED:
        raise Malformed(f"an answer of unknown op {clean_line(answer.get('op'), 40)!r}")
    return accept_observation(answer)


PARAMETER_KINDS = frozenset(
    {"POSITIONAL_ONLY", "POSITIONAL_OR_KEYWORD", "VAR_POSITIONAL", "KEYWORD_ONLY", "VAR_KEYWORD"}
)
MAX_PARAMS = 64


def _signature(info: Any, where: str, budget: _Budget) -> dict[str, Any]:
    """A fresh copy of what `worker.signature_of` reports for one function."""
    if type(info) is not dict or type(info.get("callable")) is not bool:
        raise Malformed(f"{where} is not a function description")
    if not info["callable"]:
        return {"callable": False, "type": budget.string(info.get("type", ""), f"{where}.type")}
    if "params" not in info:
        return {"callable": True, "error": budget.string(info.get("error", ""), f"{where}.error", MESSAGE_CHARS)}
    params = info["params"]
    if type(params) is not list or len(params) > MAX_PARAMS:
        raise Malformed(f"{where}.params is not a list of at most {MAX_PARAMS} parameters")
    accepted = []
    for i, param in enumerate(params):
        if (
            type(param) is not dict
            or param.get("kind") not in PARAMETER_KINDS
            or type(param.get("has_default")) is not bool
        ):
            raise Malformed(f"{where}.params[{i}] is not a parameter description")
        name = budget.string(param.get("name"), f"{where}.params[{i}].name")
        if not name.isidentifier():
            raise Malformed(f"{where}.params[{i}].name is not an identifier")
        accepted.append({"name": name, "kind": param["kind"], "has_default": param["has_default"]})
    return {"callable": True, "params": accepted}


def accept_hello(message: Any) -> dict[str, Any]:
    """A fresh copy of the worker's first message, checked like any answer: `ready` with a description of each
    function found, or `import_error` with the failure's type, message and line. Anything else becomes an
    `import_error` that says the message was malformed: a forged hello is the learner's failure to import."""
    budget = _Budget()
    try:
        if type(message) is not dict:
            raise Malformed("the first message is not a dict")
        if message.get("op") == Op.READY:
            functions = message.get("functions")
            if type(functions) is not dict or len(functions) > MAX_ITEMS:
                raise Malformed("`functions` is not a dict of function descriptions")
            found = {}
            for name, info in functions.items():
                key = budget.string(name, "a function name")
                found[key] = _signature(info, f"functions[{key!r}]", budget)
            return {"op": Op.READY.value, "functions": found}
        if message.get("op") == Op.IMPORT_ERROR:
            line, text = message.get("line"), message.get("message", "")
            if type(text) is not str:
                raise Malformed("the import error's message is not a string")
            # the worker passes a SyntaxError's own message on whole, however long: cut, not refused
            return {
                "op": Op.IMPORT_ERROR.value,
                "type": budget.string(message.get("type", "ImportError"), "type"),
                "message": clean(text, MESSAGE_CHARS),
                "line": line if type(line) is int and 0 < line < 1 << 31 else None,
            }
        raise Malformed(f"unknown op {clean_line(message.get('op'), 40)!r}")
    except Malformed as exc:
        return {
            "op": Op.IMPORT_ERROR.value,
            "type": "MalformedHello",
            "line": None,
            "message": f"the worker's first message could not be accepted: {exc}",
        }


# ----------------------------------------------------------------------------- the toy's series


def accept_series(raw: object, part: str) -> dict[str, torch.Tensor]:
    if not isinstance(raw, dict):
        raise TypeError(f"part {part} returned {type(raw).__name__}, not a dict of series")
    series = {}
    for name, value in raw.items():
        if type(value) is not torch.Tensor or value.dim() != 1 or not value.is_floating_point():
            raise TypeError(f"series {name!r} of part {part} is not a 1-D floating tensor")
        if value.numel() > MAX_SERIES_POINTS:
            raise ValueError(
                f"series {name!r} of part {part} has {value.numel()} points, more than {MAX_SERIES_POINTS}"
            )
        series[str(name)] = value.detach().to(torch.float64).clone()
    return series
