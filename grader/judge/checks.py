"""The check registry: each kind of check is a small function from (context, spec) to a result."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, Protocol

import torch

from grader.judge.cases import Call
from grader.judge.compare import (
    NO_RESPONSE,
    Mismatch,
    Outcome,
    answer_key,
    compare_series,
    compare_tensors,
    constant_answers,
    differs_only_in_form,
    fails_alike,
    input_context,
    judge_case,
    same_as,
)
from grader.judge.diagnosis import NO_CREDIT, Credit, follow_through
from grader.judge.experiment import PartResult
from grader.judge.failures import CallFailed, LearnerFailure, failure_evidence
from grader.model.misconceptions import Misconception
from grader.model.report import CheckResult, round_score
from grader.model.spec import CheckSpec, FunctionSpec, Tolerance
from grader.model.verdicts import Verdict


class Context(Protocol):
    """What a check may ask of the judge; implemented by `context.CheckContext`."""

    def cases(self, check: CheckSpec) -> list[Call]: ...
    def expected(self, check: CheckSpec, index: int, call: Call) -> dict[str, Any]: ...
    def expected_float32(self, check: CheckSpec, index: int, call: Call) -> dict[str, Any] | None: ...
    def observe_all(self, calls: list[Call]) -> Iterator[dict[str, Any] | LearnerFailure]: ...
    def signatures(self) -> dict[str, Any]: ...
    def answered(self) -> set[str]: ...
    def functions(self) -> list[FunctionSpec]: ...
    def tolerances(self) -> dict[str, Tolerance]: ...
    def experiment(self) -> list[PartResult]: ...
    def reference_series(self) -> dict[str, torch.Tensor]: ...
    def series_part(self, series: str) -> str: ...
    def series_hidden(self) -> bool: ...
    def misconception_observations(self, check: CheckSpec, index: int) -> dict[str, dict[str, Any]]: ...
    def misconception_series(self) -> dict[str, dict[str, torch.Tensor]]: ...


CheckFunction = Callable[[Context, CheckSpec], "Tally"]
REGISTRY: dict[str, CheckFunction] = {}
# Kinds that send no call and read what the other checks' calls answered (`Context.answered`): they run after every
# other check, and their time is the judge's own.
READS_ANSWERS: set[str] = set()


def register(kind: str, reads_answers: bool = False) -> Callable[[CheckFunction], CheckFunction]:
    def add(function: CheckFunction) -> CheckFunction:
        if kind in REGISTRY:
            raise ValueError(f"check kind {kind!r} registered twice")
        REGISTRY[kind] = function
        if reads_answers:
            READS_ANSWERS.add(kind)
        return function

    return add


@dataclass(frozen=True)
class CaseOutcome:
    """One call's outcome inside a check; `group` ties calls that pass only together (see `Call.group`).

    `explained_by` names the misconceptions whose answer a failing case's answer matches, `fails_like` those that
    fail it the same way (an exception of the same class, a series neither could make); `form_only` says the
    answer differs from the expected one only in form (see `diagnosis`). `answer` keeps a failing case's accepted
    observation, so that diagnosis can match it against misreadings combined after the check has run (`combined`).
    """

    label: str
    hidden: bool
    outcome: Outcome
    group: str | None = None
    explained_by: tuple[str, ...] = ()
    fails_like: tuple[str, ...] = ()
    form_only: bool = False
    answer: dict[str, Any] | None = field(default=None, compare=False, repr=False)
    combined: tuple[str, ...] = ()  # the misreadings held together that explain it, when no one does alone

    @property
    def passed(self) -> bool:
        return self.outcome.verdict == Verdict.PASS


@dataclass
class Tally:
    """Per-case outcomes of one check, in order."""

    outcomes: list[CaseOutcome]

    def groups(self) -> list[list[CaseOutcome]]:
        """Cases as they are scored: each group of calls together, every ungrouped call alone, in first-seen order."""
        grouped: dict[object, list[CaseOutcome]] = {}
        for index, case in enumerate(self.outcomes):
            grouped.setdefault(("group", case.group) if case.group is not None else index, []).append(case)
        return list(grouped.values())

    def result(self, check: CheckSpec, duration_s: float, credit: Credit = NO_CREDIT) -> CheckResult:
        """The check's verdict and score; a failing case that follow-through carries (see `diagnosis`) counts as
        passed and is named in the message."""
        # a toy's series outside its tolerance shows another phenomenon than the reference's, whatever misreading
        # made it: the toy owns it, and follow-through never carries it (the plots mark those very points)
        carried = {
            id(c): mid
            for c in self.outcomes
            if not c.passed
            and check.kind != "experiment"
            and (mid := follow_through(check.id, check.tier, c.explained_by, c.fails_like, c.form_only, credit))
            is not None
        }
        groups = self.groups()
        total = len(groups)
        passed = sum(all(c.passed or id(c) in carried for c in group) for group in groups)
        passed_alone = sum(all(c.passed for c in group) for group in groups)
        failures = [c for c in self.outcomes if not c.passed and id(c) not in carried]
        note = _follow_through_note(carried, credit.charged)
        if not failures:
            verdict = Verdict.PASS
            message = learner = (f"all {total} cases passed" if total != 1 else "passed") + note
        else:
            first = failures[0]
            verdict = first.outcome.verdict
            evidence = first.outcome.mismatch or Mismatch("failed", "failed")
            head = f"{passed}/{total} cases passed. " if total > 1 else ""
            message = f"{head}First failure, case '{first.label}': {evidence.message}{note}"
            shown = evidence.learner_message if first.hidden else evidence.message
            learner = f"{head}First failure, case '{first.label}': {shown}{note}"
        score = round_score(check.points * passed / total) if total else 0.0
        score_alone = round_score(check.points * passed_alone / total) if total else 0.0
        return CheckResult(
            id=check.id,
            title=check.title,
            verdict=verdict,
            score=score,
            max_score=check.points,
            message=message,
            learner_message=learner,
            duration_s=round(duration_s, 4),
            cases_passed=passed,
            cases_total=total,
            visibility=check.visibility,
            cases_followed_through=len(carried),
            followed_through=sorted(set(carried.values())),
            points_followed_through=round_score(score - score_alone),
        )


def _follow_through_note(carried: dict[int, str], charged: Mapping[str, Misconception]) -> str:
    if not carried:
        return ""
    mids = sorted(set(carried.values()))
    owners = sorted({owner for mid in mids for owner in charged[mid].owners})
    cases = "case" if len(carried) == 1 else "cases"
    return (
        f" ({len(carried)} {cases} credited by follow-through: the result matches the misreading "
        f"{', '.join(mids)}, charged in {', '.join(owners)})"
    )


@dataclass
class CheckRun:
    """A check that has run: its cases' outcomes, or the judge's own failure, awaiting the diagnosis."""

    check: CheckSpec
    duration_s: float
    tally: Tally | None = None
    judge_error: CheckResult | None = None

    def result(self, credit: Credit = NO_CREDIT) -> CheckResult:
        if self.judge_error is not None:
            return self.judge_error
        assert self.tally is not None
        return self.tally.result(self.check, self.duration_s, credit)


def run_check(ctx: Context, check: CheckSpec) -> CheckRun:
    start = time.perf_counter()
    try:
        tally = REGISTRY[check.kind](ctx, check)
    except Exception as exc:  # a fault of the judge itself, never charged to the learner
        text = f"internal error of the grader, not of your code: {type(exc).__name__}: {exc}"
        # the exception text may quote a hidden case (the reference's own error, say): instructors only
        learner = "internal error of the grader, not of your code; the course staff can see the details"
        duration = time.perf_counter() - start
        return CheckRun(
            check,
            duration,
            judge_error=CheckResult(
                id=check.id,
                title=check.title,
                verdict=Verdict.JUDGE_ERROR,
                score=0.0,
                max_score=check.points,
                message=text,
                learner_message=learner,
                duration_s=round(duration, 4),
                visibility=check.visibility,
            ),
        )
    return CheckRun(check, time.perf_counter() - start, tally=tally)


@register("signature", reads_answers=True)
def check_signatures(ctx: Context, check: CheckSpec) -> Tally:
    """One case per contract function: its signature is the contract's, and one of its calls on a visible case
    returned a value. A right signature alone earns nothing: an unmodified starter (every body raises) and a
    function that never returns have the contract's signatures and have implemented nothing."""
    found, answered = ctx.signatures(), ctx.answered()
    outcomes = []
    for function in ctx.functions():
        problem = _signature_problem(function, found.get(function.name))
        if problem is None and function.name not in answered:
            problem = (
                f"{function.name} has the contract's signature, but none of its calls on the visible cases returned "
                "a value (each raised, hung or crashed: the checks below say how); this check passes once one does"
            )
        outcome = Outcome(Verdict.PASS) if problem is None else Outcome(Verdict.FAIL, Mismatch.of(problem))
        outcomes.append(CaseOutcome(function.name, False, outcome))
    return Tally(outcomes)


