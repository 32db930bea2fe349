"""What a check may ask while it runs: the problem's cases and expectations, and the learner's answers."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from types import ModuleType
from typing import Any, Protocol

import torch

from grader.judge.cases import Call
from grader.judge.checks import LearnerFailure
from grader.judge.diagnosis import Misconception
from grader.judge.experiment import CallFailed, PartResult, run_experiment
from grader.judge.supervisor import WorkerSupervisor
from grader.model.spec import CheckSpec, FunctionSpec, ProblemSpec, Tolerance
from grader.model.verdicts import Verdict


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
            self._parts = self._run_toy(self.expect.seed, timeout, give_up_after_a_hang=False)
        return self._parts

    def _run_toy(self, seed: int, timeout_s: float, give_up_after_a_hang: bool) -> list[PartResult]:
        hung: list[CallFailed] = []

        def observe(call: Call, timeout_s: float) -> dict[str, Any]:
            if hung:
                raise hung[0]
            try:
                return self.supervisor.observe_one(call, timeout_s)
            except LearnerFailure as failure:
                failed = CallFailed(failure.verdict, f"{call.function}: {failure.message}")
                if give_up_after_a_hang and failure.verdict in (Verdict.TIMEOUT, Verdict.CRASHED, Verdict.SKIPPED):
                    hung.append(failed)
                raise failed from None

        names = [f.name for f in self.problem.spec.functions]
        module, call_timeout_s = self.problem.experiment_module, self.supervisor.limits.call_timeout_s
        return run_experiment(module, names, observe, seed, timeout_s, call_timeout_s)

    def learner_series(self) -> dict[str, torch.Tensor]:
        return {name: value for part in self.experiment() for name, value in part.series.items()}

    @property
    def plotted(self) -> dict[str, torch.Tensor] | None:
        """The series `plotted_series` gave, if it ran."""
        return self._plotted

    def plotted_series(self) -> dict[str, torch.Tensor]:
        """The learner's toy series at the public seed, the inputs of the previews, for the plots a learner sees.

        At a grading seed this is a run of its own, before any hidden case reaches the worker, so nothing a learner
        reads in a plot was computed by a worker holding hidden inputs; its time is given back to the budget, and
        its first hang or crash ends it (a plot is missing, no grading time is lost twice)."""
        if self._plotted is None:
            if not self.series_hidden():
                self._plotted = self.learner_series()
            else:
                started = time.monotonic()
                limits = self.supervisor.limits
                timeout = max(0.0, min(limits.experiment_timeout_s, self.supervisor.remaining() / 2))
                parts = self._run_toy(self.problem.spec.public_seed, timeout, give_up_after_a_hang=True)
                self.supervisor.refund(time.monotonic() - started)
                self.supervisor.phases["plotted_toy"] = round(time.monotonic() - started, 4)
                self._plotted = {name: value for part in parts for name, value in part.series.items()}
                self.plot_failures = {part.name: part.failure.message for part in parts if part.failure is not None}
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
