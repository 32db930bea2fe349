"""Grade one submission: start its worker, run every check in order, diagnose, and assemble the report."""

from __future__ import annotations

import platform
import time
import weakref
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from grader import __version__
from grader.confine.intake import Submission, read_submission
from grader.confine.launch import Launched
from grader.confine.sandbox import Level, best_level
from grader.confine.zygote import Zygote
from grader.judge.checks import READS_ANSWERS, CaseOutcome, CheckRun, run_check
from grader.judge.combinations import Combined, case_points, find_combined, record
from grader.judge.compare import judge_case
from grader.judge.context import CheckContext, ExpectedSide, GradedProblem
from grader.judge.diagnosis import NO_CREDIT, Explained, Finding, candidates, credit_for, diagnose
from grader.judge.expectations import Expectations
from grader.judge.localise import CheckCases, NamedFeature, problem_features, unexplained_cases
from grader.judge.supervisor import WorkerSupervisor
from grader.model.problem import Problem
from grader.model.report import (
    CheckResult,
    Diagnosis,
    Report,
    TierResult,
    UnexplainedCases,
    Versions,
    reproduce_command,
    score_sum,
)
from grader.model.spec import CheckSpec, Limits
from grader.model.verdicts import Status, Verdict


def import_failure_message(status: Status, hello: dict[str, Any], submission: Path, limits: Limits) -> str:
    if status == Status.IMPORT_TIMEOUT:
        return f"importing {submission.name} did not finish within {limits.import_timeout_s:g} s"
    if status == Status.IMPORT_CRASHED:
        return f"the worker died while importing {submission.name}: {hello.get('message')}"
    if status == Status.BUDGET_EXCEEDED:
        return "the submission's time budget ran out during import"
    line = f" line {hello['line']}" if hello.get("line") else ""
    return f"importing {submission.name} failed at{line or ' import'}: {hello.get('type')}: {hello.get('message')}"


@dataclass(frozen=True)
class Graded:
    report: Report
    series: dict[str, torch.Tensor] | None  # the learner's toy series at the public seed, for plots
    plot_failures: dict[str, str] = field(default_factory=dict)  # toy parts of that run with no series, and why


def grade(
    problem: GradedProblem,
    submission: Path | Submission,
    seed: int,
    limits: Limits | None = None,
    expectations: ExpectedSide | None = None,
    level: Level | None = None,
    command: str = "",
    launched: Launched | None = None,
    series_sink: Callable[[dict[str, torch.Tensor] | None], None] | None = None,
    zygote: Zygote | None = None,
    follow_through: bool | None = None,
) -> Graded:
    """Grade `submission` against `problem`; every process of the submission is gone when this returns.

    With a `zygote`, workers are forked from it rather than started afresh (a batch's way to skip `import torch`).
    A path is read here, once (or taken from `launched`, which read it); a file `intake` refuses starts no worker
    and scores nothing, its report saying what was expected.
    """
    submission = _intake(submission, launched)
    if submission.refusal:
        if launched is not None:
            launched.discard()
        return Graded(_refused(problem, submission, seed, command), None)
    limits = limits or problem.spec.limits
    if expectations is None:
        if not isinstance(problem, Problem):
            raise TypeError(f"grading {problem.id} needs its expectations: only a whole problem can compute them")
        expectations = Expectations(problem, seed)
    expectations.warm()
    if launched is not None and (launched.submission != submission or launched.limits != limits):
        launched.discard()
        launched = None
    level = launched.level if launched is not None else level or best_level()
    supervisor = WorkerSupervisor([f.name for f in problem.spec.functions], submission, limits, level, launched, zygote)
    context = CheckContext(problem, expectations, supervisor)
    results: list[CheckResult] = []
    findings: list[Finding] = []
    cases: list[CheckCases] = []
    follow = problem.spec.follow_through if follow_through is None else follow_through
    try:
        status = supervisor.start()
        if status != Status.GRADED:
            why = import_failure_message(status, supervisor.hello, submission.path, limits)
            results = [_skipped(c, why) for c in problem.spec.checks]
        else:
            why = ""
            if series_sink is not None:
                series_sink(_prefetch_series(context, problem))
            results, findings, status, cases = _judge(problem, context, follow)
            why = oversized_message(limits) if supervisor.oversized else ""
    finally:
        supervisor.close()
    persist = getattr(expectations, "persist", None)
    if persist is not None:
        persist()  # misconception observations computed on the way are kept for the next grade
    # from the worker's start (an early-launched one started before the judge's own imports), so that every
    # phase lies within the duration
    listing = time.monotonic()
    diagnosis = [_diagnosis_entry(f, cases) for f in findings]
    unexplained = _unexplained(findings, cases, problem_features(problem))
    if "diagnosis" in supervisor.phases:  # what the diagnosis leaves unexplained is part of its cost
        supervisor.phases["diagnosis"] = round(supervisor.phases["diagnosis"] + time.monotonic() - listing, 4)
    report = _assemble(
        problem, submission, seed, status, results, supervisor, why, time.monotonic() - supervisor.spawned_at, command
    )
    report.diagnosis = diagnosis
    report.unexplained = unexplained
    report.follow_through = follow
    return Graded(report, context.plotted, context.plot_failures)


