"""Grade one submission: run every check against a sandboxed worker and assemble the report."""

from __future__ import annotations

import hashlib
import platform
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from grader import __version__
from grader.confine.launch import Launched
from grader.confine.sandbox import Box, Level, Slot, best_level
from grader.confine.session import Worker, WorkerCrashed, WorkerTimeout
from grader.confine.zygote import Zygote
from grader.judge.cases import Call
from grader.judge.checks import CheckRun, LearnerFailure, run_check
from grader.judge.diagnosis import Explained, Finding, candidates, diagnose
from grader.judge.expectations import Expectations
from grader.judge.experiment import CallFailed, PartResult, run_experiment
from grader.judge.observation import Malformed, accept_hello, judge_case, sanitize
from grader.model.problem import Problem
from grader.model.spec import CheckSpec, FunctionSpec, Limits, Tolerance
from grader.model.verdicts import Status, Verdict
from grader.outputs.report import CheckResult, Diagnosis, Report, TierResult, Versions, reproduce_command, score_sum


class Grading:
    """One submission's grading: the worker it talks to, its budget, and the Context checks use."""

    def __init__(self, problem: Problem, submission: Path, expectations: Expectations, limits: Limits,
                 level: Level, launched: Launched | None = None, zygote: Zygote | None = None) -> None:
        self.problem, self.submission, self.expect, self.limits = problem, submission, expectations, limits
        self.zygote = zygote
        self.worker: Worker | None = None
        self._pending: Worker | None = None
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
        self._parts: list[PartResult] | None = None
        # whether a worker of this submission has been sent a hidden case: from then on, text a worker chooses
        # could carry that case's inputs (a restarted worker too, through files its predecessor left), so
        # learner-facing messages quote none of it
        self.saw_hidden = False

    # ------------------------------------------------------------------ worker lifecycle
    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def start(self) -> Status:
        """Start a worker and wait for its import; the status says how the import went."""
        names = [f.name for f in self.problem.spec.functions]
        spawned = self.spawned_at if self._pending is not None else time.monotonic()
        self.worker, self._pending = self._pending or Worker(self.box, names, self.zygote), None
        timeout = min(self.limits.import_timeout_s, max(self.remaining(), 0.1))
        try:
            hello = self.worker.receive(timeout)
            self.phases.setdefault("worker_start", round(time.monotonic() - spawned, 4))
        except WorkerTimeout:
            self.stop()
            return Status.IMPORT_TIMEOUT if self.remaining() > 0 else Status.BUDGET_EXCEEDED
        except WorkerCrashed as exc:
            self.hello = {"op": "import_crashed", "message": str(exc)}
            self.stop()
            return Status.IMPORT_CRASHED
        self.hello = accept_hello(hello)  # a forged hello reads as the learner's import error, never the judge's
        if self.hello.get("op") != "ready":
            self.stop()
            return Status.IMPORT_ERROR
        return Status.GRADED

    def stop(self) -> None:
        if self.worker is not None:
            self.worker.close()
            self.stdout.append(self.worker.stdout.text())
            self.stderr.append(self.worker.stderr.text())
            self.worker = None

    def _ready_worker(self) -> Worker:
        """The live worker, restarted if an earlier failure ended it; a LearnerFailure when none can run."""
        if self.remaining() <= 0:
            raise LearnerFailure(Verdict.SKIPPED, "the submission's time budget ran out before this case")
        if self.worker is None:
            restarted = self.start()
            if restarted in (Status.IMPORT_TIMEOUT, Status.BUDGET_EXCEEDED) or self.remaining() <= 0:
                raise LearnerFailure(Verdict.SKIPPED, "the submission's time budget ran out before this case")
            if restarted != Status.GRADED:
                raise LearnerFailure(Verdict.CRASHED, "the worker could not be restarted after an earlier failure")
        assert self.worker is not None
        return self.worker

    def _failure(self, error: WorkerTimeout | WorkerCrashed, timeout: float) -> LearnerFailure:
        self.stop()
        if isinstance(error, WorkerCrashed):
            return LearnerFailure(Verdict.CRASHED, f"the worker process died during this call: {error}")
        if self.remaining() <= 0:
            return LearnerFailure(Verdict.TIMEOUT, "the submission's time budget ran out during this call")
        return LearnerFailure(Verdict.TIMEOUT, f"no answer within {timeout:.3g} s (infinite loop?)")

    def _request(self, message: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        worker = self._ready_worker()
        timeout = min(timeout_s, self.remaining())
        try:
            return worker.request(message, timeout)
        except (WorkerTimeout, WorkerCrashed) as exc:
            raise self._failure(exc, timeout) from None

    def observe_all(self, calls: list[Call]) -> Iterator[dict[str, Any] | LearnerFailure]:
        """Observe every call in order, one observation or failure each.

        The calls go out in one frame and the answers stream back one by one, so the judge compares case k
        while the worker computes case k + 1; each answer still has its own time limit. After a crash the
        remaining calls go to a fresh worker.
        """
        pending = list(calls)
        while pending:
            try:
                worker = self._ready_worker()
                timeout = min(self.limits.call_timeout_s, self.remaining())
                worker.send({"op": "calls", "calls": [c.request() for c in pending]}, timeout)
                self.saw_hidden |= any(c.hidden for c in pending)
            except LearnerFailure as refused:
                yield refused
                return
            except (WorkerTimeout, WorkerCrashed) as exc:
                yield self._failure(exc, timeout)
                return
            for index, call in enumerate(pending):
                timeout = min(self.limits.call_timeout_s, self.remaining())
                try:
                    answer = worker.receive(timeout)
                except (WorkerTimeout, WorkerCrashed) as exc:
                    failure = self._failure(exc, timeout)
                    yield failure
                    if failure.verdict != Verdict.CRASHED:
                        return
                    pending = pending[index + 1:]
                    break
                try:
                    accepted = self._accept(call, answer)
                except LearnerFailure as failure:
                    failure.tainted = self.saw_hidden
                    yield failure
                else:
                    accepted["tainted"] = self.saw_hidden
                    yield accepted
            else:
                pending = []

    def _accept(self, call: Call, answer: dict[str, Any]) -> dict[str, Any]:
        if answer.get("op") == "missing":
            raise LearnerFailure(Verdict.ERROR, f"{call.function} is not defined in your file")
        try:
            return sanitize(answer)
        except Malformed as exc:
            raise LearnerFailure(Verdict.FAIL, f"the call's result could not be accepted: {exc}") from None

    # ------------------------------------------------------------------ Context
    def cases(self, check: CheckSpec) -> list[Call]:
        assert check.cases is not None
        return self.expect.cases(check.cases)

    def expected(self, check: CheckSpec, index: int, call: Call) -> dict[str, Any]:
        assert check.cases is not None
        return self.expect.observation(check.expected, check.cases, index)

    def observe(self, call: Call, timeout_s: float) -> dict[str, Any]:
        """One call on its own (the toy's calls); a LearnerFailure when it yields no acceptable answer."""
        self.saw_hidden |= call.hidden
        return self._accept(call, self._request(call.request(), min(timeout_s, self.limits.call_timeout_s)))

    def signatures(self) -> dict[str, Any]:
        return dict(self.hello.get("functions", {}))

    def functions(self) -> list[FunctionSpec]:
        return self.problem.spec.functions

    def tolerances(self) -> dict[str, Tolerance]:
        return self.problem.tolerances

    def experiment(self) -> list[PartResult]:
        """The toy run with the learner's functions, once; it never takes more than half of what is left."""
        if self._parts is None:
            def observe(call: Call, timeout_s: float) -> dict[str, Any]:
                try:
                    return self.observe(call, timeout_s)
                except LearnerFailure as failure:
                    raise CallFailed(failure.verdict, f"{call.function}: {failure.message}") from None

            names = [f.name for f in self.problem.spec.functions]
            timeout = max(0.0, min(self.limits.experiment_timeout_s, self.remaining() / 2))
            self._parts = run_experiment(self.problem.experiment_module, names, observe, self.expect.seed, timeout,
                                         self.limits.call_timeout_s)
        return self._parts

    def learner_series(self) -> dict[str, torch.Tensor]:
        return {name: value for part in self.experiment() for name, value in part.series.items()}

    def reference_series(self) -> dict[str, torch.Tensor]:
        return self.expect.series()

    def series_part(self, series: str) -> str:
        return self.expect.series_parts().get(series, "")

    def misconception_observations(self, check: CheckSpec, index: int) -> dict[str, dict[str, Any]]:
        assert check.cases is not None
        return self.expect.misconception_observations(check.cases, index)

    def misconception_series(self) -> dict[str, dict[str, torch.Tensor]]:
        return self.expect.misconception_series()


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


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
    series: dict[str, torch.Tensor] | None  # the learner's toy-experiment series, for plots


def grade(problem: Problem, submission: Path, seed: int, limits: Limits | None = None,
          expectations: Expectations | None = None, level: Level | None = None,
          command: str = "", launched: Launched | None = None,
          series_sink: Callable[[dict[str, torch.Tensor] | None], None] | None = None,
          zygote: Zygote | None = None, follow_through: bool | None = None) -> Graded:
    """Grade `submission` against `problem`; every process of the submission is gone when this returns.

    With a `zygote`, workers are forked from it rather than started afresh (a batch's way to skip `import torch`).
    """
    limits = limits or problem.spec.limits
    expectations = expectations or Expectations(problem, seed)
    expectations.warm()
    if launched is not None and (launched.submission != submission or launched.limits != limits):
        launched.discard()
        launched = None
    level = launched.level if launched is not None else level or best_level()
    grading = Grading(problem, submission, expectations, limits, level, launched, zygote)
    results: list[CheckResult] = []
    findings: list[Finding] = []
    follow = problem.spec.follow_through if follow_through is None else follow_through
    try:
        status = grading.start()
        if status != Status.GRADED:
            why = import_failure_message(status, grading.hello, submission, limits)
            results = [_skipped(c, why) for c in problem.spec.checks]
        else:
            why = ""
            if series_sink is not None:
                series_sink(_prefetch_series(grading, problem))
            runs = {check.id: run_check(grading, check) for check in visible_first(problem.spec.checks, expectations)}
            diagnosing = time.monotonic()
            failing = _failing_cases(runs.values())
            findings = diagnose(failing, problem.misconceptions,
                                _contradictions(grading, runs.values(), candidates(failing)))
            grading.phases["diagnosis"] = round(time.monotonic() - diagnosing, 4)
            visible = {check.id for check in problem.spec.checks if check.visibility == "visible"}
            charged = {f.misconception.id: f.misconception for f in findings} if follow else {}
            # a visible check's score must follow from visible results alone (a learner reads it before hidden
            # results are published): it carries forward only misreadings a visible owner check charges
            charged_visibly = {mid: m for mid, m in charged.items() if _charged_in(findings, mid, visible)}
            results = [runs[c.id].result(charged_visibly if c.id in visible else charged) for c in problem.spec.checks]
            if any(r.verdict == Verdict.JUDGE_ERROR for r in results):
                status = Status.JUDGE_ERROR
            elif any(r.verdict == Verdict.SKIPPED for r in results) or grading.remaining() <= 0:
                status = Status.BUDGET_EXCEEDED
    finally:
        grading.stop()
        grading.box.cleanup()  # before the slot is free: its next holder's processes and files are not ours
        grading.slot.release()
    persist = getattr(expectations, "persist", None)
    if persist is not None:
        persist()  # misconception observations computed on the way are kept for the next grade
    # from the worker's start (an early-launched one started before the judge's own imports), so that every
    # phase lies within the duration
    report = _assemble(problem, submission, seed, status, results, grading, why,
                       time.monotonic() - grading.spawned_at, command)
    report.diagnosis = [_diagnosis_entry(f) for f in findings]
    report.follow_through = follow
    return Graded(report, grading.learner_series() if grading._parts is not None else None)


def visible_first(checks: list[CheckSpec], expectations: Expectations) -> list[CheckSpec]:
    """Checks in the order they run: those without a hidden case first, so that no learner-facing message of a
    visible case can quote text from a worker that has already been sent a hidden case's inputs."""
    def has_hidden(check: CheckSpec) -> bool:
        return check.cases is not None and any(call.hidden for call in expectations.cases(check.cases))

    return sorted(checks, key=has_hidden)


def _prefetch_series(grading: Grading, problem: Problem) -> dict[str, torch.Tensor] | None:
    """Run the toy experiment first, so its plots can be drawn while the other checks run."""
    if not any(c.kind == "experiment" for c in problem.spec.checks):
        return None
    return grading.learner_series()  # a part that failed has no series; its checks say why in their turn


def _contradictions(grading: Grading, runs: Iterable[CheckRun], suspects: set[str]) -> dict[str, int]:
    """For each suspected misreading, the learner's passing cases where its own solution fails: evidence that the
    learner does not hold it. Nothing is computed when nothing failed."""
    counts = dict.fromkeys(suspects, 0)
    if not suspects:
        return counts
    tolerances = grading.tolerances()
    for run in runs:
        if run.tally is None or run.check.kind != "differential":
            continue
        calls = grading.cases(run.check)
        for index, case in enumerate(run.tally.outcomes):
            if not case.passed:
                continue
            call, want = calls[index], grading.expected(run.check, index, calls[index])
            theirs = grading.misconception_observations(run.check, index)
            for mid in suspects:
                try:
                    verdict = judge_case(call.function, call.kwargs, theirs[mid], want, run.check.compare,
                                         tolerances).verdict
                except AssertionError:  # the misreading raised where the check expects no exception
                    verdict = Verdict.FAIL
                counts[mid] += verdict != Verdict.PASS
    return counts


def _charged_in(findings: list[Finding], misconception: str, checks: set[str]) -> bool:
    """Whether `misconception` is charged in one of `checks`: an owner among them has a case it explains."""
    return any(f.misconception.id == misconception and set(f.owners_charged) & checks for f in findings)


def _failing_cases(runs: Iterable[CheckRun]) -> list[Explained]:
    return [Explained(run.check.id, case.explained_by) for run in runs if run.tally is not None
            for case in run.tally.outcomes if not case.passed]


def _diagnosis_entry(finding: Finding) -> Diagnosis:
    m = finding.misconception
    return Diagnosis(id=m.id, explanation=m.explanation, cases_explained=finding.cases_explained,
                     cases_failing=finding.cases_failing, checks=list(finding.checks), owners=list(m.owners),
                     charged_in=list(finding.owners_charged))


def _skipped(check: CheckSpec, why: str) -> CheckResult:
    return CheckResult(id=check.id, title=check.title, verdict=Verdict.SKIPPED, score=0.0,
                       max_score=check.points, message=why, learner_message=why, duration_s=0.0,
                       visibility=check.visibility)


def _assemble(problem: Problem, submission: Path, seed: int, status: Status, results: list[CheckResult],
              grading: Grading, message: str, duration: float, command: str) -> Report:
    by_id = {r.id: r for r in results}
    tiers = []
    for tier in problem.spec.tiers:
        checks = [by_id[c.id] for c in problem.spec.checks if c.tier == tier.id]
        tiers.append(TierResult(tier=tier.id, title=tier.title, score=score_sum(c.score for c in checks),
                                max_score=tier.points, checks=checks))
    return Report(
        problem=problem.id, submission=submission.name, submission_sha256=_sha256(submission), status=status,
        score=score_sum(t.score for t in tiers), max_score=problem.spec.max_score, tiers=tiers,
        artifacts=[], seed=seed,
        versions=Versions(python=platform.python_version(), torch=torch.__version__, grader=__version__),
        problem_hash=problem.content_hash,
        command=command or reproduce_command(problem.id, submission, seed),
        isolation=grading.box.isolation(), stdout="".join(grading.stdout), stderr="".join(grading.stderr),
        duration_s=round(duration, 3), message=message, phases={**grading.phases, **{
            t.tier: round(sum(c.duration_s for c in t.checks), 4) for t in tiers}},
    )

