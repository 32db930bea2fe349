"""routed_gates: an oracle that agrees beyond T1, cases that keep their edge and change with the seed, a toy that
shows what the statement promises, small known-wrong files, and the samples end to end."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import ROOT, all_seeds, assert_full_marks, checks_of, grade_samples, observe

from grader.judge.accept import accept_observation
from grader.judge.cases import Call, generator_for
from grader.judge.compare import judge_case
from grader.judge.experiment import run_experiment
from grader.model.problem import Problem, load_module
from grader.model.spec import CheckSpec
from grader.model.verdicts import Verdict

PROBLEM = "routed_gates"
SUBMISSIONS = ROOT / "submissions" / PROBLEM
CREDIT = Path(__file__).resolve().parent / "credit"  # a file that misreads a form on purpose, and its twin
# |F_train - F_rollout| on the even 2001-point grid with the base shift, as computed with an independent script
T3_CHECKS = {"selection_jumps", "replayed_difference", "sweep_no_replay", "sweep_replay", "replay_gradient"}
KNOWN_SWITCHES, KNOWN_JUMP, KNOWN_SAME_ROUTE = 40, 0.685267, 0.006511


def _check(problem: Problem, check_id: str) -> CheckSpec:
    (check,) = [c for c in problem.spec.checks if c.id == check_id]
    return check


def _calls(problem: Problem, check: CheckSpec, seed: int) -> list[Call]:
    assert check.cases is not None
    return problem.case_generator(check.cases)(generator_for(seed, check.cases))


def _outputs(function: Callable[..., Any], call: Call) -> tuple[torch.Tensor, torch.Tensor]:
    gates, routing_map = function(**call.kwargs)
    return gates.detach(), routing_map


def _group_key(index: int, call: Call) -> object:
    return ("group", call.group) if call.group is not None else index


def _passed_groups(
    problem: Problem, check: CheckSpec, seed: int, functions: dict[str, Callable[..., Any]]
) -> dict[str, list[str]]:
    """Per function, the labels of the scored groups (a grouped set of calls, or one ungrouped call) it passes;
    the expected observation of each call is computed once for all of them."""
    source = problem.oracle if check.expected == "oracle" else problem.reference
    verdicts: dict[str, dict[object, tuple[str, bool]]] = {name: {} for name in functions}
    for index, call in enumerate(_calls(problem, check, seed)):
        want = observe(source[call.function], call)
        for name, function in functions.items():
            got = accept_observation(observe(function, call))
            outcome = judge_case(call.function, call.kwargs, got, want, check.compare, problem.tolerances)
            label, ok = verdicts[name].get(_group_key(index, call), (call.label, True))
            verdicts[name][_group_key(index, call)] = (label, ok and outcome.verdict == Verdict.PASS)
    return {name: [label for label, ok in found.values() if ok] for name, found in verdicts.items()}


def _toy(problem: Problem, function: Callable[..., Any], seed: int) -> dict[str, torch.Tensor]:
    def observed(call: Call, timeout_s: float) -> dict[str, Any]:
        return accept_observation(observe(function, call))

    series: dict[str, torch.Tensor] = {}
    for part in run_experiment(problem.experiment_module, [PROBLEM], observed, seed, 120.0, 10.0):
        series.update(part.series)
    return series


def _wrong(problem: Problem, name: str) -> Callable[..., Any]:
    (known,) = [k for k in problem.known_wrong() if k.path.stem == name]
    module = load_module(f"paperleet_test_routed_{name}", known.path)
    return module.routed_gates


@pytest.fixture(scope="module")
def reference_toy(problem: Problem) -> dict[str, torch.Tensor]:
    series = _toy(problem, problem.reference[PROBLEM], problem.spec.public_seed)
    assert series, "the reference's toy produced nothing"
    return series


@pytest.fixture(scope="module")
def graded(run_cli, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """The two sample submissions, the follow-through pair of credit/ and the float32 copy of the reference,
    graded in one `grade-all` run."""
    pair = {path.name: path.read_text() for path in CREDIT.glob("*.py")}
    pair["float32_copy.py"] = Problem(PROBLEM).known_wrong_file("float32_arithmetic").read_text()
    return grade_samples(run_cli, tmp_path_factory, PROBLEM, pair).reports


# ---------------------------------------------------------------- the oracle beyond T1 (T1: tests/test_problems.py)


def test_random_cases_are_hidden(problem: Problem) -> None:
    """T1 draws its batches from the hidden seed: no learner sees them, nor their labels' values."""
    for check in (c for c in problem.spec.checks if c.tier == "T1"):
        assert check.expected == "oracle" and not check.public, check.id
        assert all(call.hidden for call in _calls(problem, check, problem.grading_seeds[0])), check.id