def _signature_problem(function: FunctionSpec, info: dict[str, Any] | None) -> str | None:
    expected = f"expected `{function.signature}`"
    if info is None:
        return f"{function.name} is not defined in your file; {expected}"
    if not info.get("callable"):
        return f"{function.name} is a {info.get('type')}, not a function; {expected}"
    params = info.get("params")
    if not isinstance(params, list):
        return None  # a callable whose signature cannot be read (a builtin, a C extension): let the calls decide
    by_name = {p["name"]: p for p in params if isinstance(p, dict)}  # names checked by `accept_hello`
    takes_kwargs = any(p.get("kind") == "VAR_KEYWORD" for p in by_name.values())
    missing = [n for n in function.params if n not in by_name and not takes_kwargs]
    if missing:
        return f"{function.name} has no parameter named {', '.join(missing)}; {expected}"
    positional_only = [n for n in function.params if by_name.get(n, {}).get("kind") == "POSITIONAL_ONLY"]
    if positional_only:
        return f"{function.name}: {', '.join(positional_only)} must be passable by keyword; {expected}"
    extra = [
        n
        for n, p in by_name.items()
        if n not in function.params
        and not p.get("has_default")
        and p.get("kind") not in ("VAR_POSITIONAL", "VAR_KEYWORD")
    ]
    if extra:
        return f"{function.name} requires extra parameters {', '.join(extra)}; {expected}"
    return None


