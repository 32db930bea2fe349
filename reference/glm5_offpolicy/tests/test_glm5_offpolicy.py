"""glm5_offpolicy: the sample submissions end to end, the random cases and the toy's series."""

from __future__ import annotations

import pytest
import torch
from conftest import Batch, assert_full_marks, checks_of

from grader.judge.cases import generator_for
from grader.judge.expectations import reference_series
from grader.model.problem import Problem
from grader.model.verdicts import Status, Verdict

PROBLEM = "glm5_offpolicy"
CORRECT = ["alice_loops", "bob_vectorized"]
# each wrong submission, and a check its defect must fail
WRONG = {
    "carol_inclusive": "exact_endpoints",
    "dan_retained_mean": "denominator_counts_rejected",
    "erin_grad_weights": "rollout_detached",
}


def test_every_submission_is_graded(submission_batch: Batch) -> None:
    assert submission_batch.result.returncode == 0, submission_batch.result.stderr
    assert set(submission_batch.reports) == {*CORRECT, *WRONG, "frank_starter"}
    assert all(r["status"] == Status.GRADED for r in submission_batch.reports.values())


@pytest.mark.parametrize("name", CORRECT)
def test_correct_submission_scores_full_marks(submission_batch: Batch, name: str) -> None:
    report = submission_batch.reports[name]
    assert_full_marks(report)


@pytest.mark.parametrize(("name", "check"), WRONG.items())
def test_wrong_submission_loses_points_on_its_defect(submission_batch: Batch, name: str, check: str) -> None:
    report = submission_batch.reports[name]
    assert report["score"] < 100
    assert checks_of(report)[check]["verdict"] == Verdict.FAIL


def test_the_unmodified_starter_earns_nothing(submission_batch: Batch) -> None:
    """Right signatures and no call answered: the signature check has nothing to credit either."""
    report = submission_batch.reports["frank_starter"]
    checks = checks_of(report)
    assert checks["signatures"]["verdict"] != Verdict.PASS
    assert report["score"] == 0
    assert "NotImplementedError" in checks["oracle_weights"]["message"]


def test_learner_plots_are_drawn(submission_batch: Batch, problem: Problem) -> None:
    names = sorted(plot.file for plot in problem.spec.plots)
    assert sorted(submission_batch.reports["bob_vectorized"]["artifacts"]) == names
    for name in names:
        assert (submission_batch.out / "bob_vectorized" / name).read_bytes().startswith(b"\x89PNG")


@pytest.mark.parametrize("seed_index", range(3))
def test_random_cases_keep_and_reject_a_valid_token(problem: Problem, seed_index: int) -> None:
    """Each T1 case has a kept and a ratio-rejected valid token, and a non-zero loss."""
    seed = problem.grading_seeds[seed_index]
    weights = problem.case_generator("random_weights")(generator_for(seed, "random_weights"))
    for call in weights:
        w = problem.reference["masked_is_weights"](**call.kwargs)  # [B, L]
        valid = call.kwargs["mask"] != 0
        assert bool((w[valid] != 0).any()) and bool((w[valid] == 0).any()), call.label
    for call in problem.case_generator("random_loss")(generator_for(seed, "random_loss")):
        assert float(problem.reference["offpolicy_loss"](**call.kwargs)) != 0, call.label


@pytest.mark.parametrize("seed_index", [0, 1])
def test_reference_series_are_float64_vectors(problem: Problem, seed_index: int) -> None:
    series, parts = reference_series(problem, [problem.spec.public_seed, *problem.grading_seeds][seed_index])
    assert set(parts) == set(series) and set(parts.values()) == {"ratio_sweep", "stale_bandit"}
    names = {name for check in problem.spec.checks for name in check.series}
    names |= {plot.x for plot in problem.spec.plots} | {line.y for plot in problem.spec.plots for line in plot.lines}
    assert names <= set(series)
    assert all(v.dtype == torch.float64 and v.dim() == 1 and not v.requires_grad for v in series.values())


@pytest.mark.parametrize("seed_index", range(7))
def test_sweep_holds_both_endpoints_exactly(problem: Problem, seed_index: int) -> None:
    """The statement promises the functions see r == 0.8 and r == 1.2 exactly, at the public seed too."""
    series, _ = reference_series(problem, [problem.spec.public_seed, *problem.grading_seeds][seed_index])
    ratio = series["sweep_ratio"]
    assert bool((ratio == 0.8).any()) and bool((ratio == 1.2).any())
    assert float(series["sweep_weights"][(ratio == 0.8) | (ratio == 1.2)].abs().max()) == 0.0


def test_sweep_ppo_clip_curves_are_the_statement_table(problem: Problem) -> None:
    """PPO-clip's effective weight: (0.6, 1, 0) for A = +1 and (0, 1, 1.4) for A = -1 at r = (0.6, 1, 1.4)."""
    series, _ = reference_series(problem, problem.spec.public_seed)
    ratio = series["sweep_ratio"]
    for r, positive, negative in [(0.6, 0.6, 0.0), (1.0, 1.0, 1.0), (1.4, 0.0, 1.4)]:
        at = int((ratio - r).abs().argmin())
        near = float(ratio[at])
        assert abs(near - r) < 0.05
        assert float(series["sweep_ppo_positive"][at]) == pytest.approx(near if positive else 0.0, abs=1e-12)
        assert float(series["sweep_ppo_negative"][at]) == pytest.approx(near if negative else 0.0, abs=1e-12)
    assert bool(series["sweep_ppo_positive"][(ratio == 0.8) | (ratio == 1.2)].isnan().all())
