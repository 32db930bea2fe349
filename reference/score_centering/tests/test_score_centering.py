"""score_centering: the toy's known values, seeded and discriminating cases, small known-wrong files, and the two
samples graded end to end."""

from __future__ import annotations

import math
import types
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from conftest import ROOT, all_seeds, assert_full_marks, checks_of, grade_samples, observe, tier_scores

from grader.judge.accept import accept_observation
from grader.judge.cases import Call, generator_for
from grader.judge.compare import compare_tensors, judge_case
from grader.judge.experiment import run_experiment
from grader.model.problem import Problem
from grader.model.spec import DifferentialCheck, Tolerance
from grader.model.verdicts import Status, Verdict

PROBLEM = "score_centering"
FUNCTION = "score_centering_loss"
REFERENCE = ROOT / "reference" / PROBLEM / "reference.py"
# |E_q grad loss| / |A| for k = 0..6 on the statement's six-token prefix (None: zero up to rounding).
KNOWN_SWEEP = {
    "none": (0.438, 0.154, 0.101, 0.077, 0.024, None, None),
    "tis": (0.187, 0.166, 0.134, 0.092, None, None, None),
    "mis": (0.217, 0.248, 0.179, 0.089, None, None, None),
}
# The weighted loss without any centring, otherwise right: the reference with its correction term removed. The
# fully trivial answers (zeros, ones, an input echoed) are in trivial/, proved with every problem's.
UNCENTRED = "trivial_uncentred"
CORRECTION = "    loss = -adv * (w_y * logp_y - (residual * logp_head).sum(dim=1))  # [N]\n"


def _trivial_sources() -> dict[str, str]:
    reference = REFERENCE.read_text()
    assert reference.count(CORRECTION) == 1
    return {UNCENTRED: reference.replace(CORRECTION, "    loss = -adv * w_y * logp_y  # [N]\n")}


def _functions(sources: dict[str, str]) -> dict[str, Callable[..., Any]]:
    functions = {}
    for name, source in sources.items():
        namespace: dict[str, Any] = {"__name__": f"trivial_{name}"}
        exec(compile(source, name, "exec"), namespace)  # our own fixed source text
        functions[name] = namespace[FUNCTION]
    return functions


def _float64_learner() -> Callable[..., Any]:
    """The reference computing in float64 whatever the logits' dtype: a faithful alternative every case must accept."""
    source = REFERENCE.read_text()
    line = "    compute = torch.float64 if logits.dtype == torch.float64 else torch.float32\n"
    assert source.count(line) == 1
    return _functions({"float64": source.replace(line, "    compute = torch.float64\n")})["float64"]


def _groups(calls: list[Call]) -> list[list[int]]:
    grouped: dict[object, list[int]] = {}
    for index, call in enumerate(calls):
        grouped.setdefault(("group", call.group) if call.group is not None else index, []).append(index)
    return list(grouped.values())


def _scored_checks(problem: Problem, tiers: tuple[str, ...]) -> Iterator[DifferentialCheck]:
    yield from (c for c in problem.spec.checks if c.tier in tiers and isinstance(c, DifferentialCheck))


# ---------------------------------------------------------------- in process: reference, oracle, cases


def test_random_cases_are_hidden(problem: Problem) -> None:
    """T1 draws its batches from the hidden seed and shows them only once the grades are published."""
    for check in _scored_checks(problem, ("T1",)):
        assert check.expected == "oracle" and not check.public and check.visibility == "after_published"
        calls = problem.case_generator(check.cases)(generator_for(problem.grading_seeds[0], check.cases))
        assert all(call.hidden for call in calls), check.id


