"""Validate what a worker sent back and compare it, aspect by aspect, with the expected observation."""

from __future__ import annotations

import builtins
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from grader.judge.compare import MAX_ELEMENTS, Mismatch, compare_tensors, describe_kind
from grader.model.spec import Aspect, Tolerance
from grader.model.verdicts import Verdict
from grader.text import LINE_CHARS, MESSAGE_CHARS, clean, clean_line


class Malformed(Exception):
    """The worker's answer is not plain data of the expected form (a forged or corrupted frame)."""


# Only these dtypes cross to the judge: the real types its comparisons and messages are written for. Complex
# numbers are left out on purpose: no contract returns them, and ordering, float() and tolerance formulas the
# evidence uses are undefined for them. float8, bits, quantized and unsigned types beyond uint8 are the
# learner's malformed answer too.
ALLOWED_DTYPES = frozenset({
    torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
    torch.float16, torch.bfloat16, torch.float32, torch.float64,
})
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
        raise Malformed(f"{where} has dtype {value.dtype}; results must be bool, integer or "
                        "float16/bfloat16/float32/float64 tensors")
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
        return {"kind": kind, "value": _tensor(value.get("value"), where), **flags,
                "device": budget.string(value.get("device", "cpu"), f"{where}.device")}
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


def sanitize(obs: Any) -> dict[str, Any]:
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


PARAMETER_KINDS = frozenset({"POSITIONAL_ONLY", "POSITIONAL_OR_KEYWORD", "VAR_POSITIONAL", "KEYWORD_ONLY",
                             "VAR_KEYWORD"})
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
        if type(param) is not dict or param.get("kind") not in PARAMETER_KINDS or \
                type(param.get("has_default")) is not bool:
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
        if message.get("op") == "ready":
            functions = message.get("functions")
            if type(functions) is not dict or len(functions) > MAX_ITEMS:
                raise Malformed("`functions` is not a dict of function descriptions")
            found = {}
            for name, info in functions.items():
                key = budget.string(name, "a function name")
                found[key] = _signature(info, f"functions[{key!r}]", budget)
            return {"op": "ready", "functions": found}
        if message.get("op") == "import_error":
            line, text = message.get("line"), message.get("message", "")
            if type(text) is not str:
                raise Malformed("the import error's message is not a string")
            # the worker passes a SyntaxError's own message on whole, however long: cut, not refused
            return {"op": "import_error", "type": budget.string(message.get("type", "ImportError"), "type"),
                    "message": clean(text, MESSAGE_CHARS), "line": line if type(line) is int and 0 < line < 1 << 31
                    else None}
        raise Malformed(f"unknown op {clean_line(message.get('op'), 40)!r}")
    except Malformed as exc:
        return {"op": "import_error", "type": "MalformedHello", "line": None,
                "message": f"the worker's first message could not be accepted: {exc}"}


Context = Callable[[tuple[int, ...], tuple[int, ...]], str]  # failing index, result shape -> the inputs there


def input_context(sent: Mapping[str, Any], mask: str | None = None, group_size: str | None = None) -> Context:
    """What the inputs hold at a failing element, for a visible case's message: the same element of every input
    of the result's shape, the element's whole group when the function takes a group size, the entry of every 1-D
    input that runs along exactly one of the result's dimensions, and whether the element is padding."""

    def describe(index: tuple[int, ...], shape: tuple[int, ...]) -> str:
        shown = []
        group = sent.get(group_size) if group_size else None
        for name, value in sent.items():
            if type(value) is not torch.Tensor or value.dim() == 0:
                continue
            if value.dim() == 1 and isinstance(group, int) and not isinstance(group, bool) and group > 0 \
                    and len(index) == 1 and value.shape[0] == shape[0]:
                start = index[0] // group * group
                shown.append(f"{name}[{start}:{start + group}] = {_values(value[start:start + group])}")
            elif tuple(value.shape) == shape:
                shown.append(f"{name}{list(index)} = {_values(value[index])}")
            elif value.dim() == 1:
                along = [d for d, size in enumerate(shape) if size == value.shape[0]]
                if len(along) == 1:
                    shown.append(f"{name}[{index[along[0]]}] = {_values(value[index[along[0]]])}")
        text = f"; the inputs there: {', '.join(shown)}" if shown else ""
        held = sent.get(mask) if mask else None
        if type(held) is torch.Tensor and tuple(held.shape) == shape and not bool(held[index]):
            text += "; this element is padding (its mask is 0)"
        return text[:600]

    return describe


