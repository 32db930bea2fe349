"""ppo_clip_loss: an oracle that agrees beyond T1, cases that keep their edge and change with the seed, a toy that
shows what the statement promises, and the samples end to end."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
import torch
from conftest import ROOT, all_seeds, assert_full_marks, checks_of, grade_samples, observe

from grader.judge.accept import accept_observation
from grader.judge.cases import Call, generator_for
from grader.judge.compare import judge_case
from grader.judge.experiment import run_experiment
from grader.model.problem import Problem
from grader.model.spec import CheckSpec
from grader.model.verdicts import Verdict

PROBLEM = "ppo_clip_loss"
SUBMISSIONS = ROOT / "submissions" / PROBLEM


def _calls(problem: Problem, check: CheckSpec, seed: int) -> list[Call]:
    assert check.cases is not None
    return problem.case_generator(check.cases)(generator_for(seed, check.cases))


def _group_key(index: int, call: Call) -> object:
    return ("group", call.group) if call.group is not None else index


def _passed_groups(problem: Problem, check: CheckSpec, seed: int, function: Callable[..., Any]) -> list[str]:
    """Labels of the scored groups (a grouped set of calls, or one ungrouped call) that `function` passes."""
    source = problem.oracle if check.expected == "oracle" else problem.reference
    verdicts: dict[object, tuple[str, bool]] = {}
    for index, call in enumerate(_calls(problem, check, seed)):
        want = observe(source[call.function], call)
        got = accept_observation(observe(function, call))
        outcome = judge_case(call.function, call.kwargs, got, want, check.compare, problem.tolerances)
        label, ok = verdicts.get(_group_key(index, call), (call.label, True))
        verdicts[_group_key(index, call)] = (label, ok and outcome.verdict == Verdict.PASS)
    return [label for label, ok in verdicts.values() if ok]


def _toy(problem: Problem, function: Callable[..., Any], seed: int) -> dict[str, torch.Tensor]:
    def observed(call: Call, timeout_s: float) -> dict[str, Any]:
        return accept_observation(observe(function, call))

    series: dict[str, torch.Tensor] = {}
    for part in run_experiment(problem.experiment_module, ["ppo_clip_loss"], observed, seed, 120.0, 10.0):
        series.update(part.series)
    return series


@pytest.fixture(scope="module")
def reference_toy(problem: Problem) -> dict[str, torch.Tensor]:
    series = _toy(problem, problem.reference["ppo_clip_loss"], problem.spec.public_seed)
    assert series, "the reference's toy produced nothing"
    return series


@pytest.fixture(scope="module")
def graded(run_cli, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """The two sample submissions, graded in one `grade-all` run."""
    return grade_samples(run_cli, tmp_path_factory, PROBLEM).reports


# ---------------------------------------------------------------- the oracle beyond T1 (T1: tests/test_problems.py)


def test_oracle_agrees_with_the_reference_on_every_other_check(problem: Problem) -> None:
    """The oracle is written apart: it must also raise, clip and reduce as the reference does on T0 and T2."""
    oracle = problem.oracle["ppo_clip_loss"]
    checks = [c for c in problem.spec.checks if c.cases and c.tier in ("T0", "T2")]
    for seed in (problem.spec.public_seed, problem.grading_seeds[0]):
        for check in checks:
            total = len({_group_key(i, c) for i, c in enumerate(_calls(problem, check, seed))})
            assert len(_passed_groups(problem, check, seed, oracle)) == total, f"seed {seed}, {check.id}"


# ---------------------------------------------------------------- the cases


def test_every_call_changes_with_the_seed(problem: Problem) -> None:
    for check in (c for c in problem.spec.checks if c.cases):
        first = _calls(problem, check, problem.spec.public_seed)
        other = _calls(problem, check, problem.grading_seeds[0])
        assert len(first) == len(other), check.id
        for a, b in zip(first, other, strict=True):
            tensors = [k for k, v in a.kwargs.items() if isinstance(v, torch.Tensor)]
            same = [
                k
                for k in tensors
                if a.kwargs[k].shape == b.kwargs[k].shape
                and torch.equal(a.kwargs[k].nan_to_num(), b.kwargs[k].nan_to_num())
            ]
            assert len(same) < len(tensors), f"{check.id}, {a.label}: no input changes with the seed"


def _branches(call: Call) -> dict[str, int]:
    """Counts of valid tokens per branch of the loss, and of empty responses, for one call."""
    kw = call.kwargs
    valid = kw["mask"] != 0
    low, high = 1 - kw.get("eps_low", 0.2), 1 + kw.get("eps_high", 0.2)
    ratio = torch.exp(torch.where(valid, kw["logp"] - kw["old_logp"], 0.0)).to(torch.float64)
    adv = kw["advantages"].to(torch.float64)[:, None].expand_as(ratio)
    cap = kw.get("dual_clip") or math.inf
    return {
        "clipped, A > 0": int((valid & (adv > 0) & (ratio > high)).sum()),
        "clipped, A < 0": int((valid & (adv < 0) & (ratio < low)).sum()),
        "unclipped, A > 0": int((valid & (adv > 0) & (ratio < high)).sum()),
        "unclipped, A < 0": int((valid & (adv < 0) & (ratio > low) & (ratio < cap)).sum()),
        "beyond the dual clip, A < 0": int((valid & (adv < 0) & (ratio > cap * 1.1)).sum()) if cap < math.inf else 1,
        "padded positions": int((~valid).sum()),
        "empty responses": int((valid.sum(dim=1) == 0).sum()),
    }


def test_random_cases_take_every_branch(problem: Problem) -> None:
    """Every branch in every random family; an empty response only in the families that own it."""
    for seed in all_seeds(problem):
        for check in (c for c in problem.spec.checks if c.tier == "T1"):
            family_empty = check.id.startswith("oracle_empty")
            for call in _calls(problem, check, seed):
                branches = _branches(call)
                empty = branches.pop("empty responses")
                missing = [k for k, n in branches.items() if n == 0]
                assert call.hidden and not missing, f"seed {seed}, {call.label}: no {missing}"
                assert (empty > 0) == family_empty, f"seed {seed}, {check.id}, {call.label}: {empty} empty"


def test_random_background_leaves_other_clauses_neutral(problem: Problem) -> None:
    """Outside the dual-clip family no call passes a dual clip, and no ratio under A < 0 reaches 3 (a cap left on at
    verl's 3 is dual_clip_none's to charge); every random call has a bool mask and symmetric widths."""
    for check in (c for c in problem.spec.checks if c.tier == "T1"):
        for call in _calls(problem, check, problem.grading_seeds[0]):
            kw = call.kwargs
            assert kw["mask"].dtype == torch.bool and kw["eps_low"] == kw["eps_high"], call.label
            if check.id == "oracle_dual_clip":
                assert kw["dual_clip"] is not None, call.label
                continue
            valid = (kw["mask"] != 0) & (kw["advantages"][:, None] < 0)
            ratio = torch.exp(torch.where(valid, kw["logp"] - kw["old_logp"], 0.0))
            assert kw["dual_clip"] is None and float(ratio.max()) < 3.0, f"{check.id}, {call.label}"


@pytest.mark.parametrize(("check_id", "answering"), [("stop_gradient", 4), ("value_errors", 23)])
def test_calls_judged_on_answering_have_shapes_no_public_call_has(
    problem: Problem, check_id: str, answering: int
) -> None:
    """The ordinary half of a stop-gradient group and a validation error's partner are judged on how they answer:
    on every grading seed their logp has a shape that no public call's has, so no public answer fits them."""
    public = {
        tuple(call.kwargs["logp"].shape)
        for check in problem.spec.checks
        if check.cases and check.public
        for call in _calls(problem, check, problem.spec.public_seed)
        if isinstance(call.kwargs.get("logp"), torch.Tensor)
    }
    (check,) = [c for c in problem.spec.checks if c.id == check_id]
    for seed in problem.grading_seeds:
        shapes = [
            tuple(call.kwargs["logp"].shape) for call in _calls(problem, check, seed) if "logp" in call.requires_grad
        ]
        judged = [shape for shape in shapes if shape[0] >= 7]
        assert len(judged) == answering and not set(judged) & public, f"seed {seed}: {sorted(set(judged) & public)}"