@register("differential")
def check_differential(ctx: Context, check: CheckSpec) -> Tally:
    calls = ctx.cases(check)
    # visible calls go out first: once the worker holds a hidden case, what it says is no longer quotable
    order = sorted(range(len(calls)), key=lambda i: calls[i].hidden)
    specs = {f.name: f for f in ctx.functions()}
    outcomes: dict[int, CaseOutcome] = {}
    answers: dict[int, dict[str, Any]] = {}
    for index, got in zip(order, ctx.observe_all([calls[i] for i in order]), strict=False):
        call = calls[index]
        aspects = call.aspects(check.compare)
        if isinstance(got, LearnerFailure):
            outcome = Outcome(got.verdict, failure_evidence(got))
            tainted = got.tainted
        else:
            spec = specs.get(call.function)
            context = (
                None if call.hidden or spec is None else input_context(call.kwargs, spec.mask_param, spec.group_param)
            )
            outcome = judge_case(
                call.function,
                call.kwargs,
                got,
                ctx.expected(check, index, call),
                aspects,
                ctx.tolerances(),
                context,
                lower=ctx.expected_float32(check, index, call),
            )
            tainted = bool(got.get("tainted"))
            answers[index] = got
        explained: tuple[str, ...] = ()
        failed_alike: tuple[str, ...] = ()
        form_only = False
        if outcome.verdict != Verdict.PASS and not isinstance(got, LearnerFailure):
            theirs = ctx.misconception_observations(check, index)
            tolerances = ctx.tolerances()
            lowered = ctx.expected_float32(check, index, call) is not None
            sent = (call.function, call.kwargs, got)
            explained = _matching(
                theirs, partial(same_as, *sent, aspects=aspects, tolerances=tolerances, lowered=lowered)
            )
            failed_alike = _matching(theirs, partial(fails_alike, *sent, aspects=aspects, tolerances=tolerances))
            form_only = bool(explained) and differs_only_in_form(
                call.kwargs, got, ctx.expected(check, index, call), aspects, tolerances
            )
        # a tainted answer's failure is told as a hidden case's would be: its text is the learner's own
        kept = got if outcome.verdict != Verdict.PASS and not isinstance(got, LearnerFailure) else None
        outcomes[index] = CaseOutcome(
            call.label, call.hidden or tainted, outcome, call.group, explained, failed_alike, form_only, kept
        )
    if len(outcomes) < len(calls):
        # the worker hung or the budget ran out: one hang is enough evidence, the rest are not run
        last = outcomes[order[len(outcomes) - 1]].outcome.verdict if outcomes else Verdict.SKIPPED
        rest = Outcome(last, Mismatch.of(f"not run after an earlier case ({last})"))
        for index in order[len(outcomes) :]:
            outcomes[index] = CaseOutcome(calls[index].label, calls[index].hidden, rest, calls[index].group)
    if "responds" in check.compare:
        _judge_responses(ctx, check, calls, answers, outcomes)
    return Tally([outcomes[i] for i in range(len(calls))])