def test_oracle_agrees_with_the_reference_on_every_other_value_check(problem: Problem) -> None:
    """Written apart, the oracle selects, gates and raises as the reference does on T0 and T2 too (gradients and
    input copies are the reference's alone)."""
    oracle = problem.oracle[PROBLEM]
    for seed in (problem.spec.public_seed, problem.grading_seeds[0]):
        for check in (c for c in problem.spec.checks if c.cases and c.tier in ("T0", "T2")):
            if {"grads", "connected", "inputs_unchanged"} & set(check.compare):
                continue
            total = len({_group_key(i, c) for i, c in enumerate(_calls(problem, check, seed))})
            passed = _passed_groups(problem, check, seed, {"oracle": oracle})["oracle"]
            assert len(passed) == total, f"seed {seed}, {check.id}"


# ---------------------------------------------------------------- the cases keep their edge


def _selection_scores(call: Call) -> torch.Tensor:
    kw = call.kwargs
    logits = kw["router_logits"].to(torch.float64)
    if kw.get("score_function", "softmax") == "softmax":
        return logits
    bias = kw.get("expert_bias")
    return torch.sigmoid(logits) + (0.0 if bias is None else bias.to(torch.float64))


def _kth_gap(scores: torch.Tensor, top_k: int) -> torch.Tensor:
    top = scores.topk(top_k + 1, dim=1).values
    return top[:, top_k - 1] - top[:, top_k]


def test_no_graded_token_ties_at_the_kth_score(problem: Problem) -> None:
    """Every valid call without a replay routes each token by a clear margin: in the score the statement names,
    or (for sigmoids too small to separate) in the logits, which sigmoid ranks the same way."""
    ties = []
    for seed in all_seeds(problem):
        for check in (c for c in problem.spec.checks if c.cases and c.tier != "T0"):
            for call in _calls(problem, check, seed):
                kw = call.kwargs
                if "replay_idx" in kw or "raised" in observe(problem.reference[PROBLEM], call):
                    continue
                top_k, experts = kw["top_k"], kw["router_logits"].shape[1]
                if top_k == experts or kw["router_logits"].shape[0] == 0:
                    continue
                margin = _kth_gap(_selection_scores(call), top_k)
                if kw.get("score_function") == "sigmoid" and kw.get("expert_bias") is None:
                    margin = torch.maximum(margin, _kth_gap(kw["router_logits"].to(torch.float64), top_k))
                if float(margin.min()) < 5e-5:
                    ties.append(f"seed {seed}, {check.id}, {call.label}: margin {float(margin.min()):.3g}")
    assert not ties, "\n".join(ties[:10])


def test_replayed_rows_leave_the_current_top_k(problem: Problem) -> None:
    for seed in all_seeds(problem):
        for call in _calls(problem, _check(problem, "replay_overrides_topk"), seed):
            current = _selection_scores(call).topk(call.kwargs["top_k"], dim=1).indices.sort(dim=1).values
            replayed = call.kwargs["replay_idx"].long().sort(dim=1).values
            assert bool((current != replayed).any(dim=1).all()), f"seed {seed}, {call.label}"


