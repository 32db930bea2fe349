"""grpo_advantages: the toy reproduces known values, centring alone earns nothing where normalization is due, and
the samples end to end."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from conftest import assert_full_marks, checks_of, grade_samples

from grader.judge.accept import accept_observation
from grader.judge.cases import generator_for
from grader.judge.compare import compare_tensors, judge_case
from grader.judge.expectations import reference_series, run_series
from grader.model.problem import Problem
from grader.model.spec import Tolerance
from grader.model.verdicts import Verdict
from grader.worker.protocol import observe_call

PROBLEM = "grpo_advantages"
# S(p) for G = 8, ddof 0, eps 1e-6, as quoted in the statement's derivation.
KNOWN_SCALE_G8 = {0.05: 2.473, 0.3: 1.963, 0.5: 1.856}

# Right only when std_normalize=False: centring, never dividing by sigma. The fully trivial answers (zeros, ones,
# the rewards echoed) are in trivial/, proved with every problem's.
CENTRED = "trivial_centred"
CENTRED_SOURCE = (
    "import torch\n\n\n"
    "def grpo_advantages(rewards, group_size, std_normalize=True, eps=1e-6, unbiased=False):\n"
    "    grouped = rewards.detach().reshape(-1, group_size)\n"
    "    return (grouped - grouped.mean(dim=1, keepdim=True)).reshape(-1)\n"
)


def _centred() -> Callable[..., Any]:
    namespace: dict[str, Any] = {}
    exec(CENTRED_SOURCE, namespace)  # our own fixed source text
    return namespace["grpo_advantages"]


def _normalized(kwargs: dict[str, Any]) -> bool:
    return kwargs.get("std_normalize", True) is not False


@pytest.fixture(scope="module")
def graded(run_cli, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """The two sample submissions and the centring answer, graded in one `grade-all` run."""
    return grade_samples(run_cli, tmp_path_factory, PROBLEM, {f"{CENTRED}.py": CENTRED_SOURCE}).reports


# ---------------------------------------------------------------- in-process: reference, oracle, toy


@pytest.mark.parametrize("seed_index", [0, 1])
def test_bandit_scale_reproduces_known_values(problem: Problem, seed_index: int) -> None:
    """S(p) depends neither on the reward values nor on the order of the samples that each seed draws."""
    series, _ = reference_series(problem, [problem.spec.public_seed, *problem.grading_seeds][seed_index])
    p = series["success_p"]
    for value, expected in KNOWN_SCALE_G8.items():
        (index,) = (p - value).abs().argmin(dim=0, keepdim=True).tolist()
        assert float(p[index]) == pytest.approx(value, abs=1e-12)
        assert float(series["scale_std_g8"][index]) == pytest.approx(expected, abs=5e-4)
    for group_size in (2, 4, 8, 16):
        flat = torch.full_like(p, 1.0 - 1.0 / group_size)
        assert torch.allclose(series[f"scale_centred_g{group_size}"], flat, rtol=1e-12, atol=0)


def _scale_claims(series: dict[str, torch.Tensor]) -> dict[str, bool]:
    """The statement's claims about S(p) with std normalization, for one seed's series."""
    p = series["success_p"]
    half = int((p - 0.5).abs().argmin())
    claims = {"G = 2 flat at 1": bool(((series["scale_std_g2"] - 1.0).abs() < 4e-6).all())}
    for group_size in (2, 4, 8, 16):
        scale = series[f"scale_std_g{group_size}"]
        claims[f"G = {group_size} symmetric in p"] = bool(((scale - scale.flip(0)).abs() < 4e-15).all())
        if group_size > 2:
            # a U: smallest at p = 1/2, largest at both ends
            claims[f"G = {group_size} a U"] = int(scale.argmin()) == half and float(scale[0]) > float(scale[half])
    return claims


def test_normalized_scale_is_symmetric_in_p_at_the_public_seed_and_in_20_seeds(problem: Problem) -> None:
    """Dr. GRPO's difficulty bias: too hard and too easy prompts are amplified alike, and G = 2 not at all."""
    part, reference = problem.experiment_module.scale_curves, problem.reference["grpo_advantages"]
    public = _scale_claims(part(generator_for(problem.spec.public_seed, "experiment:scale_curves"), reference))
    assert all(public.values()), public
    for seed in range(20):
        claims = _scale_claims(part(torch.Generator().manual_seed(seed), reference))
        assert all(claims.values()), (seed, claims)


def test_every_plotted_line_has_a_label(problem: Problem) -> None:
    """An empty label makes matplotlib name the line itself (`_child5`) in the legend."""
    assert all(line.label.strip() for plot in problem.spec.plots for line in plot.lines)


def test_reference_series_are_float64_vectors(problem: Problem) -> None:
    series, parts = reference_series(problem, problem.grading_seeds[0])
    assert set(parts) == set(series) and set(parts.values()) == {"scale_curves"}
    names = {name for check in problem.spec.checks for name in check.series}
    names |= {plot.x for plot in problem.spec.plots} | {line.y for plot in problem.spec.plots for line in plot.lines}
    assert names <= set(series)
    assert all(v.dtype == torch.float64 and v.dim() == 1 and not v.requires_grad for v in series.values())


def test_centring_passes_no_t1_or_t2_case_where_normalization_is_due(problem: Problem) -> None:
    """Per case, on the public seed and every hidden one."""
    centred = _centred()
    tolerances = problem.tolerances
    passes = []
    for seed in [problem.spec.public_seed, *problem.grading_seeds]:
        for check in problem.spec.checks:
            if check.tier not in ("T1", "T2") or check.cases is None:
                continue
            source = problem.oracle if check.expected == "oracle" else problem.reference
            for call in problem.case_generator(check.cases)(generator_for(seed, check.cases)):
                want = observe_call(source[call.function], call.kwargs, [], False)
                if not _normalized(dict(call.kwargs)) and "raised" not in want:
                    continue
                got = accept_observation(observe_call(centred, call.kwargs, [], False))
                outcome = judge_case(call.function, call.kwargs, got, want, check.compare, tolerances)
                if outcome.verdict == Verdict.PASS:
                    passes.append(f"seed {seed}, {check.id}: {call.label}")
    assert not passes, "\n".join(passes)


