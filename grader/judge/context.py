"""What a check may ask while it runs: the problem's cases and expectations, and the learner's answers."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from types import ModuleType, SimpleNamespace
from typing import Any, Protocol

import torch

from grader.judge.cases import Call
from grader.judge.experiment import PartResult, run_experiment
from grader.judge.failures import CallFailed, LearnerFailure
from grader.judge.supervisor import WorkerSupervisor
from grader.model.misconceptions import Fitted, Misconception
from grader.model.spec import CheckSpec, FunctionSpec, ProblemSpec, Tolerance
from grader.model.verdicts import Verdict

STALLS = (Verdict.TIMEOUT, Verdict.CRASHED, Verdict.SKIPPED)  # a call that cost time and answered nothing


class GradedProblem(Protocol):
    """What grading reads of a problem: a `model.problem.Problem`, or the learner pack's `PackedProblem`."""

    @property
    def id(self) -> str: ...
    @property
    def spec(self) -> ProblemSpec: ...
    @property
    def content_hash(self) -> str: ...
    @property
    def misconceptions(self) -> Sequence[Misconception]: ...
    @property
    def experiment_module(self) -> ModuleType: ...


class ExpectedSide(Protocol):
    """The expected side of every case: `judge.expectations.Expectations`, or the learner pack's `PackedCases`."""

    @property
    def seed(self) -> int: ...
    def warm(self) -> None: ...
    def cases(self, name: str) -> list[Call]: ...
    def observation(self, source: str, name: str, index: int) -> dict[str, Any]: ...
    def lower_observation(self, source: str, name: str, index: int) -> dict[str, Any] | None: ...
    def series(self) -> dict[str, torch.Tensor]: ...
    def series_parts(self) -> dict[str, str]: ...
    def misconception_observations(self, name: str, index: int) -> dict[str, dict[str, Any]]: ...
    def misconception_series(self) -> dict[str, dict[str, torch.Tensor]]: ...