def test_edge_cases_keep_their_edge_on_every_seed(problem: Problem) -> None:
    """The known-wrong solution of each edge differs from the reference on every call of its check."""
    edges = {
        "zero_gates_on_route": "map_from_positive_gates",
        "sigmoid_epsilon": "eps_dropped",
        "renormalized_softmax": "full_softmax_masked",
        "sigmoid_single_expert": "sigmoid_k1_normalized",
        "expert_bias_selection": "bias_ignored",
        "replay_ignores_bias": "bias_in_replayed_gates",
    }
    reference = problem.reference[PROBLEM]
    for check_id, solution in edges.items():
        wrong = _wrong(problem, solution)
        for seed in all_seeds(problem):
            for call in _calls(problem, _check(problem, check_id), seed):
                (gates, route), (their_gates, their_route) = _outputs(reference, call), _outputs(wrong, call)
                same = torch.equal(route, their_route) and torch.allclose(
                    gates, their_gates, rtol=1e-3, atol=1e-6, equal_nan=True
                )
                assert not same, f"seed {seed}, {check_id}: {call.label} does not tell {solution} apart"


def test_bfloat16_sigmoid_cases_swap_an_expert_when_rounded_early(problem: Problem) -> None:
    wrong = _wrong(problem, "bf16_no_upcast")
    for seed in all_seeds(problem):
        for call in _calls(problem, _check(problem, "bf16_upcast"), seed):
            if call.kwargs.get("score_function") != "sigmoid":
                continue
            _, route = _outputs(problem.reference[PROBLEM], call)
            _, rounded_route = _outputs(wrong, call)
            assert int((route != rounded_route).any(dim=1).sum()) >= 2, f"seed {seed}, {call.label}"


def test_selected_gates_underflow_to_zero_on_the_route(problem: Problem) -> None:
    for seed in all_seeds(problem):
        for call in _calls(problem, _check(problem, "zero_gates_on_route"), seed):
            gates, route = _outputs(problem.reference[PROBLEM], call)
            assert bool((route & (gates == 0)).any()), f"seed {seed}, {call.label}"


@pytest.mark.parametrize("check_id", ["empty_tokens", "argument_errors", "replay_errors", "option_errors"])
def test_constant_answers_share_a_group_with_an_input_dependent_one(problem: Problem, check_id: str) -> None:
    groups: dict[object, list[bool]] = {}
    for index, call in enumerate(_calls(problem, _check(problem, check_id), problem.spec.public_seed)):
        observed = observe(problem.reference[call.function], call)
        depends = "raised" not in observed and call.kwargs["router_logits"].numel() > 0
        groups.setdefault(_group_key(index, call), []).append(depends)
    assert all(any(flags) and not all(flags) for flags in groups.values())


# ---------------------------------------------------------------- the toy shows what the statement says


def test_reference_series_cover_every_check_and_plot(problem: Problem, reference_toy: dict[str, torch.Tensor]) -> None:
    names = {name for check in problem.spec.checks for name in check.series}
    names |= {plot.x for plot in problem.spec.plots} | {line.y for plot in problem.spec.plots for line in plot.lines}
    assert names <= set(reference_toy), sorted(names - set(reference_toy))
    assert all(v.dtype == torch.float64 and v.dim() == 1 and v.numel() <= 1001 for v in reference_toy.values())


def test_toy_reproduces_the_known_values_on_the_even_grid(problem: Problem) -> None:
    toy = problem.experiment_module
    x = torch.linspace(-2.0, 2.0, 2001, dtype=torch.float64)
    (result,) = toy.mixture(problem.reference[PROBLEM], x, [toy.BASE_SCALE], torch.arange(4), torch.Generator())
    assert int(result["mismatch"].sum()) == KNOWN_SWITCHES
    assert float(result["diff_no_replay"].max()) == pytest.approx(KNOWN_JUMP, abs=1e-6)
    assert float(result["diff_replay"].max()) == pytest.approx(KNOWN_SAME_ROUTE, abs=1e-6)


def test_replay_removes_the_jumps_but_not_the_same_route_term(reference_toy: dict[str, torch.Tensor]) -> None:
    switched = reference_toy["route_mismatch"].bool()
    assert 10 <= int(switched.sum()) <= 30
    assert float(reference_toy["diff_no_replay"][switched].min()) > 0.1
    assert float(reference_toy["diff_replay"].max()) < 0.007
    assert float(reference_toy["diff_replay"].min()) > 0  # the same-route term is still there
    counts, jump, kept = (reference_toy[k] for k in ("mismatch_count", "max_diff_no_replay", "max_diff_replay"))
    assert float(counts[0]) <= 1 and float(counts[-1]) > 100
    assert bool((jump[counts > 0] > 0.1).all())
    assert bool((kept < 0.1).all()) and 1e-3 < float(kept.min()) < 2e-3