def oversized_message(limits: Limits) -> str:
    """The cause of every check that failed on a refused answer, said once at the top of the report."""
    return (
        f"answers larger than the {limits.result_mb} MB result limit were refused, and the checks that called for "
        "them failed: return only what the contract asks for (no history kept across calls, no copies of the inputs)"
    )


def _intake(submission: Path | Submission, launched: Launched | None) -> Submission:
    """The submission's bytes: as given, as the early launch read them for the same path, or read now."""
    if isinstance(submission, Submission):
        return submission
    if launched is not None and launched.submission.path == submission:
        return launched.submission
    return read_submission(submission)


def _refused(problem: GradedProblem, submission: Submission, seed: int, command: str) -> Report:
    """The report of a file that is not graded: every check skipped for the one reason, no score."""
    results = [_skipped(check, submission.refusal) for check in problem.spec.checks]
    return _report(problem, submission, seed, command, Status.REFUSED, _tiers(problem, results), submission.refusal)


def _judge(
    problem: GradedProblem, context: CheckContext, follow: bool
) -> tuple[list[CheckResult], list[Finding], Status, list[CheckCases]]:
    """Every check against a started worker, the diagnosis of their failures, the results it charges, and each
    check's cases for saying what the diagnosis leaves unexplained."""
    supervisor = context.supervisor
    runs: dict[str, CheckRun] = {}
    # checks that ended before a worker was sent any hidden case, and those that send no call at all (their time
    # is the judge's alone, whenever they run)
    timed_publicly: set[str] = set()
    for check in visible_first(problem.spec.checks, context.expect):
        runs[check.id] = run_check(context, check)
        if not supervisor.saw_hidden or check.kind in READS_ANSWERS:
            timed_publicly.add(check.id)
    diagnosing = time.monotonic()
    failing = _failing_cases(runs.values())
    against = Contradictions(context, list(runs.values()))
    combined = find_combined(context, list(runs.values()), problem.misconceptions, against.counted)
    while True:
        # a combination explains its cases only when diagnosis names every member: a case charged to one member
        # and carried forward through another would be credited for a departure no one is charged with
        undo = record(combined)
        failing = _failing_cases(runs.values())  # a member of a combination may explain nothing alone
        contradicted = against.counted(candidates(failing))
        findings = diagnose(failing, problem.misconceptions, contradicted)
        named = {f.misconception.id for f in findings}
        held = [c for c in combined if set(c.ids) <= named]
        if len(held) == len(combined):
            break
        undo()
        combined = held
    findings = _naming_fitted(findings, combined)
    supervisor.phases["diagnosis"] = round(time.monotonic() - diagnosing, 4)
    visible = {check.id for check in problem.spec.checks if check.visibility == "visible"}
    charged = {f.misconception.id: f.misconception for f in findings}
    held_back = frozenset(f.misconception.id for f in findings if f.held_back)
    credit = credit_for(failing, charged, contradicted, held_back) if follow else NO_CREDIT
    # a visible check's score must follow from visible results alone (a learner reads it before hidden
    # results are published): it carries forward only misreadings a visible owner check charges
    # (faithfulness and form included, judged on the visible checks' cases alone)
    visibly = NO_CREDIT
    if follow:
        visibly = credit_for(
            [case for case in failing if case.check in visible],
            {mid: m for mid, m in charged.items() if _charged_in(findings, mid, visible)},
            against.counted(candidates(failing), visible),
            held_back,
        )
    results = [runs[c.id].result(visibly if c.id in visible else credit) for c in problem.spec.checks]
    for result in results:
        result.duration_public = result.id in timed_publicly
    status = Status.GRADED
    if any(r.verdict == Verdict.JUDGE_ERROR for r in results):
        status = Status.JUDGE_ERROR
    elif any(r.verdict == Verdict.SKIPPED for r in results) or supervisor.remaining() <= 0:
        status = Status.BUDGET_EXCEEDED
    cases = [
        CheckCases(run.check.id, run.tally.outcomes, context.cases(run.check) if run.check.cases else None)
        for run in (runs[c.id] for c in problem.spec.checks)
        if run.tally is not None
    ]
    return results, findings, status, cases