@pytest.mark.parametrize("check_id", ["empty_mask", "value_errors"])
def test_constant_answers_share_a_group_with_an_input_dependent_one(problem: Problem, check_id: str) -> None:
    (check,) = [c for c in problem.spec.checks if c.id == check_id]
    groups: dict[object, list[bool]] = {}
    for index, call in enumerate(_calls(problem, check, problem.spec.public_seed)):
        observed = observe(problem.reference[call.function], call)
        depends = "raised" not in observed and bool((call.kwargs["mask"] != 0).any())
        groups.setdefault(_group_key(index, call), []).append(depends)
    assert all(any(flags) and not all(flags) for flags in groups.values())


# ---------------------------------------------------------------- the toy shows what the statement says


def test_reference_series_cover_every_check_and_plot(problem: Problem, reference_toy: dict[str, torch.Tensor]) -> None:
    names = {name for check in problem.spec.checks for name in check.series}
    names |= {plot.x for plot in problem.spec.plots} | {line.y for plot in problem.spec.plots for line in plot.lines}
    assert names <= set(reference_toy), sorted(names - set(reference_toy))
    assert all(v.dtype == torch.float64 and v.dim() == 1 for v in reference_toy.values())


def test_sweep_is_flat_where_a_clip_binds(reference_toy: dict[str, torch.Tensor]) -> None:
    r = reference_toy["sweep_ratio"]
    above, below = r > 1.2, r < 0.8
    loss_pos, loss_neg = reference_toy["sweep_loss_pos"], reference_toy["sweep_loss_neg"]
    assert above.any() and below.any() and float(r.max()) < 3.0  # no ratio a cap left on at 3 would reach
    torch.testing.assert_close(loss_pos[above], torch.full_like(r[above], -1.2))
    torch.testing.assert_close(loss_pos[~above], -r[~above])
    torch.testing.assert_close(loss_neg[below], torch.full_like(r[below], 0.8))
    torch.testing.assert_close(loss_neg[~below], r[~below])
    assert bool((reference_toy["sweep_grad_pos"][above] == 0).all())
    assert bool((reference_toy["sweep_grad_neg"][below] == 0).all())
    assert torch.equal(reference_toy["sweep_clipfrac_pos"], above.to(torch.float64))
    assert torch.equal(reference_toy["sweep_clipfrac_neg"], below.to(torch.float64))