def _values(value: torch.Tensor) -> str:
    if value.dim() == 0:
        return f"{value.item():.6g}" if value.is_floating_point() else str(value.item())
    return "[" + ", ".join(_values(v) for v in value[:16]) + (", ..." if value.numel() > 16 else "") + "]"


@dataclass(frozen=True)
class Outcome:
    """One case's verdict and, when it did not pass, the evidence."""

    verdict: Verdict
    mismatch: Mismatch | None = None



def _safe_exception(exc: dict[str, Any]) -> str:
    """An exception named by a builtin type only: its message and a custom class name are the learner's own
    text, which a hidden case must not echo (it could carry the case's inputs)."""
    for name in [exc["type"], *exc.get("bases", [])]:
        known = getattr(builtins, str(name), None)
        if isinstance(known, type) and issubclass(known, BaseException):
            return name if name == exc["type"] else f"an exception derived from {name}"
    return "an exception"


def _kind_word(obs: dict[str, Any]) -> str:
    """The kind of an observed value in the judge's own words (type names are the learner's choice)."""
    return {"tensor": "a torch.Tensor", "python": "a Python value", "sequence": "a sequence"}.get(
        str(obs.get("kind")), "another kind of value")


def tolerance_for(dtype: torch.dtype, tolerances: Mapping[str, Tolerance]) -> Tolerance:
    name = str(dtype).removeprefix("torch.")
    return tolerances.get(name) or tolerances.get("float64") or Tolerance(rtol=0.0, atol=0.0)


def _flatten(desc: dict[str, Any], name: str) -> list[tuple[str, dict[str, Any]]]:
    if desc.get("kind") == "sequence":
        return [(f"{name}[{i}]", item) for i, item in enumerate(desc["items"])]
    return [(name, desc)]


def exception_text(exc: dict[str, Any]) -> str:
    """`Type: message (your file, line N in fn: code)`; no dangling colon when the message is empty."""
    text = f"{exc['type']}: {exc.get('message', '')}".strip().rstrip(":")
    return f"{text} (your file, {exc['where']})" if exc.get("where") else text


def _is_instance(exc: dict[str, Any], type_name: str) -> bool:
    return type_name == exc["type"] or type_name in exc.get("bases", [])