def _matching(theirs: dict[str, dict[str, Any]], matches: Callable[[dict[str, Any]], bool]) -> tuple[str, ...]:
    """The misreadings whose observation `matches`, in declaration order, each shared observation asked once
    (`Expectations.misconception_observations` shares the observations of misreadings that answer alike)."""
    answers: dict[int, bool] = {}
    for obs in theirs.values():
        if id(obs) not in answers:
            answers[id(obs)] = matches(obs)
    return tuple(mid for mid, obs in theirs.items() if answers[id(obs)])


def _judge_responses(
    ctx: Context,
    check: CheckSpec,
    calls: list[Call],
    answers: dict[int, dict[str, Any]],
    outcomes: dict[int, CaseOutcome],
) -> None:
    """The `responds` aspect: where a function's answers over the check's calls stay one answer while the
    expected ones change, every passing call of that function that returned fails. Nothing of the expected values
    is compared, only whether answers change: a property check keeps its defence against a constant answer
    without charging a value that another check owns."""
    for function in {call.function for call in calls}:
        keyed = [
            (index, mine, theirs)
            for index, got in answers.items()
            if calls[index].function == function
            and "responds" in calls[index].aspects(check.compare)
            and (mine := answer_key(got)) is not None
            and (theirs := answer_key(ctx.expected(check, index, calls[index]))) is not None
        ]
        if len(keyed) < 2 or not constant_answers([k[1] for k in keyed], [k[2] for k in keyed]):
            continue
        for index, _, _ in keyed:
            case = outcomes[index]
            if case.passed:
                outcomes[index] = replace(case, outcome=Outcome(Verdict.FAIL, NO_RESPONSE))


@register("experiment")
def check_experiment(ctx: Context, check: CheckSpec) -> Tally:
    """Each series of the check against the reference's; a series whose part failed carries that failure."""
    failures = {}
    produced: dict[str, torch.Tensor] = {}
    for part in ctx.experiment():
        produced.update(part.series)
        if part.failure is not None:
            failures[part.name] = part.failure
    want = ctx.reference_series()
    hidden = ctx.series_hidden()  # a grading seed's reference series are the answer: no learner reads them
    tol = None if check.exact else Tolerance(rtol=check.rtol, atol=check.atol)
    outcomes = []
    for name in check.series:
        value = produced.get(name)
        if value is None:
            failed = _failure_for(name, failures, ctx) if failures else None
            outcome = (
                Outcome(failed.verdict, Mismatch.of(failed.message))
                if failed
                else Outcome(Verdict.FAIL, Mismatch.of(f"the experiment produced no series named {name!r}"))
            )
            # a misreading whose own toy cannot make this series fails alike: both parts failed on an answer
            failed_alike = (
                tuple(mid for mid, series in ctx.misconception_series().items() if name not in series)
                if failed is not None and failed.verdict in (Verdict.ERROR, Verdict.FAIL)
                else ()
            )
            outcomes.append(CaseOutcome(name, hidden, outcome, fails_like=failed_alike))
        else:
            mismatch = compare_series(name, value, want[name], tol)
            outcome = Outcome(Verdict.PASS) if mismatch is None else Outcome(Verdict.FAIL, mismatch)
            explained = () if mismatch is None else _series_explained(ctx, name, value, tol)
            outcomes.append(CaseOutcome(name, hidden, outcome, explained_by=explained))
    return Tally(outcomes)


def _series_explained(ctx: Context, name: str, value: torch.Tensor, tol: Tolerance | None) -> tuple[str, ...]:
    """The misconceptions whose toy produced this very series."""
    return tuple(
        mid
        for mid, series in ctx.misconception_series().items()
        if name in series and compare_tensors(name, value, series[name], tol) is None
    )


def _failure_for(series: str, failures: dict[str, CallFailed], ctx: Context) -> CallFailed:
    """The failure of the part that makes `series` (the reference's run says which part that is)."""
    return failures.get(ctx.series_part(series)) or next(iter(failures.values()))