class CheckContext:
    """The `checks.Context` of one submission: the expected side from `Expectations`, the learner's side through
    the supervisor of its worker; the toy experiment runs once, on first request."""

    def __init__(self, problem: GradedProblem, expectations: ExpectedSide, supervisor: WorkerSupervisor) -> None:
        self.problem, self.expect, self.supervisor = problem, expectations, supervisor
        self._parts: list[PartResult] | None = None
        self._plotted: dict[str, torch.Tensor] | None = None
        self._answered: set[str] = set()
        self.plot_failures: dict[str, str] = {}  # the public-seed run's parts that gave no series, and why

    def cases(self, check: CheckSpec) -> list[Call]:
        assert check.cases is not None
        return self.expect.cases(check.cases)

    def expected(self, check: CheckSpec, index: int, call: Call) -> dict[str, Any]:
        assert check.cases is not None
        return self.expect.observation(check.expected, check.cases, index)

    def expected_float32(self, check: CheckSpec, index: int, call: Call) -> dict[str, Any] | None:
        """The expected side computed in float32, for a check that compares float64 results at float32's
        precision; None for a check that owns the precision clause (`precision = "strict"`)."""
        if check.cases is None or check.precision == "strict":
            return None
        return self.expect.lower_observation(check.expected, check.cases, index)

    def observe_all(self, calls: list[Call]) -> Iterator[dict[str, Any] | LearnerFailure]:
        for call, got in zip(calls, self.supervisor.observe_all(calls), strict=False):
            if not call.hidden and isinstance(got, dict) and "raised" not in got:
                self._answered.add(call.function)
            yield got

    def signatures(self) -> dict[str, Any]:
        return dict(self.supervisor.hello.get("functions", {}))

    def answered(self) -> set[str]:
        """The contract functions that returned a value on at least one visible case so far."""
        return set(self._answered)

    def functions(self) -> list[FunctionSpec]:
        return self.problem.spec.functions

    def tolerances(self) -> dict[str, Tolerance]:
        return dict(self.problem.spec.tolerances.items())

    @property
    def experiment_ran(self) -> bool:
        return self._parts is not None

    def experiment(self) -> list[PartResult]:
        """The toy run with the learner's functions, once; it never takes more than half of what is left."""
        if self._parts is None:
            limits = self.supervisor.limits
            timeout = max(0.0, min(limits.experiment_timeout_s, self.supervisor.remaining() / 2))
            self._parts = self._run_toy(
                self.problem.experiment_module, self.expect.seed, timeout, stop_at_a_stall=False
            )
        return self._parts

    def _run_toy(self, module: Any, seed: int, timeout_s: float, stop_at_a_stall: bool) -> list[PartResult]:
        stalled: list[CallFailed] = []

        def observe(call: Call, timeout_s: float) -> dict[str, Any]:
            if stalled:
                raise stalled[0]
            try:
                return self.supervisor.observe_one(call, timeout_s)
            except LearnerFailure as failure:
                failed = CallFailed(failure.verdict, f"{call.function}: {failure.message}")
                if stop_at_a_stall and failure.verdict in STALLS:
                    stalled.append(failed)
                raise failed from None

        names = [f.name for f in self.problem.spec.functions]
        return run_experiment(module, names, observe, seed, timeout_s, self.supervisor.limits.call_timeout_s)

    def learner_series(self) -> dict[str, torch.Tensor]:
        return {name: value for part in self.experiment() for name, value in part.series.items()}

    @property
    def plotted(self) -> dict[str, torch.Tensor] | None:
        """The series `plotted_series` gave, if it ran."""
        return self._plotted

    def plotted_series(self) -> dict[str, torch.Tensor]:
        """The learner's toy series at the public seed, the inputs of the previews, for the plots a learner sees.

        At a grading seed this is a second run, after the graded one and before any hidden case reaches the worker,
        so nothing a learner reads in a plot was computed by a worker holding hidden inputs. It costs the learner
        nothing: a part that hung, crashed or ran out of time in the graded run is not run again (its plots are
        missing), the first stall ends the run, and its time is given back to the budget."""
        if self._plotted is None and not self.series_hidden():  # the graded run is at the public seed: it is plotted
            self._plotted = self.learner_series()
            self.plot_failures = {part.name: part.failure.message for part in self.experiment() if part.failure}
        if self._plotted is None:
            graded = self.experiment()
            stalled = {part.name for part in graded if part.failure is not None and part.failure.verdict in STALLS}
            parts = tuple(part for part in self.problem.experiment_module.PARTS if part.__name__ not in stalled)
            started = time.monotonic()
            limits = self.supervisor.limits
            timeout = max(0.0, min(limits.experiment_timeout_s, self.supervisor.remaining() / 2))
            public = (
                self._run_toy(
                    SimpleNamespace(PARTS=parts), self.problem.spec.public_seed, timeout, stop_at_a_stall=True
                )
                if parts
                else []
            )
            self.supervisor.refund(time.monotonic() - started)
            self.supervisor.phases["plotted_toy"] = round(time.monotonic() - started, 4)
            self._plotted = {name: value for part in public for name, value in part.series.items()}
            failed = {part.name: part.failure.message for part in public if part.failure is not None}
            self.plot_failures = {**failed, **{name: "stalled at the grading seed" for name in stalled}}
        return self._plotted

    def reference_series(self) -> dict[str, torch.Tensor]:
        return self.expect.series()

    def series_part(self, series: str) -> str:
        return self.expect.series_parts().get(series, "")

    def series_hidden(self) -> bool:
        """Whether the toy runs at a seed other than the public one, whose reference series the previews show."""
        return self.expect.seed != self.problem.spec.public_seed

    def misconception_observations(self, check: CheckSpec, index: int) -> dict[str, dict[str, Any]]:
        assert check.cases is not None
        return self.expect.misconception_observations(check.cases, index)

    def misconception_series(self) -> dict[str, dict[str, torch.Tensor]]:
        return self.expect.misconception_series()

    def combination_observation(
        self, check: CheckSpec, index: int, ids: tuple[str, ...], fitted: Fitted = ()
    ) -> dict[str, Any] | None:
        """One solution holding every misreading `ids` (with the parameters `fitted` sets) on case `index`, where
        the expected side can run it (the learner pack holds no known-wrong code): None when it cannot, or when
        their edits do not combine."""
        combine = getattr(self.expect, "combination_observation", None)
        if check.cases is None or combine is None:
            return None
        found: dict[str, Any] | None = combine(ids, check.cases, index, fitted)
        return found