def visible_first(checks: list[CheckSpec], expectations: ExpectedSide) -> list[CheckSpec]:
    """Checks in the order they run: those without a hidden case first, so that no learner-facing message of a
    visible case can quote text from a worker that has already been sent a hidden case's inputs; last, the kinds
    that read what the calls answered (they send no call and quote nothing a worker said after its import)."""

    def has_hidden(check: CheckSpec) -> bool:
        return check.cases is not None and any(call.hidden for call in expectations.cases(check.cases))

    return sorted(checks, key=lambda check: (check.kind in READS_ANSWERS, has_hidden(check)))


def _prefetch_series(context: CheckContext, problem: GradedProblem) -> dict[str, torch.Tensor] | None:
    """Run the toy experiment at the public seed first, so its plots can be drawn while the checks run."""
    if not any(c.kind == "experiment" for c in problem.spec.checks):
        return None
    return context.plotted_series()  # a part that failed has no series; `plot_failures` says why


class Contradictions:
    """For each suspected misreading, the learner's passing cases where its own solution fails: evidence that the
    learner does not hold it. Counted once per misreading, check and function, so that the visible checks' counts
    and those of a misreading suspected later cost nothing more; nothing is computed when nothing failed.

    Only the functions where a misreading explains a failing case count against it: a learner who computes one
    function in float32 and another in float64 holds the misreading in the first, and passing the second's cases
    says nothing about it. A misreading that explains no failing call of a function (a toy's series, or nothing yet)
    is counted over every function."""

    def __init__(self, context: CheckContext, runs: list[CheckRun]) -> None:
        self.context, self.runs = context, runs
        self._by_place: dict[str, dict[tuple[str, str], int]] = {}  # misreading -> (check, function) -> count

    def counted(self, suspects: set[str], checks: set[str] | None = None) -> dict[str, int]:
        """Each suspect's count over every check, or over `checks`, in the functions where it explains a failure."""
        self._count(suspects - set(self._by_place))
        where = self._functions_explained()
        return {
            mid: sum(
                n
                for (check, function), n in self._by_place[mid].items()
                if (checks is None or check in checks) and (mid not in where or function in where[mid])
            )
            for mid in suspects
        }

    def _functions_explained(self) -> dict[str, set[str]]:
        """The functions whose failing calls each misreading explains, for those that explain only calls."""
        functions: dict[str, set[str]] = {}
        elsewhere: set[str] = set()
        for run in self.runs:
            if run.tally is None:
                continue
            calls = self.context.cases(run.check) if run.check.kind == "differential" else None
            for index, case in enumerate(run.tally.outcomes):
                if case.passed:
                    continue
                for mid in (*case.explained_by, *case.fails_like, *case.combined):
                    if calls is None:
                        elsewhere.add(mid)
                    else:
                        functions.setdefault(mid, set()).add(calls[index].function)
        return {mid: found for mid, found in functions.items() if mid not in elsewhere}

    def _count(self, suspects: set[str]) -> None:
        for mid in suspects:
            self._by_place[mid] = {}
        if not suspects:
            return
        fails = _MISREADING_FAILS.setdefault(self.context.expect, {})
        for run in self.runs:
            if run.tally is None or run.check.kind != "differential":
                continue
            calls = self.context.cases(run.check)
            for index, case in enumerate(run.tally.outcomes):
                if not case.passed:
                    continue
                unknown = [mid for mid in suspects if (run.check.id, index, mid) not in fails]
                if unknown:
                    fails.update(self._judged(run.check, index, unknown))
                key = (run.check.id, calls[index].function)
                for mid in suspects:
                    counts = self._by_place[mid]
                    counts[key] = counts.get(key, 0) + fails[run.check.id, index, mid]

    def _judged(self, check: CheckSpec, index: int, suspects: list[str]) -> dict[tuple[str, int, str], bool]:
        """Whether each misreading's own solution fails case `index` of `check`."""
        context = self.context
        call = context.cases(check)[index]
        want = context.expected(check, index, call)
        # at the tolerance the learner's own answer passed: a misreading within float32's rounding of a case
        # compared at float32's precision is not contradicted by the learner passing it
        lower = context.expected_float32(check, index, call)
        theirs = context.misconception_observations(check, index)
        # on the aspects the case was judged on: a partner call answers, its values are not its check's
        aspects = call.aspects(check.compare)
        judged = {}
        for mid in suspects:
            try:
                verdict = judge_case(
                    call.function, call.kwargs, theirs[mid], want, aspects, context.tolerances(), lower=lower
                ).verdict
            except AssertionError:  # the misreading raised where the check expects no exception
                verdict = Verdict.FAIL
            judged[check.id, index, mid] = verdict != Verdict.PASS
        return judged


# Whether a misreading's solution fails a case depends on the expected side alone, never on the learner: kept per
# expected side, so that a batch judges each misreading on each case once.
_MISREADING_FAILS: weakref.WeakKeyDictionary[object, dict[tuple[str, int, str], bool]] = weakref.WeakKeyDictionary()


