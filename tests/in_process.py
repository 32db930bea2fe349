"""Grading in the test process: the whole judge (checks, diagnosis, follow-through, scores) over a worker that runs
in process, each frame encoded and accepted as the sandboxed worker's are; the fast tier's proofs grade this way."""

from __future__ import annotations

import contextlib
import io
import sys
import time
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any, TextIO

import pytest

from grader.confine.intake import Submission
from grader.judge import grading
from grader.judge.accept import FunctionMissing, Malformed, accept_answer, accept_frame, accept_hello
from grader.judge.cases import Call
from grader.judge.expectations import Expectations
from grader.judge.failures import LearnerFailure
from grader.judge.supervisor import BUDGET_RAN_OUT
from grader.model.problem import Problem
from grader.model.report import Isolation, Report
from grader.model.spec import Limits
from grader.model.verdicts import Status, Verdict
from grader.worker import messages, protocol
from grader.worker.__main__ import import_report

LEVEL = "in-process"  # what a report graded here says of its isolation: none


def _framed(message: Mapping[str, Any]) -> dict[str, Any]:
    """`message` as the judge reads it from a worker: encoded into a frame, decoded and its tensors checked."""
    return accept_frame(protocol.encode(message)[protocol.HEADER.size :])


def _to_stderr(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    """A warning printed where the worker prints it: on the (redirected) stderr, whatever `file` says."""
    sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


class _NoBox:
    """Stands in for the sandbox's box and slot: nothing to clean up, and a report that says so."""

    def isolation(self) -> Isolation:
        return Isolation(level=LEVEL, uid=None, namespaces=[], filesystem="the test process", limits={})

    def cleanup(self) -> None:
        pass

    def release(self) -> None:
        pass


class InProcessSupervisor:
    """`WorkerSupervisor`'s interface over the submission imported into this process. Requests and answers cross
    the same encoding and the same acceptance as the sandbox's frames (inputs arrive as fresh tensors, answers are
    plain data), and the time budget counts as it does there; no call can hang or crash the worker, so none does."""

    def __init__(self, functions: list[str], submission: Submission, limits: Limits, *_: object) -> None:
        self.functions, self.limits, self.submission = functions, limits, submission
        self.zygote = None
        self.box = self.slot = _NoBox()
        self.module: ModuleType | None = None
        self.phases: dict[str, float] = {}
        self.spawned_at = time.monotonic()
        self.deadline = self.spawned_at + limits.submission_budget_s
        self.hello: dict[str, Any] = {}
        self.stdout: list[str] = []
        self.stderr: list[str] = []
        self.saw_hidden = False
        self.refused_frames = 0
        self.oversized = False

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def refund(self, seconds: float) -> None:
        self.deadline += max(0.0, seconds)

    @contextlib.contextmanager
    def _printing(self) -> Iterator[None]:
        """What the learner's code prints is kept, as the worker's pipes keep it, and its warnings are printed, as
        the worker's default filters print them, never raised by this test run's filters."""
        out, err = io.StringIO(), io.StringIO()
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), warnings.catch_warnings():
                warnings.resetwarnings()
                warnings.showwarning = _to_stderr
                yield
        finally:
            self.stdout.append(out.getvalue())
            self.stderr.append(err.getvalue())

    def start(self) -> Status:
        started = time.monotonic()
        with self._printing():
            self.module, hello = import_report(str(self.submission.path), self.functions)
        self.phases.setdefault("worker_start", round(time.monotonic() - started, 4))
        self.hello = accept_hello(_framed(hello))
        return Status.GRADED if self.hello.get("op") == messages.Op.READY else Status.IMPORT_ERROR

    def stop(self) -> None:
        pass

    def close(self) -> None:
        self.module = None

    def observe_all(
        self, calls: list[Call], timeout_s: float | None = None
    ) -> Iterator[dict[str, Any] | LearnerFailure]:
        if self.remaining() <= 0:
            yield LearnerFailure(Verdict.SKIPPED, BUDGET_RAN_OUT)
            return
        self.saw_hidden |= any(c.hidden for c in calls)
        for request in messages.read_calls(_framed(messages.calls_request([c.request() for c in calls]))):
            try:
                accepted = accept_answer(_framed(self._answer(request)))
            except FunctionMissing:
                failure = LearnerFailure(Verdict.ERROR, f"{request['function']} is not defined in your file")
            except Malformed as exc:
                failure = LearnerFailure(Verdict.FAIL, f"the call's result could not be accepted: {exc}")
            else:
                accepted["tainted"] = self.saw_hidden
                yield accepted
                continue
            failure.tainted = self.saw_hidden
            yield failure

    def _answer(self, request: messages.CallRequest) -> dict[str, Any]:
        function = getattr(self.module, request["function"], None)
        if function is None:
            return dict(messages.missing(request["function"]))
        with self._printing():
            observation = protocol.observe_call(
                function, request["kwargs"], request["requires_grad"], request["backward"], str(self.submission.path)
            )
        return messages.observed(observation)

    def observe_one(self, call: Call, timeout_s: float) -> dict[str, Any]:
        (got,) = list(self.observe_all([call], timeout_s))
        if isinstance(got, LearnerFailure):
            raise got
        return got


def grade_in_process(problem: Problem, files: list[Path], expectations: Expectations, **options: Any) -> list[Report]:
    """Each file graded by `grade` as the sandbox grades it, its worker in this process (see the supervisor above)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(grading, "WorkerSupervisor", InProcessSupervisor)
        # the level names a box, which the supervisor above never builds
        return [
            grading.grade(
                problem, file, expectations.seed, expectations=expectations, level="limits-only", **options
            ).report
            for file in files
        ]
