"""Mutation analysis of a problem: each mutant of its reference graded against the problem's own cases, in process.

Terms. A mutant is *killed* when it loses points on the first grading seed; killed and *diagnosed* when the judge
then names a misreading (its report would carry a diagnosis), *undiagnosed* when it names none. A mutant that
stops answering within the time limit, or runs out of memory, is *killed by the limit*; one the judge fails on
is an *error*, a fault of the harness, never counted as killed. A mutant at full marks
*survives*; a survivor is *likely equivalent* when it answers as the reference does, within a few units in the last
place, on every case of every check and on a dense probe: the cases of every other seed and each case with its
float inputs jittered, or its masks and ids mostly zeroed. Otherwise its survival is a case the problem lacks, or a
difference its checks accept.

Kill-only analysis (`mutate --kill-only`, what `make test` keeps from growing) asks only which mutants survive: a
mutant is killed at the first check that loses points, before any diagnosis, and the rest of its checks never run;
a survivor is not probed, so none is called likely equivalent.
It finds the same survivors as the whole analysis, because follow-through never turns a loss into full marks: a
misreading is credited only once an owner check charges one of its cases (`diagnosis.diagnose`), and that case
keeps its charge.

Mutants are derived from the hidden reference: they run in the judge's own (forked) process as trusted code, the
way the judge runs the reference and the known-wrong solutions, and what this module writes stays in artifacts/.
"""

from __future__ import annotations

import json
import os
import resource
import select
import signal
import time
import traceback
import types
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch

from grader.course.mutants import Mutant, mutants, unmutated
from grader.judge.accept import Malformed, accept_hello, accept_observation
from grader.judge.cases import Call, generator_for
from grader.judge.checks import READS_ANSWERS, run_check
from grader.judge.context import CheckContext
from grader.judge.expectations import Expectations, trusted_run
from grader.judge.failures import LearnerFailure
from grader.judge.grading import _judge  # the checks and diagnosis of `grade`, after its worker has started
from grader.judge.supervisor import WorkerSupervisor
from grader.model.problem import Problem
from grader.model.report import score_sum, write_atomic
from grader.model.verdicts import Verdict
from grader.worker import messages
from grader.worker.protocol import observe_call

Outcome = Literal["killed", "undiagnosed", "limit", "survived", "equivalent", "error"]
KILLED: tuple[Outcome, ...] = ("killed", "undiagnosed", "limit")
GRADING_FAILED = "grading failed"  # the judge's own failure on a mutant: a harness bug, never a kill
TIME_LIMIT_S = 120.0  # one mutant's grading and probe; the reference's takes seconds
MEMORY_HEADROOM_MB = 4096  # address space a mutant may add to the judge's own
JITTERED_COPIES = 2  # jittered copies of each case in the probe
JITTER = 0.05  # relative scale of the jitter
THINNED_KEPT = 0.15  # share of a thinned case's mask and id entries left as they are


class InProcessSupervisor(WorkerSupervisor):
    """A `WorkerSupervisor` whose worker is this process: trusted functions called directly, every answer
    accepted as a worker's would be. The time limit is the forked process's, so no call is timed here; no worker,
    box or slot exists, so it is never started and `close` has nothing to end."""

    def __init__(self, problem: Problem, functions: dict[str, Callable[..., Any]]) -> None:
        # the worker's own account of a signature; imported here, as importing the worker's entry module pins the
        # BLAS thread pools of processes started afterwards to one thread
        from grader.worker.__main__ import signature_of

        self.functions_called = functions
        self.functions = [f.name for f in problem.spec.functions]
        self.limits = problem.spec.limits
        self.zygote = None
        self.worker = None
        self.phases = {}
        self.spawned_at = time.monotonic()
        self.deadline = float("inf")
        found = {name: signature_of(function) for name, function in functions.items()}
        self.hello = accept_hello(dict(messages.ready(found)))
        self.stdout, self.stderr = [], []
        self.saw_hidden = False
        self.refused_frames = 0
        self.oversized = False

    def close(self) -> None:
        """Nothing to end: no worker was started."""

    def observe_all(
        self, calls: list[Call], timeout_s: float | None = None
    ) -> Iterator[dict[str, Any] | LearnerFailure]:
        for call in calls:
            self.saw_hidden |= call.hidden
            function = self.functions_called.get(call.function)
            if function is None:
                yield LearnerFailure(Verdict.ERROR, f"{call.function} is not defined")
                continue
            observed = observe_call(function, call.kwargs, list(call.requires_grad), call.backward)
            try:
                accepted = accept_observation(observed)
            except Malformed as exc:
                yield LearnerFailure(Verdict.FAIL, f"the call's result could not be accepted: {exc}")
                continue
            accepted["tainted"] = self.saw_hidden
            yield accepted


