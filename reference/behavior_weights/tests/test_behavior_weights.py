"""behavior_weights: the toy against closed forms, a constant clipfrac earns nothing, the samples end to end."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import ROOT, all_seeds, assert_full_marks, checks_of, grade_samples

from grader.judge.accept import accept_observation
from grader.judge.cases import generator_for
from grader.judge.compare import compare_tensors, judge_case
from grader.judge.expectations import reference_series, run_series
from grader.model.problem import Problem
from grader.model.spec import Tolerance
from grader.model.verdicts import Verdict
from grader.worker.protocol import observe_call

PROBLEM = "behavior_weights"
CREDIT = Path(__file__).resolve().parent / "credit"  # a file that raises as a misreading does, and its twin
CORRECT, MISTAKE = "grace_flat_tokens", "henry_open_interval"
Function = Callable[..., Any]


# ---------------------------------------------------------------- a constant clipfrac (the fully trivial answers
# are in trivial/, proved with every problem's)


def _constant_clipfrac(reference: Function, value: float) -> Function:
    """The reference's weights with a constant clipfrac: only clipfrac can give it away."""

    def answer(train_logp, rollout_logp, mask, mode, low=None, high=None):
        weights, _ = reference(train_logp, rollout_logp, mask, mode, low, high)
        return weights, torch.tensor(value, dtype=train_logp.dtype)

    return answer


def _clipfrac_only(problem: Problem) -> dict[str, Function]:
    reference = problem.reference[PROBLEM]
    return {f"clipfrac {v:g}": _constant_clipfrac(reference, v) for v in (0.0, 1.0)}


def test_constant_clipfrac_passes_no_t1_or_t2_case_on_any_seed(problem: Problem) -> None:
    """Per case that returns, on the public and every hidden seed (where the call must raise, the reference's
    weights raise too)."""
    answers = _clipfrac_only(problem)
    tolerances = problem.tolerances
    passes = []
    for seed in all_seeds(problem):
        for check in problem.spec.checks:
            if check.tier not in ("T1", "T2") or check.cases is None:
                continue
            source = problem.oracle if check.expected == "oracle" else problem.reference
            for call in problem.case_generator(check.cases)(generator_for(seed, check.cases)):
                want = observe_call(source[PROBLEM], call.kwargs, [], False)
                if "raised" in want:
                    continue
                for name, function in answers.items():
                    got = accept_observation(observe_call(function, call.kwargs, [], False))
                    if judge_case(PROBLEM, call.kwargs, got, want, check.compare, tolerances).verdict == Verdict.PASS:
                        passes.append(f"seed {seed}, {check.id}, {name}: {call.label}")
    assert not passes, "\n".join(passes)


def test_constant_clipfrac_matches_no_toy_clipfrac(problem: Problem) -> None:
    seed = problem.grading_seeds[0]
    want, _ = reference_series(problem, seed)
    (check,) = [c for c in problem.spec.checks if c.id == "toy_clipfrac"]
    tol = None if check.exact else Tolerance(rtol=check.rtol, atol=check.atol)
    matches = []
    for name, function in _clipfrac_only(problem).items():
        got, _, failures = run_series(problem, seed, {PROBLEM: function})
        assert not failures, (name, failures)
        matches += [
            f"{name}: {series}"
            for series in check.series
            if compare_tensors(series, got[series], want[series], tol) is None
        ]
    assert not matches, matches


# ---------------------------------------------------------------- the toy against closed forms


def _categorical(problem: Problem, seed: int) -> tuple[list[float], list[float], list[float]]:
    """The toy's q, p0 and f under `seed`, drawn as its cap sweep draws them."""
    q, p0, f, _, _ = problem.experiment_module._categorical(generator_for(seed, "experiment:cap_sweep"))
    return q.tolist(), p0.tolist(), f.tolist()


@pytest.mark.parametrize("seed_index", [0, 1])
def test_toy_bias_matches_the_closed_forms(problem: Problem, seed_index: int) -> None:
    """TIS bias = -E_q[(rho - U) f 1{rho > U}]; ICE-POP bias = -E_q[rho f 1{rho outside [1/U, U]}]."""
    seed = all_seeds(problem)[seed_index]
    series, _ = reference_series(problem, seed)
    q, p0, f = _categorical(problem, seed)
    rho = [a / b for a, b in zip(p0, q, strict=True)]
    for index, cap in enumerate(problem.experiment_module.CAPS):
        tis = -sum(qa * (r - cap) * fa for qa, r, fa in zip(q, rho, f, strict=True) if r > cap)
        ice = -sum(qa * r * fa for qa, r, fa in zip(q, rho, f, strict=True) if not 1 / cap <= r <= cap)
        assert math.isclose(float(series["tis_bias"][index]), tis, rel_tol=0, abs_tol=1e-12), cap
        assert math.isclose(float(series["icepop_bias"][index]), ice, rel_tol=0, abs_tol=1e-12), cap
        assert abs(float(series["is_bias"][index])) < 1e-12


def test_toy_ratios_stay_off_the_cap_grid(problem: Problem) -> None:
    """Under every seed the only ratio on the cap grid is the table's exact 1 at U = 1 (equal log-probabilities);
    every other ratio sits more than 1e-9 from U and 1/U, so rounding cannot flip a curve."""
    for seed in all_seeds(problem):
        q, p0, _ = _categorical(problem, seed)
        for a, b in zip(p0, q, strict=True):
            for cap in problem.experiment_module.CAPS:
                if a == b and cap == 1.0:
                    continue
                assert abs(a / b - cap) > 1e-9 and abs(a / b - 1 / cap) > 1e-9, (seed, a, b, cap)