def test_every_group_of_t1_t2_cases_is_discriminating(problem: Problem) -> None:
    """No trivial answer passes a group of T1 or T2 cases on any seed, while a float64-arithmetic variant of the
    reference passes every case (so float32 cases are well conditioned)."""
    trivial = _functions(_trivial_sources())
    learners = {**trivial, "float64 arithmetic": _float64_learner()}
    tolerances = problem.tolerances
    trivial_passes, float64_failures = [], []
    for seed in all_seeds(problem):
        for check in _scored_checks(problem, ("T1", "T2")):
            source = problem.oracle if check.expected == "oracle" else problem.reference
            calls = problem.case_generator(check.cases)(generator_for(seed, check.cases))
            wants = [observe(source[FUNCTION], call) for call in calls]
            for name, function in learners.items():
                passed = []
                for call, want in zip(calls, wants, strict=True):
                    got = accept_observation(observe(function, call))
                    outcome = judge_case(FUNCTION, call.kwargs, got, want, check.compare, tolerances)
                    passed.append(outcome.verdict == Verdict.PASS)
                    if name == "float64 arithmetic" and not passed[-1]:
                        float64_failures.append(f"seed {seed}, {check.id}, {call.label}: {outcome.mismatch}")
                if name in trivial:
                    trivial_passes += [
                        f"seed {seed}, {check.id}, {name}: {calls[group[0]].label}"
                        for group in _groups(calls)
                        if all(passed[i] for i in group)
                    ]
    assert not trivial_passes, "\n".join(trivial_passes)
    assert not float64_failures, "\n".join(float64_failures)


def test_every_group_holds_a_call_whose_answer_depends_on_its_inputs(problem: Problem) -> None:
    """Raising, a zero loss, unchanged inputs: constant answers never make a group on their own."""
    lonely = []
    for check in _scored_checks(problem, ("T0", "T1", "T2")):
        calls = problem.case_generator(check.cases)(generator_for(problem.grading_seeds[0], check.cases))
        for group in _groups(calls):
            observations = [observe(problem.reference[FUNCTION], calls[i]) for i in group]
            if not any("raised" not in o and bool(o["output"]["value"].ne(0).any()) for o in observations):
                lonely.append(f"{check.id}: {calls[group[0]].label}")
    assert not lonely, "\n".join(lonely)


def _tensors_differ(a: Any, b: Any) -> bool:
    if not isinstance(a, torch.Tensor):
        return False
    return a.shape != b.shape or a.dtype != b.dtype or not torch.equal(a.nan_to_num(), b.nan_to_num())


def test_every_call_draws_its_inputs_from_the_seed(problem: Problem) -> None:
    """Two seeds give the same number of calls per generator, and every call differs in some tensor input."""
    public, hidden = problem.spec.public_seed, problem.grading_seeds[0]
    same = []
    for name in sorted({c.cases for c in problem.spec.checks if c.cases}):
        first = problem.case_generator(name)(generator_for(public, name))
        second = problem.case_generator(name)(generator_for(hidden, name))
        assert len(first) == len(second), name
        same += [
            f"{name}: {a.label}"
            for a, b in zip(first, second, strict=True)
            if not any(_tensors_differ(a.kwargs[k], b.kwargs.get(k)) for k in a.kwargs)
        ]
    assert not same, "\n".join(same)


# ---------------------------------------------------------------- the toy


def _recording(function: Callable[..., Any], seen: list[float]) -> Callable[..., Any]:
    def call(**kwargs: Any) -> Any:
        seen.append(float(kwargs["advantages"][0]))
        return function(**kwargs)

    return call


def _toy_series(
    problem: Problem, function: Callable[..., Any], seed: int, parts: tuple[Any, ...] | None = None
) -> dict[str, torch.Tensor]:
    """The toy's series with `function` in process, driven as the judge drives it (its calls paired with a
    cotangent, their gradients taken with autograd); a part that fails gives no series."""

    def observed(call: Call, timeout_s: float) -> dict[str, Any]:
        return observe(function, call)

    toy = types.SimpleNamespace(PARTS=parts or problem.experiment_module.PARTS)
    series: dict[str, torch.Tensor] = {}
    for part in run_experiment(toy, [FUNCTION], observed, seed, math.inf, math.inf):
        series.update(part.series)
    return series


@pytest.mark.parametrize("seed", [20260606, 7])
def test_head_sweep_reproduces_the_statements_values(problem: Problem, seed: int) -> None:
    advantages: list[float] = []
    function = _recording(problem.reference[FUNCTION], advantages)
    series = _toy_series(problem, function, seed, (problem.experiment_module.head_sweep,))
    scale = abs(advantages[0])
    assert 0.5 <= scale <= 1.5 and len(set(advantages)) == 1
    for mode, known in KNOWN_SWEEP.items():
        got = series[f"sweep_{mode}"].tolist()  # the toy plots per unit of |A|, as the table reads
        for k, (value, expected) in enumerate(zip(got, known, strict=True)):
            if expected is None:
                assert value < 1e-12, (mode, k, value)
            else:
                assert value == pytest.approx(expected, abs=6e-4), (mode, k)