def test_gradient_under_replay_is_the_analytic_one(reference_toy: dict[str, torch.Tensor]) -> None:
    on_route = torch.zeros_like(reference_toy["grad_x"])
    for j in range(4):
        numeric, exact = reference_toy[f"grad_e{j}"], reference_toy[f"analytic_e{j}"]
        torch.testing.assert_close(numeric, exact, rtol=0, atol=1e-8)
        on_route += (numeric != 0).to(torch.float64)
    assert bool((on_route == 2).all())  # two selected experts carry gradient, the other two exactly none


GRADIENT_SERIES = [*(f"grad_e{j}" for j in range(4)), "grad_all"]


def test_the_replay_gradient_is_taken_through_the_gates_graph(
    problem: Problem, reference_toy: dict[str, torch.Tensor]
) -> None:
    """Gates with the reference's values and a cut or a straight-through graph lose the gradient curves and only
    them: the toy differentiates the learner's gates, not their values."""
    detached = _toy(problem, _wrong(problem, "detached_gates"), problem.spec.public_seed)
    assert not set(GRADIENT_SERIES) & set(detached)
    torch.testing.assert_close(detached["log_max_diff_replay"], reference_toy["log_max_diff_replay"])
    straight = _toy(problem, _wrong(problem, "straight_through_gates"), problem.spec.public_seed)
    for name, value in reference_toy.items():
        if name in GRADIENT_SERIES:
            assert float((straight[name] - value).abs().max()) > 0.1, name
        else:
            torch.testing.assert_close(straight[name], value, rtol=0, atol=1e-12, equal_nan=True)


# ---------------------------------------------------------------- end to end, through the CLI


def test_correct_sample_scores_full_marks(graded: dict[str, dict[str, Any]]) -> None:
    report = graded["kim_gather_scatter"]
    assert_full_marks(report)
    assert sorted(report["artifacts"]) == sorted(
        f"{p}.png" for p in ("route_profile", "shift_sweep", "route_switches", "replay_gradient")
    )


def test_top_k_of_probabilities_sample_is_charged_once_and_named(graded: dict[str, dict[str, Any]]) -> None:
    report = graded["leo_topk_of_probs"]
    lost = {c["id"] for c in checks_of(report).values() if c["score"] < c["max_score"]}
    # the misreading owns the softmax oracle and the toys whose curves it changes, beside its own edge check
    owners = {"renormalized_softmax", "oracle_softmax", "zero_gates_on_route"} | T3_CHECKS
    assert "renormalized_softmax" in lost and lost <= owners
    assert report["diagnosis"][0]["id"] == "softmax_not_renormalized"


def test_float32_arithmetic_is_charged_in_the_precision_check_alone_and_named(
    graded: dict[str, dict[str, Any]],
) -> None:
    """float64 results computed in float32 pass every check that compares at float32's tolerance, so none of
    those passing cases counts against the diagnosis."""
    report = graded["float32_copy"]
    lost = {c["id"] for c in checks_of(report).values() if c["score"] < c["max_score"]}
    assert lost == {"float64_precision"}
    assert report["score"] == pytest.approx(98.0)
    assert report["diagnosis"][0]["id"] == "float64_computed_in_float32"


def test_a_misreading_of_form_buys_no_toy_series(graded: dict[str, dict[str, Any]]) -> None:
    """A float routing map breaks the toy as the declared misreading's own does; a file that also ignores replay
    is not that misreading, and the series it fails to make are not credited."""
    report, twin = graded["no_replay_float_map"], graded["no_replay"]
    toy = [c for c in checks_of(report).values() if c["id"] in T3_CHECKS]
    assert toy and all(c["score"] == 0 and c["cases_followed_through"] == 0 for c in toy)
    assert report["score"] <= twin["score"]