def test_length_bias_pushes_read_the_weights_with_the_advantage_sign(reference_toy: dict[str, torch.Tensor]) -> None:
    for name, sign in (("pos", 1.0), ("neg", -1.0)):
        token, seq = reference_toy[f"lenbias_push_token_{name}"], reference_toy[f"lenbias_push_seq_{name}"]
        clipped = token == 0
        assert int(clipped.sum()) == 2 and bool((seq[clipped] == 0).all())  # two tokens on the binding side
        torch.testing.assert_close(token[~clipped], torch.full_like(token[~clipped], sign / 32))
        torch.testing.assert_close(seq[:2], torch.full((2,), sign / 4, dtype=torch.float64))
        torch.testing.assert_close(seq[2:][~clipped[2:]], torch.full_like(seq[2:][~clipped[2:]], sign / 60))
        # each response's total: 1/B each under seq_mean, less the long response's two clipped tokens
        expected = {"seq": [1 / 2, 28 / 60], "token": [2 / 32, 28 / 32]}
        for reduction, totals in expected.items():
            got = reference_toy[f"lenbias_total_{reduction}_{name}"]
            torch.testing.assert_close(got, sign * torch.tensor(totals, dtype=torch.float64))


def test_dual_clip_stops_one_token_from_carrying_the_batch(reference_toy: dict[str, torch.Tensor]) -> None:
    r, free, capped = reference_toy["dual_ratio"], reference_toy["dual_share_free"], reference_toy["dual_share_capped"]
    assert float(r.max()) > 25.0 and float(free[-1]) > 1 / 3  # one token of 24 carries over a third of the update
    assert bool((capped[r > 3.0] == 0).all()) and (r > 3.0).any()
    torch.testing.assert_close(capped[r < 3.0], free[r < 3.0])
    assert bool((free.diff() > 0).all())


