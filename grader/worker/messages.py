"""The vocabulary judge and worker speak: the ops, each message's fields, and the worker's config.

Defined once, here, for both sides; standard library only, so the judge can start a worker before it imports
torch. A message crosses as a plain dict (a frame of `protocol`), its `op` the plain string of an `Op`: an enum
member crosses as its string, and only the builders below make messages.
The worker reads what the judge sends with `read_calls` and `read_worker_config`; the judge accepts what a
worker sends in `grader.judge.accept`, where every answer is the learner's and may be forged.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, NotRequired, TypedDict


class Op(StrEnum):
    """What a message is; the first message of a worker is READY or IMPORT_ERROR, then one answer per call."""

    CALLS = "calls"  # judge -> worker: make these calls, answering each as soon as it is done
    READY = "ready"  # worker -> judge: the submission imported; here are its functions' signatures
    IMPORT_ERROR = "import_error"  # worker -> judge: the submission did not import
    OBSERVED = "observed"  # worker -> judge: what one call returned, raised and left behind
    MISSING = "missing"  # worker -> judge: the function called is not defined in the submission
    ERROR = "error"  # worker -> judge: the request could not be read


class CallRequest(TypedDict):
    """One call as the worker needs it: never the case's label, group or whether it is hidden."""

    function: str
    kwargs: dict[str, Any]
    requires_grad: list[str]
    # False; True: backward from the output; a tensor (checked by `read_call` by its type alone, torch being
    # out of reach here): the output's cotangent, backward from output * cotangent
    backward: Any


class CallsRequest(TypedDict):
    op: str  # Op.CALLS
    calls: list[CallRequest]


class Ready(TypedDict):
    op: str  # Op.READY
    functions: dict[str, dict[str, Any]]  # name -> what `worker.__main__.signature_of` says of it


class ImportFailed(TypedDict):
    op: str  # Op.IMPORT_ERROR
    type: str
    message: str
    line: int | None
    bases: NotRequired[list[str]]
    where: NotRequired[str]


class Missing(TypedDict):
    op: str  # Op.MISSING
    function: str


class RequestError(TypedDict):
    op: str  # Op.ERROR
    message: str


class WorkerConfig(TypedDict):
    """What a worker is told at its start (as JSON, its last argument; in the box, from its init)."""

    submission: str  # path of the learner's file, as the worker sees it
    functions: list[str]  # the contract's function names, whose signatures READY reports
    request_fd: int
    response_fd: int
    max_frame_bytes: int  # the largest request the worker reads


def calls_request(calls: list[CallRequest]) -> CallsRequest:
    return {"op": Op.CALLS.value, "calls": calls}


def ready(functions: dict[str, dict[str, Any]]) -> Ready:
    return {"op": Op.READY.value, "functions": functions}


def import_failed(described: dict[str, Any], line: int | None) -> ImportFailed:
    """`described` holds the exception's type and message (and, from `protocol.describe_exception`, more)."""
    return {"op": Op.IMPORT_ERROR.value, **described, "line": line}  # type: ignore[typeddict-item]


def observed(observation: dict[str, Any]) -> dict[str, Any]:
    return {"op": Op.OBSERVED.value, **observation}


def missing(function: str) -> Missing:
    return {"op": Op.MISSING.value, "function": function}


def request_error(message: str) -> RequestError:
    return {"op": Op.ERROR.value, "message": message}


def _require(held: Any, kind: type | tuple[type, ...], where: str) -> Any:
    if not isinstance(held, kind) or (isinstance(held, bool) and kind is int):
        raise ValueError(f"{where} is not {getattr(kind, '__name__', kind)}")
    return held


def _is_tensor(held: Any) -> bool:
    """Whether `held` is a plain torch.Tensor, the one type a frame decodes a tensor to; no subclass."""
    kind = type(held)
    return kind.__module__ == "torch" and kind.__qualname__ == "Tensor"


def read_call(raw: Any, where: str = "call") -> CallRequest:
    """One call request, its fields checked; ValueError otherwise."""
    _require(raw, dict, where)
    backward = raw.get("backward")
    if not isinstance(backward, bool) and not _is_tensor(backward):
        raise ValueError(f"{where}.backward is neither a bool nor a cotangent tensor")
    requires_grad = _require(raw.get("requires_grad"), list, f"{where}.requires_grad")
    kwargs = _require(raw.get("kwargs"), dict, f"{where}.kwargs")
    for name in [*requires_grad, *kwargs]:
        _require(name, str, f"a parameter name in {where}")
    return {
        "function": _require(raw.get("function"), str, f"{where}.function"),
        "kwargs": kwargs,
        "requires_grad": requires_grad,
        "backward": backward,
    }


def read_calls(raw: Any) -> list[CallRequest]:
    """The calls of a CALLS request; ValueError for any other message."""
    _require(raw, dict, "request")
    if raw.get("op") != Op.CALLS:
        raise ValueError(f"unknown op {str(raw.get('op'))[:40]!r}")
    calls = _require(raw.get("calls"), list, "calls")
    return [read_call(call, f"calls[{i}]") for i, call in enumerate(calls)]


def read_worker_config(raw: Any) -> WorkerConfig:
    """The worker's config, its fields checked; ValueError otherwise."""
    _require(raw, dict, "the worker's config")
    functions = _require(raw.get("functions"), list, "functions")
    for name in functions:
        _require(name, str, "a function name")
    return {
        "submission": _require(raw.get("submission"), str, "submission"),
        "functions": functions,
        "request_fd": _require(raw.get("request_fd"), int, "request_fd"),
        "response_fd": _require(raw.get("response_fd"), int, "response_fd"),
        "max_frame_bytes": _require(raw.get("max_frame_bytes"), int, "max_frame_bytes"),
    }