@pytest.mark.parametrize("seed", [20260505, *range(1, 20)])
def test_bandit_centred_keeps_the_signal_uncentred_drifts_to_q(problem: Problem, seed: int) -> None:
    """The statement's claim, at the public seed and 19 others: action 0 is the better one, yet the uncentred
    run moves p(action 0) down toward q at every step; the centred and on-policy runs move it up."""
    series = _toy_series(problem, problem.reference[FUNCTION], seed, (problem.experiment_module.bandit,))
    centred, uncentred = series["bandit_centered"], series["bandit_uncentered"]
    on_policy, q = series["bandit_on_policy"], series["bandit_q"]
    assert bool((uncentred[1:] < uncentred[:-1]).all()) and bool((uncentred > q).all())
    assert bool((centred[1:] > centred[:-1]).all()) and float(on_policy[-1]) > float(on_policy[0])


def _reference_series(problem: Problem, functions: dict[str, Callable[..., Any]], seed: int) -> dict[str, torch.Tensor]:
    return _toy_series(problem, functions[FUNCTION], seed)


def test_series_are_seeded_float64_vectors_named_in_the_spec(problem: Problem) -> None:
    one = _reference_series(problem, problem.reference, problem.spec.public_seed)
    two = _reference_series(problem, problem.reference, problem.grading_seeds[0])
    checked = {name for check in problem.spec.checks for name in check.series}
    plotted = {p.x for p in problem.spec.plots} | {line.y for p in problem.spec.plots for line in p.lines}
    assert checked | plotted <= set(one)
    assert all(v.dtype == torch.float64 and v.dim() == 1 and not v.requires_grad for v in one.values())
    assert all(not torch.equal(one[name], two[name]) for name in checked)


def test_no_trivial_answer_matches_any_t3_series(problem: Problem) -> None:
    seed = problem.grading_seeds[0]
    want = _reference_series(problem, problem.reference, seed)
    matches = []
    for name, function in _functions(_trivial_sources()).items():
        got = _reference_series(problem, {FUNCTION: function}, seed)
        for check in problem.spec.checks:
            if check.tier == "T3":
                tol = Tolerance(rtol=check.rtol, atol=check.atol)
                matches += [
                    f"{name}: {s}"
                    for s in check.series
                    if s in got and compare_tensors(s, got[s], want[s], tol) is None
                ]
    assert not matches, matches


# ---------------------------------------------------------------- end to end, through the CLI


@pytest.fixture(scope="module")
def graded(run_cli, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """The two sample submissions and the uncentred answer, graded in one `grade-all` run."""
    extra = {f"{name}.py": source for name, source in _trivial_sources().items()}
    return grade_samples(run_cli, tmp_path_factory, PROBLEM, extra).reports


def test_dense_sample_scores_full_marks(graded: dict[str, dict[str, Any]]) -> None:
    report = graded["iris_dense"]
    assert_full_marks(report)
    assert sorted(report["artifacts"]) == ["bandit_drift.png", "head_sweep.png", "tail_coefficient.png"]


def test_forgotten_tail_weight_is_diagnosed_and_charged_in_its_check(graded: dict[str, dict[str, Any]]) -> None:
    report = graded["jack_rowloop"]
    checks = checks_of(report)
    assert report["score"] < 100
    assert checks["tail_weight"]["verdict"] == Verdict.FAIL
    assert checks["centering_residual"]["verdict"] == Verdict.PASS  # mode none: alpha' = alpha is right there
    assert report["diagnosis"][0]["id"] == "tail_coefficient_alpha"


@pytest.mark.parametrize("name", sorted(_trivial_sources()))
def test_trivial_answer_earns_nothing_beyond_t0(graded: dict[str, dict[str, Any]], name: str) -> None:
    report = graded[name]
    assert report["status"] == Status.GRADED
    passed = [c["id"] for t in report["tiers"] if t["tier"] != "T0" for c in t["checks"] if c["score"] > 0]
    scores = tier_scores(report)
    assert (scores["T1"], scores["T2"], scores["T3"]) == (0, 0, 0), f"{name} earns points in {passed}"