def compare_output(
    name: str, got: dict[str, Any], want: dict[str, Any], aspects: Sequence[Aspect],
    tolerances: Mapping[str, Tolerance], context: Context | None = None, evidence: bool = True,
) -> Mismatch | None:
    if want["kind"] != "tensor":
        if got.get("kind") != want["kind"] or got.get("value") != want.get("value"):
            return Mismatch.of(f"{name}: expected {want.get('value')!r}, got {describe_kind(got)} {got.get('value')!r}",
                         f"{name}: the result differs from the expected value")
        return None
    if got["kind"] != "tensor":
        return Mismatch.of(f"{name}: expected a torch.Tensor, got {describe_kind(got)}",
                     f"{name}: expected a torch.Tensor, got {_kind_word(got)}")
    g, w = got["value"], want["value"]
    checks: list[tuple[Aspect, bool, str]] = [
        ("shape", g.shape == w.shape, f"expected shape {tuple(w.shape)}, got {tuple(g.shape)}"),
        ("dtype", g.dtype == w.dtype, f"expected dtype {w.dtype}, got {g.dtype}"),
        ("device", got.get("device") == want.get("device"),
         f"expected device {want.get('device')}, got {got.get('device')}"),
        ("requires_grad", got["requires_grad"] == want["requires_grad"],
         "requires grad; detach it (the result must carry no autograd graph)" if got["requires_grad"]
         else "carries no autograd graph, but it must be connected to the inputs"),
        ("connected", got["has_grad_fn"] == want["has_grad_fn"] or not want["has_grad_fn"],
         "is detached from the graph (no grad_fn); return a tensor built from the inputs so backward reaches them"),
    ]
    for aspect, ok, text in checks:
        if aspect in aspects and not ok:
            # a shape, dtype or device would tell a hidden case's inputs; the hidden-safe text names the aspect
            safe = f"the {aspect} differs from the expected {aspect}" if aspect in SHOWS_INPUTS else text
            return Mismatch.of(f"{name}: {text}", f"{name}: {safe}")
    if "values" in aspects or "values_exact" in aspects:
        tol = None if "values_exact" in aspects else tolerance_for(w.dtype, tolerances)
        if g.shape != w.shape:
            return Mismatch.of(f"{name}: expected shape {tuple(w.shape)}, got {tuple(g.shape)}",
                         f"{name}: the shape differs from the expected shape")
        return compare_tensors(name, g, w, tol, context, evidence)
    return None


def compare_grads(
    got: dict[str, Any], want: dict[str, Any], aspects: Sequence[Aspect], tolerances: Mapping[str, Tolerance],
    evidence: bool = True,
) -> Mismatch | None:
    if "backward_error" in want:
        raise AssertionError(f"the expected side failed backward: {want['backward_error']}")
    if "backward_error" in got:
        return Mismatch.of(f"loss.backward() raised {exception_text(got['backward_error'])}",
                     f"loss.backward() raised {_safe_exception(got['backward_error'])}")
    for name, w in want.get("grads", {}).items():
        g = got.get("grads", {}).get(name)
        if "connected" in aspects and w is not None and g is None:
            return Mismatch.of(f"{name} received no gradient (grad is None): the loss is not connected to {name}")
        if "grads" not in aspects:
            continue
        if w is None and g is None:
            continue
        reference = w if w is not None else torch.zeros_like(g)
        actual = g if g is not None else torch.zeros_like(reference)
        if w is None and bool((actual != 0).any()):
            return Mismatch.of(f"{name} received a gradient, but it must receive none (stop-gradient)")
        mismatch = compare_tensors(f"d loss / d {name}", actual, reference, tolerance_for(reference.dtype, tolerances),
                                   evidence=evidence)
        if mismatch:
            return mismatch
    return None


def compare_inputs(sent: Mapping[str, Any], got: dict[str, Any]) -> Mismatch | None:
    after = got.get("inputs_after", {})
    for name, before in sent.items():
        if type(before) is not torch.Tensor:
            continue
        now = after.get(name)
        if now is None:
            return Mismatch.of(f"input {name} was not handed back after the call")
        if now.dtype != before.dtype or now.shape != before.shape or now.stride() != before.stride():
            return Mismatch.of(
                f"input {name} changed its dtype, shape or strides during the call; do not modify inputs")
        mismatch = compare_tensors(f"input {name} after the call", now, before, None)
        if mismatch:
            return Mismatch.of(f"{mismatch.message}; the function modified its input in place (copy before editing)",
                         f"{mismatch.learner_message}; the function modified its input in place (copy before editing)")
    return None