@dataclass(frozen=True)
class Graded:
    """What grading one mutant found."""

    score: float
    max_score: float
    failed: list[str]  # checks that lost points
    diagnosis: list[str]  # the misreadings named
    followed: list[str]  # checks that would have lost points without follow-through credit


@dataclass(frozen=True)
class MutantResult:
    name: str
    operator: str
    line: int
    description: str
    outcome: Outcome
    score: float = 0.0
    max_score: float = 0.0
    failed: list[str] = field(default_factory=list)
    diagnosis: list[str] = field(default_factory=list)
    differs_on: str = ""  # a survivor's first case or probe where it answers otherwise than the reference
    note: str = ""  # why the limit killed it


@dataclass(frozen=True)
class Analysis:
    """Every mutant of one problem and what became of it."""

    problem: str
    seed: int
    results: list[MutantResult]
    seconds: float
    kill_only: bool = False  # no diagnosis was sought: every killed mutant counts as diagnosed

    def count(self, *outcomes: Outcome) -> int:
        return sum(r.outcome in outcomes for r in self.results)

    @property
    def survivors(self) -> list[MutantResult]:
        return [r for r in self.results if r.outcome in ("survived", "equivalent")]

    @property
    def killed_share(self) -> float:
        """Killed mutants over those not likely equivalent."""
        counted = len(self.results) - self.count("equivalent")
        return self.count(*KILLED) / counted if counted else 1.0

    @property
    def diagnosed_share(self) -> float:
        """Diagnosed mutants over those the checks killed (the limit's are left out: there is nothing to diagnose)."""
        graded = self.count("killed", "undiagnosed")
        return self.count("killed") / graded if graded else 1.0

    def to_data(self) -> dict[str, Any]:
        return {
            "problem": self.problem,
            "seed": self.seed,
            "seconds": round(self.seconds, 1),
            "mutants": len(self.results),
            "killed_share": round(self.killed_share, 4),
            "diagnosed_share": round(self.diagnosed_share, 4),
            "counts": {outcome: self.count(outcome) for outcome in (*KILLED, "survived", "equivalent", "error")},
            "results": [asdict(r) for r in self.results],
        }


# ---------------------------------------------------------------------------------------------- grading in process


def functions_of(problem: Problem, source: str, name: str) -> dict[str, Callable[..., Any]]:
    """The contract functions of `source`, a module that is never registered anywhere."""
    module = types.ModuleType(name)
    exec(compile(source, name, "exec"), module.__dict__)  # trusted: the reference, changed by one operator
    return {f.name: getattr(module, f.name) for f in problem.spec.functions if hasattr(module, f.name)}


def grade_functions(problem: Problem, expectations: Expectations, functions: dict[str, Callable[..., Any]]) -> Graded:
    """Every check of the problem on `functions`, as `grade` runs them, with the diagnosis."""
    supervisor = InProcessSupervisor(problem, functions)
    context = CheckContext(problem, expectations, supervisor)
    with trusted_run():
        results, findings, _, _ = _judge(problem, context, problem.spec.follow_through)
    return Graded(
        score=score_sum(r.score for r in results),
        max_score=problem.spec.max_score,
        failed=[r.id for r in results if r.verdict != Verdict.PASS],
        diagnosis=[f.misconception.id for f in findings],
        followed=[r.id for r in results if r.cases_followed_through],
    )


def first_loss(problem: Problem, expectations: Expectations, functions: dict[str, Callable[..., Any]]) -> Graded:
    """The checks of the problem on `functions` until one loses points, with no diagnosis and no follow-through
    credit: `failed` holds that check alone, or nothing at full marks. The toys run after every other check that
    sends calls, as they cost the most; the kinds that read what the calls answered still run last."""
    supervisor = InProcessSupervisor(problem, functions)
    context = CheckContext(problem, expectations, supervisor)
    order = sorted(problem.spec.checks, key=lambda c: (c.kind in READS_ANSWERS, c.kind == "experiment"))
    with trusted_run():
        for check in order:
            result = run_check(context, check).result()
            if result.score < check.points:
                return Graded(0.0, problem.spec.max_score, [check.id], [], [])
    return Graded(problem.spec.max_score, problem.spec.max_score, [], [], [])


# ---------------------------------------------------------------------------------------------- the probe


@dataclass(frozen=True)
class Probe:
    """Calls and what the reference observes on each: every case of the graded seed, then the probe's."""

    labels: list[str]
    calls: list[Call]
    observations: list[dict[str, Any]]