@pytest.mark.parametrize("seed_index", range(7))
def test_toy_claims_of_the_statement_hold(problem: Problem, seed_index: int) -> None:
    """TIS bias vanishes once U passes the largest ratio 3.889; ICE-POP bias is never 0 on the grid; at U = 1
    ICE-POP keeps only the ratio-1 action."""
    series, _ = reference_series(problem, all_seeds(problem)[seed_index])
    caps = torch.tensor(problem.experiment_module.CAPS, dtype=torch.float64)
    assert float(series["tis_bias"][caps >= 3.889].abs().max()) < 1e-15
    assert bool((series["tis_bias"][caps < 3.889] != 0).all())
    assert bool((series["icepop_bias"] != 0).all())
    assert float(series["icepop_clipfrac"][0]) == 7 / 8


@pytest.mark.parametrize("seed_index", [0, 1])
def test_reference_series_are_float64_vectors(problem: Problem, seed_index: int) -> None:
    series, parts = reference_series(problem, all_seeds(problem)[seed_index])
    assert set(parts) == set(series) and set(parts.values()) == {"cap_sweep", "bf16_endpoints"}
    names = {name for check in problem.spec.checks for name in check.series}
    names |= {plot.x for plot in problem.spec.plots} | {line.y for plot in problem.spec.plots for line in plot.lines}
    assert names <= set(series)
    assert all(v.dtype == torch.float64 and v.dim() == 1 and not v.requires_grad for v in series.values())
    assert 0 < float(series["bf16_on_bound"].min()) and float(series["bf16_on_bound"].max()) < 0.1


# ---------------------------------------------------------------- end to end, through the CLI


@pytest.fixture(scope="module")
def graded(run_cli, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, dict[str, Any]]]:
    """The samples, the starter and the follow-through pair of credit/, graded in one `grade-all` call."""
    starter = (ROOT / "problems" / PROBLEM / "starter.py").read_text()
    pair = {path.name: path.read_text() for path in CREDIT.glob("*.py")}
    batch = grade_samples(run_cli, tmp_path_factory, PROBLEM, {"starter.py": starter, **pair})
    return batch.out, batch.reports


def test_correct_sample_scores_full_marks_and_draws_every_plot(graded, problem: Problem) -> None:
    out, reports = graded
    report = reports[CORRECT]
    assert_full_marks(report)
    names = sorted(plot.file for plot in problem.spec.plots)
    assert sorted(report["artifacts"]) == names
    assert all((out / CORRECT / name).read_bytes().startswith(b"\x89PNG") for name in names)


def test_open_interval_sample_is_charged_in_the_endpoint_check(graded) -> None:
    """The strict interval shows wherever a ratio sits on a bound; it is charged in `exact_endpoints`, which owns
    it, and carried forward in the other T2 checks. The toys whose curves it moves charge it too: the cap toy's
    ICE-POP interval [1, 1] at U = 1 keeps the action of ratio exactly 1, and the bfloat16 toy counts exactly the
    kept tokens on a bound. Random batches and the errors never touch it."""
    _, reports = graded
    checks = checks_of(reports[MISTAKE])
    failed = {name for name, check in checks.items() if check["verdict"] != Verdict.PASS}
    shown = failed | {name for name, check in checks.items() if check["cases_followed_through"]}
    assert failed == {"exact_endpoints", "toy_icepop_bias", "toy_icepop_spread", "toy_clipfrac", "toy_bf16_on_bound"}
    assert {"endpoint_sweep", "bfloat16_inputs"} <= shown
    errors = {"shape_errors", "mode_errors", "bound_errors"}
    assert {"oracle_tis", "oracle_icepop", "oracle_padded", *errors}.isdisjoint(shown)
    assert reports[MISTAKE]["diagnosis"][0]["id"] == "icepop_open_interval"


def test_the_unmodified_starter_earns_nothing(graded) -> None:
    """Right signatures and no call answered: the signature check has nothing to credit either."""
    _, reports = graded
    checks = checks_of(reports["starter"])
    assert reports["starter"]["score"] == checks["signatures"]["score"] == 0
    assert "NotImplementedError" in checks["oracle_tis"]["message"]


def test_raising_as_a_misreading_does_buys_no_credit(graded: tuple[Path, dict[str, dict[str, Any]]]) -> None:
    """The TIS bug with a mask used as a bool raises RuntimeError where the mask misreading does; those failures
    are not that misreading's alone, so nothing is carried for them and the file earns no more than its twin."""
    _, reports = graded
    raising, twin = reports["tis_masks_bool_mask"], reports["tis_masks"]
    assert "tis_masks" in {d["id"] for d in raising["diagnosis"]}
    # the mask misreading raises only where the mask is not bool, the mask dtype check's cases: lost there
    assert checks_of(raising)["mask_dtypes"]["verdict"] != Verdict.PASS
    credited = {c["id"]: c["followed_through"] for c in checks_of(raising).values() if c["cases_followed_through"]}
    assert all("mask_used_as_bool" not in mids for mids in credited.values()), credited
    assert raising["score"] <= twin["score"]
