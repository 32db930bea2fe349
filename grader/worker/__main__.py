"""Runs UNTRUSTED learner code: import one submission, then answer the judge's requests until it goes away.

Usage: python -m <worker package> CONFIG_JSON, a `messages.WorkerConfig`.
The worker only ever calls the learner's functions on the judge's request: the toy experiment runs in the
judge, which calls the functions here one by one.
"""

from __future__ import annotations

import json
import os
import sys

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
    os.environ[_var] = "1"  # before torch loads: BLAS/OpenMP pools stay single-threaded

import importlib.util  # noqa: E402
import inspect  # noqa: E402
import traceback  # noqa: E402
from types import ModuleType  # noqa: E402
from typing import Any  # noqa: E402

import torch  # noqa: E402

from . import messages, protocol  # noqa: E402
from .messages import CallRequest, WorkerConfig  # noqa: E402

SUBMISSION_MODULE = "paperleet_submission"  # fixed name: a file called torch.py or grader.py shadows nothing


def load_module(name: str, path: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def signature_of(obj: Any) -> dict[str, Any]:
    if not callable(obj):
        return {"callable": False, "type": type(obj).__qualname__}
    try:
        params = inspect.signature(obj).parameters.values()
    except (TypeError, ValueError) as exc:
        return {"callable": True, "error": str(exc)[:200]}
    return {
        "callable": True,
        "params": [
            {"name": p.name, "kind": p.kind.name, "has_default": p.default is not inspect.Parameter.empty}
            for p in params
        ],
    }


Hello = messages.Ready | messages.ImportFailed  # the worker's first frame


def import_report(submission: str, functions: list[str]) -> tuple[ModuleType | None, Hello]:
    try:
        module = load_module(SUBMISSION_MODULE, submission)
    except SyntaxError as exc:
        return None, messages.import_failed({"type": "SyntaxError", "message": str(exc.msg)}, exc.lineno)
    except BaseException as exc:  # any failure at import is the learner's
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == submission]
        line = frames[-1].lineno if frames else None
        return None, messages.import_failed(protocol.describe_exception(exc), line)
    found = {name: signature_of(getattr(module, name)) for name in functions if hasattr(module, name)}
    return module, messages.ready(found)


def handle(call: CallRequest, module: ModuleType, config: WorkerConfig) -> dict[str, Any]:
    function = getattr(module, call["function"], None)
    if function is None:
        return dict(messages.missing(call["function"]))
    return messages.observed(
        protocol.observe_call(
            function, call["kwargs"], call["requires_grad"], call["backward"], source=config["submission"]
        )
    )


def main() -> None:
    serve(messages.read_worker_config(json.loads(sys.argv[1])))


def warm_up() -> None:
    """Pay torch's first-use costs (autograd, serialization) before the learner's clock starts; forked
    workers inherit them paid."""
    torch.set_num_threads(1)
    if torch.get_num_interop_threads() != 1:  # a forked worker inherits the setting, which cannot change twice
        torch.set_num_interop_threads(1)
    x = torch.ones(2, 3, dtype=torch.float64)
    observation = protocol.observe_call(lambda x: (x.exp() * 2).sum(), {"x": x}, ["x"], True)
    protocol.decode(protocol.encode(observation)[protocol.HEADER.size :])


def serve(config: WorkerConfig) -> None:
    """Import the submission, say how that went, then answer requests until the judge stops."""
    warm_up()
    request_fd, response_fd = config["request_fd"], config["response_fd"]
    module, hello = import_report(config["submission"], config["functions"])
    protocol.write_frame(response_fd, hello)
    if module is None:
        return
    while True:
        try:
            request = protocol.read_frame(request_fd, config["max_frame_bytes"])
        except protocol.ProtocolError:
            return  # the judge went away
        try:
            calls = messages.read_calls(request)
        except ValueError as exc:
            protocol.write_frame(response_fd, messages.request_error(str(exc)))
            continue
        for call in calls:  # one answer per call, each written as soon as it is ready
            protocol.write_frame(response_fd, handle(call, module, config))


if __name__ == "__main__":
    main()
    sys.stdout.flush()
    os._exit(0)  # do not wait for threads the learner may have left running
