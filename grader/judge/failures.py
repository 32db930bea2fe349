"""Why the learner's side gave no observation: a call's failure, a toy part's failure, and their hidden-safe text."""

from __future__ import annotations

from grader.judge.compare import Mismatch
from grader.model.verdicts import Verdict


class LearnerFailure(Exception):
    """The learner's side could not produce an observation: it raised, hung, crashed or sent garbage."""

    def __init__(self, verdict: Verdict, message: str) -> None:
        super().__init__(message)
        self.verdict, self.message = verdict, message
        self.tainted = False  # set when the worker had been sent a hidden case before it failed


# What a hidden case's learner-facing message says about a learner failure: the failure's own message can carry
# text from the learner's process (an exception, a forged frame), which could echo the case's inputs.
HIDDEN_FAILURE_TEXT = {
    Verdict.FAIL: "the call's result could not be accepted (return plain tensors and Python numbers)",
    Verdict.ERROR: "the function could not be called on this case",
    Verdict.TIMEOUT: "no answer within the time limit (infinite loop?)",
    Verdict.CRASHED: "the worker process died during this call",
    Verdict.SKIPPED: "not run: the submission's time budget ran out",
}


def failure_evidence(failure: LearnerFailure) -> Mismatch:
    return Mismatch(failure.message, HIDDEN_FAILURE_TEXT.get(failure.verdict, "the call failed"))


class CallFailed(Exception):
    """A contract function could not give the toy what it needed; the part that called it stops."""

    def __init__(self, verdict: Verdict, message: str) -> None:
        super().__init__(message)
        self.verdict, self.message = verdict, message