def _jittered(call: Call, generator: torch.Generator) -> Call:
    kwargs = {}
    for name, value in call.kwargs.items():
        if type(value) is torch.Tensor and value.is_floating_point() and value.numel():
            noise = torch.randn(value.shape, generator=generator, dtype=torch.float64)
            value = (value.double() * (1 + JITTER * noise)).to(value.dtype)
        kwargs[name] = value
    return Call(call.function, kwargs, call.label, call.requires_grad, call.backward)


def _thinned(call: Call, generator: torch.Generator) -> Call:
    """`call` with most entries of its bool and integer tensors (masks, ids) set to False or 0: sparse masks, rows
    and batches with one valid entry or none, which drawn cases seldom hold."""
    kwargs = {}
    for name, value in call.kwargs.items():
        if type(value) is torch.Tensor and not value.is_floating_point() and not value.is_complex() and value.numel():
            kept = torch.rand(value.shape, generator=generator) < THINNED_KEPT
            value = torch.where(kept, value, torch.zeros((), dtype=value.dtype))
        kwargs[name] = value
    return Call(call.function, kwargs, call.label, call.requires_grad, call.backward)


def build_probe(problem: Problem, expectations: Expectations) -> Probe:
    """The graded seed's cases, those of every other seed (public and hidden), and of each graded case jittered
    copies and a thinned one, with the reference's observations."""
    names = sorted({c.cases for c in problem.spec.checks if c.cases})
    labels: list[str] = []
    calls: list[Call] = []
    for name in names:
        graded = expectations.cases(name)
        labels += [f"{name}[{i}]" for i in range(len(graded))]
        calls += graded
    for seed in [problem.spec.public_seed, *problem.grading_seeds[1:]]:
        for name in names:
            drawn = problem.case_generator(name)(generator_for(seed, name))
            labels += [f"seed {seed} {name}[{i}]" for i in range(len(drawn))]
            calls += drawn
    generator = generator_for(expectations.seed, "mutation-probe")
    for name in names:
        for index, call in enumerate(expectations.cases(name)):
            labels += [f"jittered {copy} {name}[{index}]" for copy in range(JITTERED_COPIES)]
            calls += [_jittered(call, generator) for _ in range(JITTERED_COPIES)]
            labels.append(f"thinned {name}[{index}]")
            calls.append(_thinned(call, generator))
    with trusted_run():
        observations = [_observe(problem.reference, call) for call in calls]
    return Probe(labels, calls, observations)


def _observe(functions: dict[str, Callable[..., Any]], call: Call) -> dict[str, Any]:
    function = functions.get(call.function)
    if function is None:
        return {"missing": call.function}
    return observe_call(function, call.kwargs, list(call.requires_grad), call.backward)


