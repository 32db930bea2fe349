"""Supervise one submission's worker: start it, restart it after a failure, keep to the time budget, and stream
calls to it, every answer accepted (`accept`) before the judge reads it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from grader.confine.intake import Submission
from grader.confine.launch import Launched
from grader.confine.sandbox import Box, Level, Slot
from grader.confine.session import AnswerTooLarge, WorkerCrashed, WorkerProcess, WorkerTimeout
from grader.confine.zygote import Zygote
from grader.judge.accept import FunctionMissing, Malformed, accept_answer, accept_frame, accept_hello
from grader.judge.cases import Call
from grader.judge.failures import LearnerFailure
from grader.model.spec import Limits
from grader.model.verdicts import Status, Verdict
from grader.worker.framing import FrameOverdue, ProtocolError
from grader.worker.messages import Op, calls_request

BUDGET_RAN_OUT = "the submission's time budget ran out before this case"
# Unreadable frames one submission's workers may send before none is started again: an honest worker sends none,
# and each costs the judge the reading of up to a whole frame and a restart, which under load takes seconds.
MAX_REFUSED_FRAMES = 2
KEPT_SENDING_UNREADABLE = (
    f"the worker sent {MAX_REFUSED_FRAMES} unreadable answers; it was not restarted, and this case was not run"
)


class WorkerSupervisor:
    """The worker of one submission, its box and slot, its time budget, and what it has printed.

    At most one worker lives at a time; after a crash or a hang the next call starts a fresh one, in the same box,
    within what is left of the budget. `close` ends the worker and frees the box and the slot.
    """

    def __init__(
        self,
        functions: list[str],
        submission: Submission,
        limits: Limits,
        level: Level,
        launched: Launched | None = None,
        zygote: Zygote | None = None,
    ) -> None:
        self.functions, self.limits, self.zygote = functions, limits, zygote
        self.worker: WorkerProcess | None = None
        self._pending: WorkerProcess | None = None
        self.phases: dict[str, float] = {}
        self.spawned_at = launched.started if launched is not None else time.monotonic()
        if launched is not None:
            self.slot, self.box, self._pending = launched.slot, launched.box, launched.worker
            self.deadline = launched.started + limits.submission_budget_s
        else:
            self.slot = Slot()
            self.box = Box(submission, None, limits, level, self.slot)
            self.deadline = time.monotonic() + limits.submission_budget_s
        self.hello: dict[str, Any] = {}
        self.stdout: list[str] = []
        self.stderr: list[str] = []
        # whether a worker of this submission has been sent a hidden case: from then on, text a worker chooses
        # could carry that case's inputs (a restarted worker too, through files its predecessor left), so
        # learner-facing messages quote none of it
        self.saw_hidden = False
        self.refused_frames = 0
        self.oversized = False  # an answer over the result limit was refused: the report names it as the cause

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def refund(self, seconds: float) -> None:
        """Give back time the judge spent on something other than grading (the plots' own run of the toy)."""
        self.deadline += max(0.0, seconds)

    def start(self) -> Status:
        """Start a worker and wait for its import; the status says how the import went."""
        spawned = self.spawned_at if self._pending is not None else time.monotonic()
        self.worker, self._pending = self._pending or WorkerProcess(self.box, self.functions, self.zygote), None
        timeout = min(self.limits.import_timeout_s, max(self.remaining(), 0.1))
        try:
            hello = self._receive(self.worker, timeout)
            self.phases.setdefault("worker_start", round(time.monotonic() - spawned, 4))
        except WorkerTimeout:
            self.stop()
            return Status.IMPORT_TIMEOUT if self.remaining() > 0 else Status.BUDGET_EXCEEDED
        except WorkerCrashed as exc:
            self.hello = {"op": "import_crashed", "message": str(exc)}  # the judge's own record, never sent
            self.stop()
            return Status.IMPORT_CRASHED
        self.hello = accept_hello(hello)  # a forged hello reads as the learner's import error, never the judge's
        if self.hello.get("op") != Op.READY:
            self.stop()
            return Status.IMPORT_ERROR
        return Status.GRADED

    def stop(self) -> None:
        """End the live worker, keeping what it printed."""
        if self.worker is not None:
            self.worker.close()
            self.stdout.append(self.worker.stdout.text())
            self.stderr.append(self.worker.stderr.text())
            self.worker = None

    def close(self) -> None:
        """End the worker, then free the box and the slot: every process of the submission is gone."""
        self.stop()
        self.box.cleanup()  # before the slot is free: its next holder's processes and files are not ours
        self.slot.release()

    def _receive(self, worker: WorkerProcess, timeout: float) -> dict[str, Any]:
        """The next frame, read as plain data within `timeout`, decoding included; a frame that cannot be read is
        the worker's crash, and is counted."""
        deadline = time.monotonic() + timeout
        try:
            payload = worker.receive(timeout)
        except AnswerTooLarge:
            self.refused_frames += 1
            self.oversized = True
            raise
        try:
            return accept_frame(payload, deadline)
        except FrameOverdue:
            raise WorkerTimeout() from None
        except ProtocolError as exc:
            self.refused_frames += 1
            raise WorkerCrashed(f"the worker sent unreadable data ({exc})") from None

    def _ready_worker(self) -> WorkerProcess:
        """The live worker, restarted if an earlier failure ended it; a LearnerFailure when none can run."""
        if self.remaining() <= 0:
            raise LearnerFailure(Verdict.SKIPPED, BUDGET_RAN_OUT)
        if self.worker is None:
            if self.refused_frames >= MAX_REFUSED_FRAMES:
                raise LearnerFailure(Verdict.CRASHED, KEPT_SENDING_UNREADABLE)
            restarted = self.start()
            if restarted in (Status.IMPORT_TIMEOUT, Status.BUDGET_EXCEEDED) or self.remaining() <= 0:
                raise LearnerFailure(Verdict.SKIPPED, BUDGET_RAN_OUT)
            if restarted != Status.GRADED:
                raise LearnerFailure(Verdict.CRASHED, "the worker could not be restarted after an earlier failure")
        assert self.worker is not None
        return self.worker

    def _failure(self, error: WorkerTimeout | WorkerCrashed, timeout: float) -> LearnerFailure:
        self.stop()
        if isinstance(error, WorkerCrashed):
            return self._tainted(LearnerFailure(Verdict.CRASHED, f"the worker process died during this call: {error}"))
        if self.remaining() <= 0:
            return self._tainted(
                LearnerFailure(Verdict.TIMEOUT, "the submission's time budget ran out during this call")
            )
        return self._tainted(LearnerFailure(Verdict.TIMEOUT, f"no answer within {timeout:.3g} s (infinite loop?)"))

    def _tainted(self, failure: LearnerFailure) -> LearnerFailure:
        """`failure`, marked when a worker had been sent a hidden case: a death, a hang or a refusal is then the
        learner's choice made while holding that case's inputs (an exit status, a signal, a frame's size and
        the moment of a hang can each spell some of them out), so a learner reads none of its detail."""
        failure.tainted = self.saw_hidden
        return failure

    def observe_all(
        self, calls: list[Call], timeout_s: float | None = None
    ) -> Iterator[dict[str, Any] | LearnerFailure]:
        """Observe every call in order, one accepted observation or failure each.

        The calls go out in one frame and the answers stream back one by one, so the judge compares case k
        while the worker computes case k + 1; each answer has its own time limit, the problem's call limit or
        `timeout_s` if less. After a crash the remaining calls go to a fresh worker.
        """
        per_call = self.limits.call_timeout_s if timeout_s is None else min(timeout_s, self.limits.call_timeout_s)
        pending = list(calls)
        while pending:
            try:
                worker = self._ready_worker()
                timeout = min(per_call, self.remaining())
                # before the frame goes out: a worker that dies reading half of it may already hold a hidden case
                self.saw_hidden |= any(c.hidden for c in pending)
                worker.send(calls_request([c.request() for c in pending]), timeout)
            except LearnerFailure as failure:
                yield self._tainted(failure)
                return
            except (WorkerTimeout, WorkerCrashed) as exc:
                yield self._failure(exc, timeout)
                return
            for index, call in enumerate(pending):
                timeout = min(per_call, self.remaining())
                try:
                    answer = self._receive(worker, timeout)
                except (WorkerTimeout, WorkerCrashed) as exc:
                    lost = self._failure(exc, timeout)
                    yield lost
                    if lost.verdict != Verdict.CRASHED:
                        return
                    pending = pending[index + 1 :]
                    break
                try:
                    accepted = self._accept(call, answer)
                except LearnerFailure as failure:
                    yield self._tainted(failure)
                else:
                    accepted["tainted"] = self.saw_hidden
                    yield accepted
            else:
                pending = []

    def observe_one(self, call: Call, timeout_s: float) -> dict[str, Any]:
        """One call on its own (the toy's calls); a LearnerFailure when it yields no acceptable answer."""
        (got,) = list(self.observe_all([call], timeout_s))
        if isinstance(got, LearnerFailure):
            raise got
        return got

    def _accept(self, call: Call, answer: dict[str, Any]) -> dict[str, Any]:
        try:
            return accept_answer(answer)
        except FunctionMissing:
            raise LearnerFailure(Verdict.ERROR, f"{call.function} is not defined in your file") from None
        except Malformed as exc:
            raise LearnerFailure(Verdict.FAIL, f"the call's result could not be accepted: {exc}") from None