def judge_case(
    function: str, sent: Mapping[str, Any], got: dict[str, Any], want: dict[str, Any],
    aspects: Sequence[Aspect], tolerances: Mapping[str, Tolerance], context: Context | None = None,
    evidence: bool = True,
) -> Outcome:
    """Compare one learner observation with the expected one on the aspects a check names (without `evidence`, a
    failing value comparison says only that the values differ: see `compare_tensors`)."""
    if "raised" in want:
        if "raises" not in aspects:
            raise AssertionError(f"expected side raised {exception_text(want['raised'])} on a case that must not raise")
        expected_type = want["raised"]["type"]
        if "raised" not in got:
            return Outcome(Verdict.FAIL, Mismatch.of(
                f"{function} returned normally; expected it to raise {expected_type}",
                f"{function} returned normally, but this case must raise an exception"))
        if not _is_instance(got["raised"], expected_type):
            return Outcome(Verdict.FAIL, Mismatch.of(
                f"{function} raised {exception_text(got['raised'])}; expected {expected_type}",
                f"{function} raised {_safe_exception(got['raised'])}, not the exception this case expects"))
        return Outcome(Verdict.PASS)
    if "raised" in got:
        return Outcome(Verdict.ERROR, Mismatch.of(f"{function} raised {exception_text(got['raised'])}",
                                            f"{function} raised {_safe_exception(got['raised'])} (message withheld)"))
    if OUTPUT_ASPECTS & set(aspects):
        mismatch = _compare_outputs(function, got, want, aspects, tolerances, context, evidence)
        if mismatch:
            return Outcome(Verdict.FAIL, mismatch)
    if {"backward", "connected", "grads"} & set(aspects):
        mismatch = compare_grads(got, want, aspects, tolerances, evidence)
        if mismatch:
            return Outcome(Verdict.FAIL, mismatch)
    if "inputs_unchanged" in aspects:
        mismatch = compare_inputs(sent, got)
        if mismatch:
            return Outcome(Verdict.FAIL, mismatch)
    return Outcome(Verdict.PASS)


SHOWS_INPUTS = {"shape", "dtype", "device"}
OUTPUT_ASPECTS = {"type", "shape", "dtype", "device", "values", "values_exact", "requires_grad", "connected"}


def _compare_outputs(function: str, got: dict[str, Any], want: dict[str, Any], aspects: Sequence[Aspect],
                     tolerances: Mapping[str, Tolerance], context: Context | None,
                     evidence: bool = True) -> Mismatch | None:
    for (name, g), (_, w) in zip(_flatten(got["output"], function), _flatten(want["output"], function), strict=False):
        mismatch = compare_output(name, g, w, aspects, tolerances, context, evidence)
        if mismatch:
            return mismatch
    if len(_flatten(got["output"], function)) != len(_flatten(want["output"], function)):
        return Mismatch.of(f"{function}: expected {describe_kind(want['output'])}, got {describe_kind(got['output'])}",
                     f"{function}: the result holds a different number of items than expected")
    return None



def same_as(function: str, sent: Mapping[str, Any], got: dict[str, Any], other: dict[str, Any],
            aspects: Sequence[Aspect], tolerances: Mapping[str, Tolerance]) -> bool:
    """Whether the learner's observation matches `other` (a misconception's) on every aspect a check compares.

    Unlike `judge_case`, both sides may raise or modify their inputs: a misreading can do either, and then
    matching it means doing the same.
    """
    if "raised" in got or "raised" in other:
        # the same exception class, not a subclass: a starter's NotImplementedError must not match a misreading
        # that raises RuntimeError
        return "raised" in got and "raised" in other and got["raised"]["type"] == other["raised"]["type"]
    compared = [a for a in aspects if a not in ("inputs_unchanged", "raises")]
    if ("backward_error" in got or "backward_error" in other) and {"backward", "grads", "connected"} & set(aspects):
        if not ("backward_error" in got and "backward_error" in other
                and got["backward_error"]["type"] == other["backward_error"]["type"]):
            return False
        # both failed backward alike: what they returned must still agree
        compared = [a for a in compared if a not in ("backward", "grads", "connected")] or ["type", "values"]
    if compared and judge_case(function, sent, got, other, compared, tolerances,
                               evidence=False).verdict != Verdict.PASS:
        return False
    if "inputs_unchanged" in aspects:
        mine, theirs = got.get("inputs_after", {}), other.get("inputs_after", {})
        for name, value in theirs.items():
            if name not in mine or compare_tensors(name, mine[name], value, None, evidence=False) is not None:
                return False
    return True