def test_centring_matches_no_normalized_t3_series(problem: Problem) -> None:
    seed = problem.grading_seeds[0]
    want, _ = reference_series(problem, seed)
    got, _, failures = run_series(problem, seed, {PROBLEM: _centred()})
    assert not failures, failures
    matches = []
    for check in problem.spec.checks:
        if check.tier != "T3" or check.id == "scale_centred":
            continue
        tol = Tolerance(rtol=check.rtol, atol=check.atol)
        matches += [s for s in check.series if compare_tensors(s, got[s], want[s], tol) is None]
    assert not matches, matches


def _calls(problem: Problem, check_id: str, seed: int) -> list[Any]:
    (check,) = [c for c in problem.spec.checks if c.id == check_id]
    name = check.cases or check.id
    return problem.case_generator(name)(generator_for(seed, name))


@pytest.mark.parametrize("check_id", ["oracle_std", "oracle_std_unbiased", "oracle_centred"])
def test_oracle_batches_hold_spread_groups_only(problem: Problem, check_id: str) -> None:
    """The neutral background: no constant group, and every sigma so far above eps = 1e-6 that where eps sits
    moves no advantage beyond float32's tolerance; those conventions are their own checks' clauses."""
    for seed in [problem.spec.public_seed, *problem.grading_seeds]:
        for call in _calls(problem, check_id, seed):
            grouped = call.kwargs["rewards"].to(torch.float64).reshape(-1, call.kwargs["group_size"])
            sigma = grouped.std(dim=1, unbiased=False)
            assert float(sigma.min()) > 0.2, (seed, call.label)
            assert call.kwargs.get("eps", 1e-6) <= 1e-6, (seed, call.label)


CONVENTION_CHECKS = [
    "contract",
    "single_sample_groups",
    "constant_groups",
    "unbiased_ddof",
    "eps_placement",
    "contiguous_groups",
    "per_group_statistics",
    "default_arguments",
    "binary_rewards",
    "non_contiguous",
    "rewards_errors",
    "group_size_errors",
    "eps_errors",
    "float64_precision",
]


@pytest.mark.parametrize("check_id", CONVENTION_CHECKS)
def test_a_convention_check_scores_its_cases_as_one(problem: Problem, check_id: str) -> None:
    """A convention broken in any of its cases costs the check's whole weight, never a fraction of it."""
    groups = {call.group for call in _calls(problem, check_id, problem.grading_seeds[0])}
    assert len(groups) == 1 and None not in groups, groups


BATCH_MEAN_SOURCE = (
    "import torch\n\n\n"
    "def grpo_advantages(rewards, group_size, std_normalize=True, eps=1e-6, unbiased=False):\n"
    "    grouped = rewards.detach().reshape(-1, group_size)\n"
    "    same = (grouped == grouped[:, :1]).all(dim=1, keepdim=True)\n"
    "    centred = grouped - grouped.mean()\n"
    "    if std_normalize:\n"
    "        centred = centred / (centred.std(dim=1, unbiased=unbiased, keepdim=True) + eps)\n"
    "    return torch.where(same, torch.zeros(()), centred).reshape(-1)\n"
)


def test_a_batch_wide_baseline_bends_every_toy_series(problem: Problem) -> None:
    """The toy's batch is not symmetric in success and failure, so even G = 2 shows a batch-wide mean."""
    namespace: dict[str, Any] = {}
    exec(BATCH_MEAN_SOURCE, namespace)  # our own fixed source text
    seed = problem.grading_seeds[0]
    want, _ = reference_series(problem, seed)
    got, _, failures = run_series(problem, seed, {PROBLEM: namespace["grpo_advantages"]})
    assert not failures, failures
    matching = []
    for check in problem.spec.checks:
        if check.tier == "T3":
            tol = Tolerance(rtol=check.rtol, atol=check.atol)
            matching += [s for s in check.series if compare_tensors(s, got[s], want[s], tol) is None]
    assert not matching, matching


# ---------------------------------------------------------------- end to end, through the CLI


def test_correct_sample_scores_full_marks(graded: dict[str, dict[str, Any]]) -> None:
    report = graded["ada_segments"]
    assert_full_marks(report)
    assert sorted(report["artifacts"]) == ["scale_centred.png", "scale_normalized.png"]


def test_typical_mistake_loses_the_constant_group_points(graded: dict[str, dict[str, Any]]) -> None:
    report = graded["ben_torch_std"]
    checks = checks_of(report)
    assert report["score"] < 100
    assert checks["constant_groups"]["verdict"] == Verdict.FAIL
    assert checks["single_sample_groups"]["verdict"] == Verdict.FAIL
    assert checks["scale_normalized"]["verdict"] == Verdict.PASS  # 0/1 groups hide the mistake in the toy


def test_centring_alone_earns_nothing_where_normalization_is_due(graded: dict[str, dict[str, Any]]) -> None:
    checks = checks_of(graded[CENTRED])
    normalized_only = [
        "oracle_std",
        "oracle_std_unbiased",
        "unbiased_ddof",
        "eps_placement",
        "default_arguments",
        "scale_normalized",
    ]
    assert {name: checks[name]["score"] for name in normalized_only} == dict.fromkeys(normalized_only, 0)
