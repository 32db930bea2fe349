"""The check registry: each kind of check is a small function from (context, spec) to a result."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

import torch

from .cases import Call
from .compare import Mismatch, compare_tensors
from .observation import Outcome, judge_case
from .report import CheckResult
from .spec import CheckSpec, FunctionSpec, Tolerance
from .verdicts import Verdict


class LearnerFailure(Exception):
    """The learner's side could not produce an observation: it raised, hung, crashed or sent garbage."""

    def __init__(self, verdict: Verdict, message: str) -> None:
        super().__init__(message)
        self.verdict, self.message = verdict, message


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


class Context(Protocol):
    """What a check may ask of the judge; implemented by `judge.Grading`."""

    def cases(self, check: CheckSpec) -> list[Call]: ...
    def expected(self, check: CheckSpec, index: int, call: Call) -> dict: ...
    def observe(self, call: Call) -> dict: ...
    def observe_all(self, calls: list[Call]) -> Iterator[dict | LearnerFailure]: ...
    def signatures(self) -> dict: ...
    def functions(self) -> list[FunctionSpec]: ...
    def tolerances(self) -> dict[str, Tolerance]: ...
    def learner_series(self) -> dict[str, torch.Tensor]: ...
    def reference_series(self) -> dict[str, torch.Tensor]: ...


CheckFunction = Callable[[Context, CheckSpec], "Tally"]
REGISTRY: dict[str, CheckFunction] = {}


def register(kind: str) -> Callable[[CheckFunction], CheckFunction]:
    def add(function: CheckFunction) -> CheckFunction:
        if kind in REGISTRY:
            raise ValueError(f"check kind {kind!r} registered twice")
        REGISTRY[kind] = function
        return function

    return add


@dataclass
class Tally:
    """Per-case outcomes of one check, in order."""

    outcomes: list[tuple[str, bool, Outcome]]  # (case label, hidden, outcome)

    def result(self, check: CheckSpec, duration_s: float) -> CheckResult:
        total = len(self.outcomes)
        passed = sum(o.verdict == Verdict.PASS for _, _, o in self.outcomes)
        failures = [(label, hidden, o) for label, hidden, o in self.outcomes if o.verdict != Verdict.PASS]
        if not failures:
            verdict = Verdict.PASS
            message = learner = f"all {total} cases passed" if total != 1 else "passed"
        else:
            label, hidden, first = failures[0]
            verdict = first.verdict
            evidence = first.mismatch or Mismatch("failed", "failed")
            head = f"{passed}/{total} cases passed. " if total > 1 else ""
            message = f"{head}First failure, case '{label}': {evidence.message}"
            learner = f"{head}First failure: {evidence.learner_message}" if hidden else message
        score = round(check.points * passed / total, 6) if total else 0.0
        return CheckResult(
            id=check.id, title=check.title, verdict=verdict, score=score, max_score=check.points,
            message=message, learner_message=learner, duration_s=round(duration_s, 4),
            cases_passed=passed, cases_total=total, visibility=check.visibility,
        )


def run_check(ctx: Context, check: CheckSpec) -> CheckResult:
    start = time.perf_counter()
    try:
        tally = REGISTRY[check.kind](ctx, check)
    except Exception as exc:  # noqa: BLE001 - a fault of the judge itself, never charged to the learner
        text = f"internal error of the grader, not of your code: {type(exc).__name__}: {exc}"
        # the exception text may quote a hidden case (the reference's own error, say): instructors only
        learner = "internal error of the grader, not of your code; the course staff can see the details"
        return CheckResult(id=check.id, title=check.title, verdict=Verdict.JUDGE_ERROR, score=0.0,
                           max_score=check.points, message=text, learner_message=learner,
                           duration_s=round(time.perf_counter() - start, 4), visibility=check.visibility)
    return tally.result(check, time.perf_counter() - start)


@register("signature")
def check_signatures(ctx: Context, check: CheckSpec) -> Tally:
    found = ctx.signatures()
    outcomes = []
    for function in ctx.functions():
        problem = _signature_problem(function, found.get(function.name))
        outcome = Outcome(Verdict.PASS) if problem is None else Outcome(Verdict.FAIL, Mismatch.of(problem))
        outcomes.append((function.name, False, outcome))
    return Tally(outcomes)


def _signature_problem(function: FunctionSpec, info: dict | None) -> str | None:
    expected = f"expected `{function.signature}`"
    if info is None:
        return f"{function.name} is not defined in your file; {expected}"
    if not info.get("callable"):
        return f"{function.name} is a {info.get('type')}, not a function; {expected}"
    params = info.get("params")
    if not isinstance(params, list):
        return None  # a callable whose signature cannot be read (a builtin, a C extension): let the calls decide
    by_name = {p.get("name"): p for p in params if isinstance(p, dict)}
    takes_kwargs = any(p.get("kind") == "VAR_KEYWORD" for p in by_name.values())
    missing = [n for n in function.params if n not in by_name and not takes_kwargs]
    if missing:
        return f"{function.name} has no parameter named {', '.join(missing)}; {expected}"
    positional_only = [n for n in function.params if by_name.get(n, {}).get("kind") == "POSITIONAL_ONLY"]
    if positional_only:
        return f"{function.name}: {', '.join(positional_only)} must be passable by keyword; {expected}"
    extra = [n for n, p in by_name.items() if n not in function.params and not p.get("has_default")
             and p.get("kind") not in ("VAR_POSITIONAL", "VAR_KEYWORD")]
    if extra:
        return f"{function.name} requires extra parameters {', '.join(extra)}; {expected}"
    return None


@register("differential")
def check_differential(ctx: Context, check: CheckSpec) -> Tally:
    outcomes: list[tuple[str, bool, Outcome]] = []
    calls = ctx.cases(check)
    for index, got in enumerate(ctx.observe_all(calls)):
        call = calls[index]
        if isinstance(got, LearnerFailure):
            outcomes.append((call.label, call.hidden, Outcome(got.verdict, failure_evidence(got))))
            continue
        want = ctx.expected(check, index, call)
        outcomes.append((call.label, call.hidden, judge_case(
            call.function, call.kwargs, got, want, check.compare, ctx.tolerances())))
    if len(outcomes) < len(calls):
        # the worker hung or the budget ran out: one hang is enough evidence, the rest are not run
        verdict = outcomes[-1][2].verdict if outcomes else Verdict.SKIPPED
        rest = Outcome(verdict, Mismatch.of(f"not run after an earlier case ({verdict})"))
        outcomes += [(c.label, c.hidden, rest) for c in calls[len(outcomes):]]
    return Tally(outcomes)


@register("experiment")
def check_experiment(ctx: Context, check: CheckSpec) -> Tally:
    try:
        got = ctx.learner_series()
    except LearnerFailure as failure:
        return Tally([(name, False, Outcome(failure.verdict, Mismatch.of(failure.message))) for name in check.series])
    want = ctx.reference_series()
    tol = None if check.exact else Tolerance(rtol=check.rtol, atol=check.atol)
    outcomes = []
    for name in check.series:
        value = got.get(name)
        if value is None:
            mismatch: Mismatch | None = Mismatch.of(f"the experiment returned no tensor named {name!r}")
        else:
            mismatch = compare_tensors(name, value, want[name], tol)
        outcomes.append((name, False, Outcome(Verdict.PASS) if mismatch is None else Outcome(Verdict.FAIL, mismatch)))
    return Tally(outcomes)