def same_observation(a: Any, b: Any) -> bool:
    """Whether two observations agree: the same structure, exception types and dtypes, and values within a few
    units in the last place (NaN equal to NaN). An exception's message is not compared."""
    if type(a) is torch.Tensor or type(b) is torch.Tensor:
        return type(a) is type(b) is torch.Tensor and _same_tensor(a, b)
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            return False
        if "bases" in a and "message" in a:  # a described exception
            return bool(a.get("type") == b.get("type"))
        return all(same_observation(a[key], b[key]) for key in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same_observation(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (a != a and b != b) or abs(a - b) <= 16 * 2.3e-16 * max(abs(a), abs(b))
    return bool(a == b)


def _same_tensor(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if not a.is_floating_point():
        return torch.equal(a, b)
    scale = 16 * torch.finfo(a.dtype).eps
    return bool(torch.isclose(a, b, rtol=scale, atol=scale, equal_nan=True).all())


def first_difference(probe: Probe, functions: dict[str, Callable[..., Any]]) -> str:
    """The label of the first probe call where `functions` answer otherwise than the reference, or ""."""
    with trusted_run():
        for label, call, want in zip(probe.labels, probe.calls, probe.observations, strict=True):
            if not same_observation(_observe(functions, call), want):
                return label
    return ""


# ---------------------------------------------------------------------------------------------- one mutant, forked


def _judge_mutant(
    problem: Problem, expectations: Expectations, probe: Probe, mutant: Mutant, kill_only: bool
) -> dict[str, Any]:
    functions = functions_of(problem, mutant.source, f"paperleet_mutant_{problem.id}")
    graded = (first_loss if kill_only else grade_functions)(problem, expectations, functions)
    found: dict[str, Any] = asdict(graded)
    if graded.score >= graded.max_score and not kill_only:
        found["differs_on"] = first_difference(probe, functions)
    return found


def _limit_memory() -> None:
    """A mutant may add MEMORY_HEADROOM_MB of address space to what the judge holds; past that an allocation fails,
    which the mutant's call observes as an exception."""
    try:
        with open("/proc/self/statm") as statm:
            size = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return
    limit = size + MEMORY_HEADROOM_MB * 2**20
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def _child(write_fd: int, work: Callable[[], dict[str, Any]]) -> None:
    """The forked process: do the work, write its JSON, and leave without running anything of the parent's."""
    code = 0
    try:
        _limit_memory()
        payload = json.dumps(work()).encode()
    except MemoryError:
        payload = json.dumps({"limit": "out of memory"}).encode()
        code = 1
    except BaseException:
        payload = json.dumps({"error": traceback.format_exc()[-2000:]}).encode()
        code = 1
    try:
        with os.fdopen(write_fd, "wb") as pipe:
            pipe.write(payload)
    finally:
        os._exit(code)


@dataclass
class _Running:
    mutant: Mutant
    pid: int
    fd: int
    started: float
    data: bytearray = field(default_factory=bytearray)


def run_forked(
    jobs: list[tuple[Mutant, Callable[[], dict[str, Any]]]], workers: int, time_limit_s: float
) -> Iterator[tuple[Mutant, dict[str, Any] | None, str]]:
    """Each job's work in a forked process, `workers` at a time: (mutant, its JSON or None, why not)."""
    pending = list(jobs)
    running: dict[int, _Running] = {}
    while pending or running:
        while pending and len(running) < max(1, workers):
            mutant, work = pending.pop(0)
            read_fd, write_fd = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(read_fd)
                _child(write_fd, work)
            os.close(write_fd)
            running[read_fd] = _Running(mutant, pid, read_fd, time.monotonic())
        nearest = min(r.started for r in running.values()) + time_limit_s
        ready, _, _ = select.select(list(running), [], [], max(0.0, nearest - time.monotonic()))
        for fd in ready:
            chunk = os.read(fd, 1 << 16)
            if chunk:
                running[fd].data += chunk
                continue
            done = running.pop(fd)
            os.close(fd)
            _, status = os.waitpid(done.pid, 0)
            yield _finished(done, status)
        for fd, late in list(running.items()):
            if time.monotonic() - late.started > time_limit_s:
                os.kill(late.pid, signal.SIGKILL)
                os.waitpid(late.pid, 0)
                os.close(fd)
                del running[fd]
                yield late.mutant, None, f"no result within {time_limit_s:g} s"


def _finished(done: _Running, status: int) -> tuple[Mutant, dict[str, Any] | None, str]:
    try:
        found = json.loads(bytes(done.data))
    except ValueError:
        return done.mutant, None, f"the process ended without a result ({_status_text(status)})"
    if "limit" in found:
        return done.mutant, None, str(found["limit"])
    if "error" in found:
        return done.mutant, None, f"{GRADING_FAILED}: {found['error'].strip().splitlines()[-1]}"
    return done.mutant, found, ""


def _status_text(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"signal {os.WTERMSIG(status)}"
    return f"exit {os.waitstatus_to_exitcode(status)}"


# ---------------------------------------------------------------------------------------------- a whole problem


def result_of(mutant: Mutant, found: dict[str, Any] | None, why: str, kill_only: bool = False) -> MutantResult:
    """What became of one mutant, from its forked process's answer (None: the limit killed it). A kill-only
    analysis seeks no diagnosis: its killed mutants are `killed`."""
    named = (mutant.name, mutant.operator, mutant.line, mutant.description)
    if found is None:
        return MutantResult(*named, outcome="error" if why.startswith(GRADING_FAILED) else "limit", note=why)
    score, max_score = float(found["score"]), float(found["max_score"])
    failed, diagnosis = list(found["failed"]), list(found["diagnosis"])
    if score < max_score:
        outcome: Outcome = "killed" if diagnosis or kill_only else "undiagnosed"
        return MutantResult(*named, outcome, score, max_score, failed, diagnosis)
    differs = str(found.get("differs_on", ""))
    outcome = "survived" if differs or kill_only else "equivalent"  # kill-only: no probe told them apart
    return MutantResult(*named, outcome, score, max_score, failed, diagnosis, differs_on=differs)


class ReferenceNotFull(RuntimeError):
    """The unchanged reference, graded in process, loses points: the analysis would measure the harness."""


def analyse(
    problem: Problem,
    workers: int = 2,
    time_limit_s: float = TIME_LIMIT_S,
    only: list[str] | None = None,
    say: Callable[[str], None] = lambda text: None,
    kill_only: bool = False,
) -> Analysis:
    """Every mutant of `problem`'s reference (or those named in `only`) graded on its first grading seed; with
    `kill_only`, each only until it loses points (see the module's docstring)."""
    started = time.monotonic()
    seed = problem.grading_seeds[0]
    expectations = Expectations(problem, seed, say=say)
    expectations.warm()
    _warm_misreadings(problem, expectations)
    source = (problem.reference_dir / "reference.py").read_text()
    control = grade_functions(problem, expectations, functions_of(problem, unmutated(source), "paperleet_control"))
    if control.score < control.max_score:
        raise ReferenceNotFull(f"{problem.id}: the reference scores {control.score}/{control.max_score} in process")
    probe = Probe([], [], []) if kill_only else build_probe(problem, expectations)
    chosen = [m for m in mutants(source) if only is None or m.name in only]
    say(f"{problem.id}: {len(chosen)} mutants, {len(probe.calls)} probe calls, {workers} at a time")
    jobs = [(m, _work(problem, expectations, probe, m, kill_only)) for m in chosen]
    by_name = {}
    for mutant, found, why in run_forked(jobs, workers, time_limit_s):
        by_name[mutant.name] = result_of(mutant, found, why, kill_only)
    results = [by_name[m.name] for m in chosen]
    return Analysis(problem.id, seed, results, time.monotonic() - started, kill_only)


def _work(
    problem: Problem, expectations: Expectations, probe: Probe, mutant: Mutant, kill_only: bool
) -> Callable[[], dict[str, Any]]:
    return lambda: _judge_mutant(problem, expectations, probe, mutant, kill_only)


def _warm_misreadings(problem: Problem, expectations: Expectations) -> None:
    """Every misreading's observations and toy series, computed once here so that no forked process computes them."""
    for check in problem.spec.checks:
        if check.cases:
            for index in range(len(expectations.cases(check.cases))):
                expectations.misconception_observations(check.cases, index)
    if any(c.kind == "experiment" for c in problem.spec.checks):
        expectations.misconception_series()
    expectations.persist()


# ---------------------------------------------------------------------------------------------- what is written


def summary_lines(analysis: Analysis) -> list[str]:
    """The terminal's account: the counts and shares, then each survivor and each mutant the limit killed."""
    killed, undiagnosed = analysis.count("killed"), analysis.count("undiagnosed")
    if analysis.kill_only:
        return [
            f"{analysis.problem}: {len(analysis.results)} mutants in {analysis.seconds:.0f} s (kill-only: no "
            f"diagnosis, no probe); killed {analysis.count(*KILLED)}, by the limit {analysis.count('limit')}; survived "
            f"{analysis.count('survived')}",
            *(f"  survived    {r.name}: {r.description}" for r in analysis.results if r.outcome == "survived"),
            *(f"  {r.outcome:11} {r.name}: {r.note}" for r in analysis.results if r.outcome in ("limit", "error")),
        ]
    lines = [
        f"{analysis.problem}: {len(analysis.results)} mutants in {analysis.seconds:.0f} s; killed "
        f"{analysis.count(*KILLED)} ({analysis.killed_share:.1%} of those not likely equivalent): diagnosed {killed}, "
        f"undiagnosed {undiagnosed} ({1 - analysis.diagnosed_share:.1%} of those the checks killed), by the limit "
        f"{analysis.count('limit')}; survived {analysis.count('survived')}; likely equivalent "
        f"{analysis.count('equivalent')}"
    ]
    for result in analysis.results:
        if result.outcome == "survived":
            lines.append(f"  survived    {result.name}: {result.description}; differs on {result.differs_on}")
        elif result.outcome == "equivalent":
            lines.append(f"  equivalent  {result.name}: {result.description}")
        elif result.outcome in ("limit", "error"):
            lines.append(f"  {result.outcome:11} {result.name}: {result.description}; {result.note}")
    return lines


def write_analysis(analysis: Analysis, out: Path) -> Path:
    """`out`/<problem>.json: every mutant and what became of it."""
    path = out / f"{analysis.problem}.json"
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(analysis.to_data(), indent=1) + "\n")
    return path


def record_survivors(analysis: Analysis, path: Path) -> None:
    """Write `analysis`'s survivors into the record at `path` (one entry per problem, the others kept)."""
    recorded = json.loads(path.read_text()) if path.is_file() else {}
    recorded[analysis.problem] = {
        "mutants": len(analysis.results),
        "survivors": sorted(r.name for r in analysis.survivors),
    }
    write_atomic(path, json.dumps(dict(sorted(recorded.items())), indent=1) + "\n")