def _naming_fitted(findings: list[Finding], combined: Sequence[Combined]) -> list[Finding]:
    """The findings with each fitted parameter named in its misreading's explanation ("It behaves as if eps =
    0.0001.")."""
    fitted = {mid: value for match in combined for mid, value in match.fitted}
    named = []
    for finding in findings:
        m = finding.misconception
        if m.id in fitted and m.parameter is not None:
            explanation = f"{m.explanation} {m.parameter.sentence(fitted[m.id])}"
            finding = replace(finding, misconception=m.model_copy(update={"explanation": explanation}))
        named.append(finding)
    return named


def _charged_in(findings: list[Finding], misconception: str, checks: set[str]) -> bool:
    """Whether `misconception` is charged in one of `checks`: an owner among them has a case it explains."""
    return any(f.misconception.id == misconception and set(f.owners_charged) & checks for f in findings)


def _failing_cases(runs: Iterable[CheckRun]) -> list[Explained]:
    return [
        Explained(
            run.check.id,
            (*case.explained_by, *case.fails_like),
            case.fails_like,
            case.form_only,
            points,
            case.combined,
            run.check.kind == "experiment",
        )
        for run in runs
        if run.tally is not None
        for case, points in zip(run.tally.outcomes, case_points(run), strict=True)
        if not case.passed
    ]


def _diagnosis_entry(finding: Finding, cases: list[CheckCases]) -> Diagnosis:
    m = finding.misconception
    mid = m.id
    return Diagnosis(
        id=m.id,
        explanation=m.explanation,
        cases_explained=finding.cases_explained,
        cases_failing=finding.cases_failing,
        checks=list(finding.checks),
        owners=list(m.owners),
        charged_in=list(finding.owners_charged),
        convention=m.convention.sentence() if m.convention else "",
        unexplained=unexplained_cases(cases, lambda case: mid in (*case.explained_by, *case.fails_like)),
    )


def _unexplained(
    findings: list[Finding], cases: list[CheckCases], extra: Sequence[NamedFeature]
) -> list[UnexplainedCases]:
    """The failing cases no diagnosed misreading explains, with the visible case features that separate them."""
    charged = {f.misconception.id for f in findings}

    def explained(case: CaseOutcome) -> bool:
        return bool(charged & {*case.explained_by, *case.fails_like})

    return unexplained_cases(cases, explained, extra, localise=True)


def _skipped(check: CheckSpec, why: str) -> CheckResult:
    return CheckResult(
        id=check.id,
        title=check.title,
        verdict=Verdict.SKIPPED,
        score=0.0,
        max_score=check.points,
        message=why,
        learner_message=why,
        duration_s=0.0,
        visibility=check.visibility,
    )


def _tiers(problem: GradedProblem, results: list[CheckResult]) -> list[TierResult]:
    by_id = {r.id: r for r in results}
    tiers = []
    for tier in problem.spec.tiers:
        checks = [by_id[c.id] for c in problem.spec.checks if c.tier == tier.id]
        tiers.append(
            TierResult(
                tier=tier.id,
                title=tier.title,
                score=score_sum(c.score for c in checks),
                max_score=tier.points,
                checks=checks,
            )
        )
    return tiers


def _report(
    problem: GradedProblem,
    submission: Submission,
    seed: int,
    command: str,
    status: Status,
    tiers: list[TierResult],
    message: str,
    **graded: Any,
) -> Report:
    """A report's fields that every outcome has; `graded` adds what a run of the worker measured."""
    return Report(
        problem=problem.id,
        submission=submission.name,
        submission_sha256=submission.sha256,
        status=status,
        score=score_sum(t.score for t in tiers),
        max_score=problem.spec.max_score,
        tiers=tiers,
        artifacts=[],
        seed=seed,
        versions=Versions(python=platform.python_version(), torch=torch.__version__, grader=__version__),
        problem_hash=problem.content_hash,
        command=command or reproduce_command(problem.id, submission.path, seed),
        message=message,
        **graded,
    )


def _assemble(
    problem: GradedProblem,
    submission: Submission,
    seed: int,
    status: Status,
    results: list[CheckResult],
    supervisor: WorkerSupervisor,
    message: str,
    duration: float,
    command: str,
) -> Report:
    tiers = _tiers(problem, results)
    return _report(
        problem,
        submission,
        seed,
        command,
        status,
        tiers,
        message,
        isolation=supervisor.box.isolation(),
        stdout="".join(supervisor.stdout),
        stderr="".join(supervisor.stderr),
        duration_s=round(duration, 3),
        phases={**supervisor.phases, **{t.tier: round(sum(c.duration_s for c in t.checks), 4) for t in tiers}},
    )