def test_clipping_holds_the_ratios_that_run_away_without_it(reference_toy: dict[str, torch.Tensor]) -> None:
    assert float(reference_toy["epochs_max_ratio_clip"].max()) < 1.6
    assert float(reference_toy["epochs_min_ratio_clip"].min()) > 0.5
    assert float(reference_toy["epochs_max_ratio_free"][-1]) > 2.0
    assert float(reference_toy["epochs_min_ratio_free"][-1]) < 0.2
    clipfrac = reference_toy["epochs_clipfrac_clip"]
    assert float(clipfrac[0]) == 0.0 and float(clipfrac[1:].mean()) > 0.1


def _epoch_claims(series: dict[str, torch.Tensor]) -> dict[str, bool]:
    """The statement's claims about the reused batch, for one seed."""
    clipfrac = series["epochs_clipfrac_clip"]
    return {
        "clipfrac on by the fourth step": bool((clipfrac[:4] > 0).any()),
        "clipped ratios in [0.35, 1.5]": float(series["epochs_min_ratio_clip"].min()) > 0.35
        and float(series["epochs_max_ratio_clip"].max()) < 1.5,
        "clipped KL below 0.1": float(series["epochs_kl_clip"].max()) < 0.1,
        "free ratios past 1.8 and below 0.09": float(series["epochs_max_ratio_free"].max()) > 1.8
        and float(series["epochs_min_ratio_free"].min()) < 0.09,
        "free KL ends above 0.86": float(series["epochs_kl_free"][-1]) > 0.86,
        "free ends with the higher payoff": float(series["epochs_payoff_free"][-1])
        > float(series["epochs_payoff_clip"][-1]),
        "clipped improves on the start": float(series["epochs_payoff_clip"][-1])
        > float(series["epochs_payoff_clip"][0]),
    }


def test_reused_batch_claims_hold_at_the_public_seed_and_in_20_seeds(problem: Problem) -> None:
    """Clipping is a trust region here, not a cure for overfitting: the statement says so, in every seed."""
    part, reference = problem.experiment_module.reuse_epochs, problem.reference["ppo_clip_loss"]
    public = _epoch_claims(part(generator_for(problem.spec.public_seed, "experiment:reuse_epochs"), reference))
    assert all(public.values()), public
    held: dict[str, int] = {}
    for seed in range(20):
        for claim, ok in _epoch_claims(part(torch.Generator().manual_seed(seed), reference)).items():
            held[claim] = held.get(claim, 0) + ok
    assert all(n == 20 for n in held.values()), held


# ---------------------------------------------------------------- end to end, through the CLI


def test_correct_sample_scores_full_marks(graded: dict[str, dict[str, Any]]) -> None:
    report = graded["nora_per_response"]
    assert_full_marks(report)
    assert sorted(report["artifacts"]) == sorted(f"{p.file}" for p in Problem(PROBLEM).spec.plots)


def test_ratio_clipfrac_sample_is_charged_once_and_named(graded: dict[str, dict[str, Any]]) -> None:
    """Charged in the check of its clause and in the toys whose clipfrac curves it visibly changes (the sweep's
    and the reused batch's), nowhere else."""
    report = graded["omar_ratio_clipfrac"]
    lost = {c["id"] for c in checks_of(report).values() if c["score"] < c["max_score"]}
    assert lost == {"clipfrac_sign", "sweep_clipfrac", "epochs_clipfrac"}
    (misreading,) = [m for m in Problem(PROBLEM).misconceptions if m.id == "clipfrac_from_ratio_alone"]
    assert lost == set(misreading.owners)
    assert report["diagnosis"][0]["id"] == "clipfrac_from_ratio_alone"
